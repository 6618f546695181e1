#include "frugal/quantize/nvfp4_activation_backend.h"

#include "frugal/quant/methods/nvfp4_activation.h"

namespace frugal::quantize {

Nvfp4ActivationBackend::Nvfp4ActivationBackend(const Model& model, Backend& inner) : ForwardingBackend(inner) {
  const auto& layers = model.weights().layers;
  for (size_t il = 0; il < layers.size(); ++il) {
    const LayerWeights& L = layers[il];
    const std::string p = "blk." + std::to_string(il) + ".";
    const std::pair<const WeightTensor*, const char*> mats[] = {
        {&L.wq, "attn_q"},       {&L.wk, "attn_k"}, {&L.wv, "attn_v"},      {&L.wo, "attn_output"},
        {&L.w_gate, "ffn_gate"}, {&L.w_up, "ffn_up"}, {&L.w_down, "ffn_down"}};
    for (const auto& [w, nm] : mats) {
      if (w->data == nullptr) continue;
      if (w->cols % quant::methods::kNvfp4ActGroup == 0) {
        quantized_.insert(w->data);
      } else {
        skipped_.push_back(p + nm);
      }
    }
  }
}

void Nvfp4ActivationBackend::matmul(const WeightTensor& w, const float* x, int64_t n, float* y, const float* bias) {
  if (quantized_.count(w.data) == 0) {
    inner_.matmul(w, x, n, y, bias);
    return;
  }
  const auto cols = static_cast<size_t>(w.cols);
  scratch_.resize(static_cast<size_t>(n) * cols);
  for (int64_t r = 0; r < n; ++r) {
    quant::methods::nvfp4_fake_quantize_row(x + static_cast<size_t>(r) * cols, scratch_.data() + static_cast<size_t>(r) * cols,
                                            w.cols);
  }
  ++quantized_products_;
  inner_.matmul(w, scratch_.data(), n, y, bias);
}

}  // namespace frugal::quantize
