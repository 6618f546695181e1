// The Fisher file FAMPWQ allocates from (written by train/fisher.py): a GGUF with one F32 tensor
// per quantizable weight, named and shaped like the weight, holding the empirical Fisher diagonal
// E[g^2] of the calibration loss, plus provenance metadata (fisher.model, fisher.windows,
// fisher.tokens, fisher.context).
#pragma once

#include <memory>
#include <string>

#include "frugal/core/status.h"
#include "frugal/format/gguf.h"

namespace frugal::quantize {

class FisherFile {
 public:
  static Result<FisherFile> open(const std::string& path);
  // The Fisher values of model tensor `weight` (n_elements floats, the weight's layout), or an
  // error naming the tensor: missing, not F32, another shape, a negative or non-finite value.
  Result<const float*> values_for(const GgufTensorInfo& weight) const;
  const std::string& path() const { return path_; }
  int64_t windows() const { return windows_; }
  int64_t tokens() const { return tokens_; }

 private:
  std::string path_;
  std::unique_ptr<GgufFile> file_;
  int64_t windows_ = 0;
  int64_t tokens_ = 0;
};

}  // namespace frugal::quantize
