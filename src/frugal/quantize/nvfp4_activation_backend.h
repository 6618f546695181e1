// W4A4 emulation: a Backend that quantizes the input of every linear layer of the transformer
// blocks (attn_q/k/v/output, ffn_gate/up/down) to NVFP4 and back (quant/methods/nvfp4_activation.h)
// before the wrapped backend multiplies it with the weight, whatever the weight's type. With NVFP4
// weights this is the arithmetic of an NVFP4 x NVFP4 kernel up to the accumulation order; with
// float weights it isolates the activations' error. The embedding lookup and the output
// projection stay in float (W4A4 recipes keep the LM head unquantized), and every other op is
// passed through, so the model's forward pass is not touched (as importance_collector.h wraps one).
// Scalar and single-threaded: an evaluation tool, not a fast path.
#pragma once

#include <string>
#include <unordered_set>
#include <vector>

#include "frugal/backend/forwarding_backend.h"
#include "frugal/model/model.h"

namespace frugal::quantize {

class Nvfp4ActivationBackend final : public ForwardingBackend {
 public:
  // `model` names its block weights; `inner` runs every op.
  Nvfp4ActivationBackend(const Model& model, Backend& inner);

  // Linear layers whose input length is not a multiple of 16 (NVFP4's group): left in float.
  const std::vector<std::string>& skipped() const { return skipped_; }
  int64_t quantized_products() const { return quantized_products_; }

  std::string name() const override { return "nvfp4-act+" + inner_.name(); }
  void set_row_invariant(bool on) override { inner_.set_row_invariant(on); }
  void matmul(const WeightTensor& w, const float* x, int64_t n, float* y, const float* bias) override;

 private:
  std::unordered_set<const void*> quantized_;  // weight data of the layers whose inputs are quantized
  std::vector<std::string> skipped_;
  std::vector<float> scratch_;
  int64_t quantized_products_ = 0;
};

}  // namespace frugal::quantize
