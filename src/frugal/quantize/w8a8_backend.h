// A Backend that runs every linear layer of the transformer blocks (attn_q/k/v/output,
// ffn_gate/up/down) as W8A8 INT8 (quant/w8a8/): the weights quantized once at creation, per output
// channel, with their original scales (amax / 127) or requantized to power-of-two scales
// (quant/methods/pow2_scales.h); activations quantized per token at every product by the one
// shared quantizer; the product by a named INT8 kernel (quant/w8a8/int8_gemm.h). Every other op,
// the embedding lookup and the output projection are passed to the wrapped backend, so the model's
// forward pass is not touched (as quantize/importance_collector.h wraps one).
//
// With a `shadow` kernel the same operands (the same int8 activations and weights) also go through
// the second kernel and the two results are compared output by output, per layer: bit-identical or
// how many output-type spacings apart, and whether the int32 accumulators agree. The model goes on
// with the first kernel's result, so each layer's comparison is on identical inputs.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "frugal/backend/forwarding_backend.h"
#include "frugal/core/thread_pool.h"
#include "frugal/model/model.h"
#include "frugal/quant/methods/pow2_scales.h"
#include "frugal/quant/w8a8/int8_gemm.h"

namespace frugal::quantize {

enum class W8A8Scales : uint8_t {
  kOriginal = 0,    // amax / 127 per channel
  kPow2 = 1,        // nearest power of two, weights requantized to it
  kScalesOnly = 2,  // nearest power of two written over the scale, weights kept (the mismatch)
};
const char* w8a8_scales_name(W8A8Scales s);
Result<W8A8Scales> parse_w8a8_scales(std::string_view name);

struct W8A8Options {
  W8A8Scales scales = W8A8Scales::kOriginal;
  quant::w8a8::OutputType out = quant::w8a8::OutputType::kBF16;
  const quant::w8a8::Int8GemmKernel* kernel = nullptr;  // runs the model (required)
  const quant::w8a8::Int8GemmKernel* shadow = nullptr;  // compared on the same operands, or null
  int n_threads = 1;
};

struct W8A8LayerStats {
  std::string name;            // e.g. "blk.0.attn_q"
  int64_t k = 0;               // input length (the accumulator bound is k * 127^2)
  int64_t calls = 0;
  int64_t outputs = 0;         // outputs compared (with a shadow kernel)
  int64_t differing = 0;       // of those, not bit-identical
  int64_t max_spacings = 0;    // largest distance in output-type spacings
  int64_t acc_mismatches = 0;  // int32 accumulators that differ (exactness broken: must stay 0)
  int64_t max_abs_acc = 0;     // largest |acc| seen
  bool identical() const { return differing == 0 && acc_mismatches == 0; }
};

class W8A8Backend final : public ForwardingBackend {
 public:
  // Quantizes the linear weights of every block of `model`, read through `inner` (any weight type
  // it can look rows up in). Refuses a layer whose K breaks the int32 accumulator's bound.
  static Result<std::unique_ptr<W8A8Backend>> create(const Model& model, Backend& inner, const W8A8Options& opts);

  const std::vector<W8A8LayerStats>& layer_stats() const { return stats_; }
  void reset_stats();
  const quant::methods::Pow2Stats& pow2_stats() const { return pow2_; }
  const W8A8Options& options() const { return opts_; }

  std::string name() const override { return "w8a8(" + std::string(opts_.kernel->name()) + ")+" + inner_.name(); }
  void set_row_invariant(bool on) override { inner_.set_row_invariant(on); }  // INT8 products are anyway
  void matmul(const WeightTensor& w, const float* x, int64_t n, float* y, const float* bias) override;

 private:
  W8A8Backend(Backend& inner, const W8A8Options& opts);
  struct Layer {
    quant::w8a8::Int8Weights w;
    size_t stats = 0;  // index into stats_
  };
  Status add_layer(const WeightTensor& w, const std::string& name);

  W8A8Options opts_;
  std::unique_ptr<ThreadPool> pool_;
  std::unordered_map<const void*, Layer> layers_;  // weight data -> its INT8 form
  std::vector<W8A8LayerStats> stats_;              // in model order
  quant::methods::Pow2Stats pow2_;
  quant::w8a8::Int8Activations act_;
  std::vector<int32_t> acc_, shadow_acc_;
  std::vector<float> shadow_y_;
};

}  // namespace frugal::quantize
