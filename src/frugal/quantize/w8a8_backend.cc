#include "frugal/quantize/w8a8_backend.h"

#include <cstdlib>
#include <cstring>
#include <numeric>

namespace frugal::quantize {

namespace w8 = quant::w8a8;

const char* w8a8_scales_name(W8A8Scales s) {
  switch (s) {
    case W8A8Scales::kOriginal: return "original";
    case W8A8Scales::kPow2: return "pow2";
    case W8A8Scales::kScalesOnly: return "scales-only";
  }
  return "?";
}

Result<W8A8Scales> parse_w8a8_scales(std::string_view name) {
  for (W8A8Scales s : {W8A8Scales::kOriginal, W8A8Scales::kPow2, W8A8Scales::kScalesOnly}) {
    if (name == w8a8_scales_name(s)) return s;
  }
  return error(ErrorCode::kInvalidArgument, "unknown W8A8 scales '{}' (original, pow2, scales-only)", name);
}

W8A8Backend::W8A8Backend(Backend& inner, const W8A8Options& opts) : ForwardingBackend(inner), opts_(opts) {
  if (opts_.n_threads > 1) pool_ = std::make_unique<ThreadPool>(opts_.n_threads);
}

Result<std::unique_ptr<W8A8Backend>> W8A8Backend::create(const Model& model, Backend& inner,
                                                          const W8A8Options& opts) {
  if (opts.kernel == nullptr) return error(ErrorCode::kInvalidArgument, "w8a8: no INT8 kernel given");
  std::unique_ptr<W8A8Backend> be(new W8A8Backend(inner, opts));
  const auto& layers = model.weights().layers;
  for (size_t il = 0; il < layers.size(); ++il) {
    const LayerWeights& L = layers[il];
    const std::string p = "blk." + std::to_string(il) + ".";
    const std::pair<const WeightTensor*, const char*> mats[] = {
        {&L.wq, "attn_q"},      {&L.wk, "attn_k"},    {&L.wv, "attn_v"},     {&L.wo, "attn_output"},
        {&L.w_gate, "ffn_gate"}, {&L.w_up, "ffn_up"}, {&L.w_down, "ffn_down"}};
    for (const auto& [w, nm] : mats) {
      if (w->data == nullptr) continue;
      FRUGAL_RETURN_IF_ERROR(be->add_layer(*w, p + nm));
    }
  }
  return be;
}

Status W8A8Backend::add_layer(const WeightTensor& w, const std::string& name) {
  if (!w8::accumulator_fits(w.cols)) {
    return error(ErrorCode::kNotSupported,
                 "w8a8: tensor '{}' has K = {}: int8 products could overflow the int32 accumulator "
                 "(|acc| <= K * 127^2 needs K <= {})",
                 name, w.cols, w8::kMaxExactK);
  }
  if (layers_.count(w.data) != 0) return error(ErrorCode::kInvalidArgument, "w8a8: '{}' shares another tensor's data", name);
  std::vector<int32_t> ids(static_cast<size_t>(w.rows));
  std::iota(ids.begin(), ids.end(), 0);
  std::vector<float> dense(static_cast<size_t>(w.rows * w.cols));
  inner_.get_rows(w, ids.data(), w.rows, dense.data());  // includes the weight's own scale
  Layer L;
  L.w = w8::quantize_weights(dense.data(), w.rows, w.cols);
  if (opts_.scales == W8A8Scales::kPow2) {
    quant::methods::Pow2Stats st;
    L.w = quant::methods::requantize_pow2(L.w, &st);
    pow2_.rows += st.rows;
    pow2_.rows_rescaled += st.rows_rescaled;
    pow2_.clipped += st.clipped;
  } else if (opts_.scales == W8A8Scales::kScalesOnly) {
    L.w = quant::methods::rewrite_scales_only(L.w);
  }
  L.stats = stats_.size();
  W8A8LayerStats s;
  s.name = name;
  s.k = w.cols;
  stats_.push_back(s);
  layers_.emplace(w.data, std::move(L));
  return ok_status();
}

void W8A8Backend::reset_stats() {
  for (auto& s : stats_) {
    const std::string name = s.name;
    const int64_t k = s.k;
    s = W8A8LayerStats{};
    s.name = name;
    s.k = k;
  }
}

void W8A8Backend::matmul(const WeightTensor& w, const float* x, int64_t n, float* y, const float* bias) {
  auto it = layers_.find(w.data);
  if (it == layers_.end()) {
    inner_.matmul(w, x, n, y, bias);
    return;
  }
  const Layer& L = it->second;
  W8A8LayerStats& st = stats_[L.stats];
  w8::quantize_activations(x, n, w.cols, act_);
  const size_t n_out = static_cast<size_t>(n * L.w.rows);
  acc_.resize(n_out);
  w8::GemmArgs g;
  g.a = &act_;
  g.w = &L.w;
  g.bias = bias;
  g.out = opts_.out;
  g.y = y;
  g.acc = acc_.data();
  g.pool = pool_.get();
  opts_.kernel->gemm(g);
  ++st.calls;
  for (int32_t a : acc_) st.max_abs_acc = std::max<int64_t>(st.max_abs_acc, std::llabs(a));
  if (opts_.shadow == nullptr) return;
  shadow_y_.resize(n_out);
  shadow_acc_.resize(n_out);
  w8::GemmArgs h = g;
  h.y = shadow_y_.data();
  h.acc = shadow_acc_.data();
  opts_.shadow->gemm(h);
  st.outputs += static_cast<int64_t>(n_out);
  for (size_t i = 0; i < n_out; ++i) {
    if (acc_[i] != shadow_acc_[i]) ++st.acc_mismatches;
    if (std::memcmp(&y[i], &shadow_y_[i], sizeof(float)) != 0) {
      ++st.differing;
      st.max_spacings = std::max(st.max_spacings, w8::spacings_apart(y[i], shadow_y_[i], opts_.out));
    }
  }
}

}  // namespace frugal::quantize
