// Activation importance for `frugal imatrix`: the sum of squared activations entering every
// weight column, counted as llama-imatrix counts it (per matrix product with at least 16 rows,
// weights of the blk.* layers; values[j] / counts[j] is the mean square of input column j).
//
// It is a Backend that wraps the one that runs the model: every op is passed through unchanged,
// and matmul's input is observed on the way, so the model's forward pass is not touched.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "frugal/backend/forwarding_backend.h"
#include "frugal/model/model.h"
#include "frugal/quantize/imatrix_file.h"

namespace frugal::quantize {

class ImportanceCollector final : public ForwardingBackend {
 public:
  // `model` names the weights (by their data pointers into its file); `inner` runs every op.
  ImportanceCollector(const Model& model, Backend& inner);

  // The statistics so far, in the .dat file's terms (values = mean square * ncall).
  Imatrix result(int32_t chunks, const std::string& dataset) const;

  void matmul(const WeightTensor& w, const float* x, int64_t n, float* y, const float* bias) override;

 private:
  struct Stats {
    int32_t ncall = 0;
    std::vector<double> sum;      // [cols] sum of x^2 (double: millions of terms)
    std::vector<int64_t> counts;  // [cols] rows that contributed
  };
  std::unordered_map<const void*, std::string> names_;  // weight data -> tensor name (blk.* only)
  std::unordered_map<std::string, Stats> stats_;
};

struct ImatrixRunOptions {
  int32_t n_ctx = 512;
  int32_t max_chunks = -1;  // -1: every whole chunk of the text
  DType kv_dtype = DType::kF16;
  TokenId bos = -1;         // replaces each chunk's first token when >= 0 (llama-imatrix does)
  std::string dataset;      // recorded in the file
  std::function<void(int32_t done, int32_t total)> progress;
};

// Runs the model over `tokens` (the whole text tokenized with BOS) in chunks of n_ctx and
// returns the importance matrix. At least one whole chunk is needed.
Result<Imatrix> collect_imatrix(Model& model, Backend& backend, const std::vector<TokenId>& tokens,
                                const ImatrixRunOptions& opts);

}  // namespace frugal::quantize
