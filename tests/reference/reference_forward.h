// An independent, deliberately plain float64 transformer forward over a GGUF file, used by tests
// as the oracle for the engine's model code (it shares nothing with src/frugal/model/).
//
// Header-only so that any test binary can use it with one #include; it needs frugal_format and
// frugal_quant (every weight is dequantized with the quant module's scalar to_float_ref).
//
// What it computes, for tokens t_0..t_{T-1} at positions 0..T-1 (facts:
// ../shared/reference/quantization.md sections 1.2-1.4):
//   x = token_embd[t]
//   per layer:  h = rmsnorm(x) * attn_norm
//               q, k, v = Wq h + bq, Wk h + bk, Wv h + bv       (biases where the file has them)
//               qwen3: q, k = per-head rmsnorm(q) * attn_q_norm, rmsnorm(k) * attn_k_norm
//               rope(q), rope(k): pair i turns by pos * theta^(-2i/n_rot) / rope_freqs[i];
//                 NORM pairs (2i, 2i+1) for llama, NEOX pairs (i, i + n_rot/2) for qwen2/qwen3;
//                 dims at or past n_rot are not rotated
//               attention per head over keys j <= i (and i - j < window when there is one),
//                 scores q.k / sqrt(head_dim), softmax, GQA: head h reads KV head h / (n_head / n_kv)
//               x += Wo attn (+ bo)
//               h = rmsnorm(x) * ffn_norm;  x += Wdown (silu(Wgate h) * Wup h)
//   logits = Wout (rmsnorm(x) * output_norm), Wout = output.weight or, when absent, token_embd.
// rmsnorm(x) = x / sqrt(mean(x^2) + eps).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "frugal/core/half.h"
#include "frugal/core/status.h"
#include "frugal/format/gguf.h"
#include "frugal/quant/fluxbin.h"
#include "frugal/quant/type_traits.h"

namespace frugal::reference {

struct RefConfig {
  std::string arch;  // general.architecture
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;  // key_length (= value_length; other cases are refused)
  int64_t n_ff = 0;
  int64_t n_vocab = 0;
  int64_t n_rot = 0;
  double rope_theta = 10000.0;
  double rms_eps = 0.0;
  bool neox = false;
  int64_t sliding_window = 0;  // {arch}.attention.sliding_window; 0 = none
};

struct RefForwardOptions {
  int64_t sliding_window = -1;  // -1: the file's; 0: none; > 0: this window
  // Roundings of an implementation, to tell which of them explains a difference between two
  // engines (all off: the exact forward). kv_f16: keys and values as an F16 cache stores them.
  // attention_operands_f16: also each query before q.k and each softmax weight before the
  // weighted sum of values, as a matrix product with an F16 operand converts the other operand
  // to F16 (ggml's CPU mul_mat does this when the cache is F16 and attention is not fused).
  bool kv_f16 = false;
  bool attention_operands_f16 = false;
};

// A dense matrix of `rows` outputs by `cols` inputs: a GGUF weight with dims [cols, rows].
struct RefMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<double> w;  // row-major
};

class ReferenceModel {
 public:
  static Result<std::unique_ptr<ReferenceModel>> load(const std::string& path);

  const RefConfig& config() const { return cfg_; }

  // Logits for every position: result[t][v], T x n_vocab.
  Result<std::vector<std::vector<double>>> forward(const std::vector<int32_t>& tokens,
                                                   const RefForwardOptions& options = {}) const;

  // Row `row` of a tensor (dims[0] elements), dequantized with to_float_ref.
  static Result<std::vector<double>> dequantize_row(const GgufTensorInfo& t, int64_t row);
  // The same times the tensor's per-tensor scale, when the file has one: the F32 scalar
  // "<base>.scale" beside "<base>.weight" (NVFP4's global scale; docs/quantization.md). FluxBin
  // rows (whose column scales and salient columns live in companion tensors) come from
  // quant::fluxbin::dequantize_row over the companions read here.
  Result<std::vector<double>> weight_row(const GgufTensorInfo& t, int64_t row) const;

 private:
  struct Layer {
    std::vector<double> attn_norm, ffn_norm, q_norm, k_norm;  // q/k norms: qwen3 only
    std::vector<double> bq, bk, bv, bo;                       // empty when absent
    RefMatrix wq, wk, wv, wo, gate, up, down;
  };

  ReferenceModel() = default;
  Status load_config();
  Status load_weights();
  Result<RefMatrix> matrix(const std::string& name, int64_t cols, int64_t rows) const;
  Result<std::vector<double>> vector(const std::string& name, int64_t n, bool required) const;
  void rope(double* x, int64_t pos) const;
  void attention(const std::vector<std::vector<double>>& q, const std::vector<std::vector<double>>& k,
                 const std::vector<std::vector<double>>& v, int64_t window, bool operands_f16,
                 std::vector<std::vector<double>>& out) const;

  std::unique_ptr<GgufFile> file_;
  RefConfig cfg_;
  std::vector<Layer> layers_;
  std::vector<double> output_norm_;
  std::vector<double> rope_freqs_;  // empty: all 1
  const GgufTensorInfo* token_embd_ = nullptr;
  const GgufTensorInfo* lm_head_ = nullptr;  // output.weight, or token_embd when tied
};

// The negative log-likelihood of each scored token when `tokens` are read as llama-perplexity
// reads them: window w is tokens [w n_ctx, (w+1) n_ctx), its first token replaced by `bos` (when
// >= 0), positions n_ctx/2 .. n_ctx-2 scoring the token after them; window after window.
Result<std::vector<double>> window_nll(const ReferenceModel& ref, const std::vector<int32_t>& tokens, int32_t n_ctx,
                                       int32_t bos, const RefForwardOptions& options = {});

// ---------------------------------------------------------------------------------------------
// Implementation.

namespace detail {

// x as the nearest binary16 (via float, as an engine computing in float converts it).
inline double round_f16(double x) { return fp16_to_f32(f32_to_fp16(static_cast<float>(x))); }

inline std::vector<double> rmsnorm(const std::vector<double>& x, const std::vector<double>& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
  return y;
}

inline std::vector<double> matvec(const RefMatrix& m, const std::vector<double>& x, const std::vector<double>& bias) {
  std::vector<double> y(static_cast<size_t>(m.rows));
  for (int64_t r = 0; r < m.rows; ++r) {
    const double* row = m.w.data() + r * m.cols;
    double s = 0;
    for (int64_t c = 0; c < m.cols; ++c) s += row[c] * x[static_cast<size_t>(c)];
    y[static_cast<size_t>(r)] = s + (bias.empty() ? 0.0 : bias[static_cast<size_t>(r)]);
  }
  return y;
}

}  // namespace detail

inline Result<std::vector<double>> ReferenceModel::dequantize_row(const GgufTensorInfo& t, int64_t row) {
  const TypeTraits* tr = type_traits(t.type);
  if (tr == nullptr || tr->to_float_ref == nullptr) {
    return error(ErrorCode::kNotSupported, "tensor '{}': no reference dequantizer for type {}", t.name,
                 dtype_name(t.type));
  }
  const int64_t n = t.dims[0];
  std::vector<float> f(static_cast<size_t>(n));
  tr->to_float_ref(t.data + static_cast<size_t>(row * row_bytes(t.type, n)), f.data(), n);
  return std::vector<double>(f.begin(), f.end());
}

inline Result<std::vector<double>> ReferenceModel::weight_row(const GgufTensorInfo& t, int64_t row) const {
  if (t.type == DType::kFLUXBIN) {
    namespace fb = quant::fluxbin;
    const int64_t cols = t.dims[0], rows = t.dims.size() > 1 ? t.dims[1] : 1, groups = cols / fb::kGroup;
    const GgufTensorInfo* c = file_->find_tensor(fb::companion_name(t.name, fb::kColsPart));
    if (c == nullptr || c->type != DType::kF16 || c->n_elements() != 2 * cols) {
      return error(ErrorCode::kCorrupt, "tensor '{}': no column scales", t.name);
    }
    fb::View v{rows, cols, 0, t.data, reinterpret_cast<const uint16_t*>(c->data), nullptr, nullptr};
    if (const GgufTensorInfo* idx = file_->find_tensor(fb::companion_name(t.name, fb::kSalientIdxPart))) {
      const GgufTensorInfo* vals = file_->find_tensor(fb::companion_name(t.name, fb::kSalientValsPart));
      v.salient = groups > 0 ? static_cast<int>(idx->n_elements() / groups) : 0;
      if (vals == nullptr || v.salient <= 0 || v.salient * groups != idx->n_elements() ||
          vals->n_elements() != rows * groups * fb::salient_row_bytes(v.salient)) {
        return error(ErrorCode::kCorrupt, "tensor '{}': malformed salient columns", t.name);
      }
      v.salient_idx = idx->data;
      v.salient_vals = vals->data;
    }
    std::vector<float> f(static_cast<size_t>(cols));
    fb::dequantize_row(v, row, f.data());
    return std::vector<double>(f.begin(), f.end());
  }
  FRUGAL_ASSIGN_OR_RETURN(std::vector<double> r, dequantize_row(t, row));
  const std::string suffix = ".weight";
  if (t.name.size() <= suffix.size() || t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return r;
  }
  const std::string scale_name = t.name.substr(0, t.name.size() - suffix.size()) + ".scale";
  const GgufTensorInfo* s = file_->find_tensor(scale_name);
  if (s == nullptr) return r;
  if (s->type != DType::kF32 || s->n_elements() != 1) {
    return error(ErrorCode::kCorrupt, "tensor '{}': a per-tensor scale must be one F32", scale_name);
  }
  float g;
  std::memcpy(&g, s->data, sizeof g);
  for (double& v : r) v *= static_cast<double>(g);
  return r;
}

inline Result<std::unique_ptr<ReferenceModel>> ReferenceModel::load(const std::string& path) {
  std::unique_ptr<ReferenceModel> m(new ReferenceModel());
  FRUGAL_ASSIGN_OR_RETURN(m->file_, GgufFile::open(path));
  FRUGAL_RETURN_IF_ERROR(m->load_config().with_context(path));
  FRUGAL_RETURN_IF_ERROR(m->load_weights().with_context(path));
  return m;
}

inline Status ReferenceModel::load_config() {
  const GgufFile& f = *file_;
  FRUGAL_ASSIGN_OR_RETURN(cfg_.arch, f.get_string("general.architecture"));
  const std::string& a = cfg_.arch;
  if (a == "llama") {
    cfg_.neox = false;
  } else if (a == "qwen2" || a == "qwen3") {
    cfg_.neox = true;
  } else {
    return error(ErrorCode::kNotSupported, "architecture '{}' (reference knows llama, qwen2, qwen3)", a);
  }
  FRUGAL_ASSIGN_OR_RETURN(cfg_.n_embd, f.get_int(a + ".embedding_length"));
  FRUGAL_ASSIGN_OR_RETURN(cfg_.n_layer, f.get_int(a + ".block_count"));
  FRUGAL_ASSIGN_OR_RETURN(cfg_.n_head, f.get_int(a + ".attention.head_count"));
  FRUGAL_ASSIGN_OR_RETURN(cfg_.n_head_kv, f.get_int_or(a + ".attention.head_count_kv", cfg_.n_head));
  FRUGAL_ASSIGN_OR_RETURN(cfg_.n_ff, f.get_int(a + ".feed_forward_length"));
  FRUGAL_ASSIGN_OR_RETURN(cfg_.head_dim, f.get_int_or(a + ".attention.key_length", cfg_.n_embd / cfg_.n_head));
  FRUGAL_ASSIGN_OR_RETURN(int64_t head_dim_v, f.get_int_or(a + ".attention.value_length", cfg_.head_dim));
  if (head_dim_v != cfg_.head_dim) {
    return error(ErrorCode::kNotSupported, "key_length {} != value_length {}", cfg_.head_dim, head_dim_v);
  }
  FRUGAL_ASSIGN_OR_RETURN(cfg_.n_rot, f.get_int_or(a + ".rope.dimension_count", cfg_.head_dim));
  FRUGAL_ASSIGN_OR_RETURN(cfg_.rope_theta, f.get_float_or(a + ".rope.freq_base", 10000.0));
  FRUGAL_ASSIGN_OR_RETURN(cfg_.rms_eps, f.get_float(a + ".attention.layer_norm_rms_epsilon"));
  FRUGAL_ASSIGN_OR_RETURN(cfg_.sliding_window, f.get_int_or(a + ".attention.sliding_window", 0));
  if (cfg_.n_head_kv <= 0 || cfg_.n_head % cfg_.n_head_kv != 0 || cfg_.n_rot > cfg_.head_dim || cfg_.n_rot % 2 != 0) {
    return error(ErrorCode::kCorrupt, "inconsistent heads: n_head {}, n_head_kv {}, head_dim {}, n_rot {}",
                 cfg_.n_head, cfg_.n_head_kv, cfg_.head_dim, cfg_.n_rot);
  }
  token_embd_ = f.find_tensor("token_embd.weight");
  if (token_embd_ == nullptr || token_embd_->dims.size() != 2 || token_embd_->dims[0] != cfg_.n_embd) {
    return error(ErrorCode::kCorrupt, "tensor 'token_embd.weight' missing or not [n_embd={}, n_vocab]", cfg_.n_embd);
  }
  cfg_.n_vocab = token_embd_->dims[1];
  lm_head_ = f.find_tensor("output.weight");
  if (lm_head_ == nullptr) lm_head_ = token_embd_;
  if (lm_head_->dims.size() != 2 || lm_head_->dims[0] != cfg_.n_embd || lm_head_->dims[1] != cfg_.n_vocab) {
    return error(ErrorCode::kCorrupt, "tensor 'output.weight' is not [{}, {}]", cfg_.n_embd, cfg_.n_vocab);
  }
  return ok_status();
}

inline Result<RefMatrix> ReferenceModel::matrix(const std::string& name, int64_t cols, int64_t rows) const {
  const GgufTensorInfo* t = file_->find_tensor(name);
  if (t == nullptr) return error(ErrorCode::kNotFound, "tensor '{}' not found", name);
  if (t->dims.size() != 2 || t->dims[0] != cols || t->dims[1] != rows) {
    return error(ErrorCode::kCorrupt, "tensor '{}': expected dims [{}, {}]", name, cols, rows);
  }
  RefMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.w.reserve(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    FRUGAL_ASSIGN_OR_RETURN(std::vector<double> row, weight_row(*t, r));
    m.w.insert(m.w.end(), row.begin(), row.end());
  }
  return m;
}

inline Result<std::vector<double>> ReferenceModel::vector(const std::string& name, int64_t n, bool required) const {
  const GgufTensorInfo* t = file_->find_tensor(name);
  if (t == nullptr) {
    if (required) return error(ErrorCode::kNotFound, "tensor '{}' not found", name);
    return std::vector<double>{};
  }
  if (t->dims.size() != 1 || t->dims[0] != n) {
    return error(ErrorCode::kCorrupt, "tensor '{}': expected dims [{}]", name, n);
  }
  return dequantize_row(*t, 0);
}

inline Status ReferenceModel::load_weights() {
  const RefConfig& c = cfg_;
  const int64_t q_dim = c.n_head * c.head_dim;
  const int64_t kv_dim = c.n_head_kv * c.head_dim;
  FRUGAL_ASSIGN_OR_RETURN(output_norm_, vector("output_norm.weight", c.n_embd, true));
  FRUGAL_ASSIGN_OR_RETURN(rope_freqs_, vector("rope_freqs.weight", c.n_rot / 2, false));
  layers_.resize(static_cast<size_t>(c.n_layer));
  for (int64_t il = 0; il < c.n_layer; ++il) {
    Layer& l = layers_[static_cast<size_t>(il)];
    const std::string p = "blk." + std::to_string(il) + ".";
    FRUGAL_ASSIGN_OR_RETURN(l.attn_norm, vector(p + "attn_norm.weight", c.n_embd, true));
    FRUGAL_ASSIGN_OR_RETURN(l.ffn_norm, vector(p + "ffn_norm.weight", c.n_embd, true));
    FRUGAL_ASSIGN_OR_RETURN(l.wq, matrix(p + "attn_q.weight", c.n_embd, q_dim));
    FRUGAL_ASSIGN_OR_RETURN(l.wk, matrix(p + "attn_k.weight", c.n_embd, kv_dim));
    FRUGAL_ASSIGN_OR_RETURN(l.wv, matrix(p + "attn_v.weight", c.n_embd, kv_dim));
    FRUGAL_ASSIGN_OR_RETURN(l.wo, matrix(p + "attn_output.weight", q_dim, c.n_embd));
    FRUGAL_ASSIGN_OR_RETURN(l.bq, vector(p + "attn_q.bias", q_dim, false));
    FRUGAL_ASSIGN_OR_RETURN(l.bk, vector(p + "attn_k.bias", kv_dim, false));
    FRUGAL_ASSIGN_OR_RETURN(l.bv, vector(p + "attn_v.bias", kv_dim, false));
    FRUGAL_ASSIGN_OR_RETURN(l.bo, vector(p + "attn_output.bias", c.n_embd, false));
    const bool qk_norm = c.arch == "qwen3";
    FRUGAL_ASSIGN_OR_RETURN(l.q_norm, vector(p + "attn_q_norm.weight", c.head_dim, qk_norm));
    FRUGAL_ASSIGN_OR_RETURN(l.k_norm, vector(p + "attn_k_norm.weight", c.head_dim, qk_norm));
    FRUGAL_ASSIGN_OR_RETURN(l.gate, matrix(p + "ffn_gate.weight", c.n_embd, c.n_ff));
    FRUGAL_ASSIGN_OR_RETURN(l.up, matrix(p + "ffn_up.weight", c.n_embd, c.n_ff));
    FRUGAL_ASSIGN_OR_RETURN(l.down, matrix(p + "ffn_down.weight", c.n_ff, c.n_embd));
  }
  return ok_status();
}

inline void ReferenceModel::rope(double* x, int64_t pos) const {
  const int64_t half = cfg_.n_rot / 2;
  for (int64_t i = 0; i < half; ++i) {
    double theta = static_cast<double>(pos) * std::pow(cfg_.rope_theta, -2.0 * static_cast<double>(i) /
                                                                            static_cast<double>(cfg_.n_rot));
    if (!rope_freqs_.empty()) theta /= rope_freqs_[static_cast<size_t>(i)];
    const int64_t i0 = cfg_.neox ? i : 2 * i;
    const int64_t i1 = cfg_.neox ? i + half : 2 * i + 1;
    const double x0 = x[i0];
    const double x1 = x[i1];
    x[i0] = x0 * std::cos(theta) - x1 * std::sin(theta);
    x[i1] = x0 * std::sin(theta) + x1 * std::cos(theta);
  }
}

inline void ReferenceModel::attention(const std::vector<std::vector<double>>& q,
                                      const std::vector<std::vector<double>>& k,
                                      const std::vector<std::vector<double>>& v, int64_t window,
                                      bool operands_f16, std::vector<std::vector<double>>& out) const {
  const auto op = [operands_f16](double x) { return operands_f16 ? detail::round_f16(x) : x; };
  const int64_t T = static_cast<int64_t>(q.size());
  const int64_t hd = cfg_.head_dim;
  const int64_t group = cfg_.n_head / cfg_.n_head_kv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (int64_t i = 0; i < T; ++i) {
    std::vector<double>& o = out[static_cast<size_t>(i)];
    o.assign(static_cast<size_t>(cfg_.n_head * hd), 0.0);
    const int64_t j0 = window > 0 ? std::max<int64_t>(0, i - window + 1) : 0;
    for (int64_t h = 0; h < cfg_.n_head; ++h) {
      const int64_t kvh = h / group;
      std::vector<double> qh(static_cast<size_t>(hd));
      for (int64_t e = 0; e < hd; ++e) qh[static_cast<size_t>(e)] = op(q[static_cast<size_t>(i)][static_cast<size_t>(h * hd + e)]);
      std::vector<double> s;
      double mx = -INFINITY;
      for (int64_t j = j0; j <= i; ++j) {
        const double* kh = k[static_cast<size_t>(j)].data() + kvh * hd;
        double d = 0;
        for (int64_t e = 0; e < hd; ++e) d += qh[static_cast<size_t>(e)] * kh[e];
        s.push_back(d * scale);
        mx = std::max(mx, s.back());
      }
      double sum = 0;
      for (double& e : s) sum += (e = std::exp(e - mx));
      for (int64_t j = j0; j <= i; ++j) {
        const double p = op(s[static_cast<size_t>(j - j0)] / sum);
        const double* vh = v[static_cast<size_t>(j)].data() + kvh * hd;
        for (int64_t e = 0; e < hd; ++e) o[static_cast<size_t>(h * hd + e)] += p * vh[e];
      }
    }
  }
}

inline Result<std::vector<std::vector<double>>> ReferenceModel::forward(const std::vector<int32_t>& tokens,
                                                                        const RefForwardOptions& options) const {
  const RefConfig& c = cfg_;
  const int64_t window = options.sliding_window >= 0 ? options.sliding_window : c.sliding_window;
  const size_t T = tokens.size();
  std::vector<std::vector<double>> x(T);
  for (size_t t = 0; t < T; ++t) {
    if (tokens[t] < 0 || tokens[t] >= c.n_vocab) {
      return error(ErrorCode::kInvalidArgument, "token {} at position {} is outside the vocabulary of {}",
                   tokens[t], t, c.n_vocab);
    }
    FRUGAL_ASSIGN_OR_RETURN(x[t], weight_row(*token_embd_, tokens[t]));
  }
  std::vector<std::vector<double>> q(T), k(T), v(T), attn(T);
  for (const Layer& l : layers_) {
    for (size_t t = 0; t < T; ++t) {
      const std::vector<double> h = detail::rmsnorm(x[t], l.attn_norm, c.rms_eps);
      q[t] = detail::matvec(l.wq, h, l.bq);
      k[t] = detail::matvec(l.wk, h, l.bk);
      v[t] = detail::matvec(l.wv, h, l.bv);
      auto per_head = [&](std::vector<double>& qk, int64_t n_heads, const std::vector<double>& norm) {
        for (int64_t hh = 0; hh < n_heads; ++hh) {
          double* p = qk.data() + hh * c.head_dim;
          if (!norm.empty()) {
            const std::vector<double> n =
                detail::rmsnorm(std::vector<double>(p, p + c.head_dim), norm, c.rms_eps);
            std::copy(n.begin(), n.end(), p);
          }
          rope(p, static_cast<int64_t>(t));
        }
      };
      per_head(q[t], c.n_head, l.q_norm);
      per_head(k[t], c.n_head_kv, l.k_norm);
      if (options.kv_f16) {
        for (double& e : k[t]) e = detail::round_f16(e);
        for (double& e : v[t]) e = detail::round_f16(e);
      }
    }
    attention(q, k, v, window, options.attention_operands_f16, attn);
    for (size_t t = 0; t < T; ++t) {
      const std::vector<double> o = detail::matvec(l.wo, attn[t], l.bo);
      for (int64_t e = 0; e < c.n_embd; ++e) x[t][static_cast<size_t>(e)] += o[static_cast<size_t>(e)];
      const std::vector<double> h = detail::rmsnorm(x[t], l.ffn_norm, c.rms_eps);
      std::vector<double> g = detail::matvec(l.gate, h, {});
      const std::vector<double> u = detail::matvec(l.up, h, {});
      for (size_t e = 0; e < g.size(); ++e) g[e] = g[e] / (1.0 + std::exp(-g[e])) * u[e];
      const std::vector<double> d = detail::matvec(l.down, g, {});
      for (int64_t e = 0; e < c.n_embd; ++e) x[t][static_cast<size_t>(e)] += d[static_cast<size_t>(e)];
    }
  }
  std::vector<std::vector<double>> hidden(T);
  for (size_t t = 0; t < T; ++t) hidden[t] = detail::rmsnorm(x[t], output_norm_, c.rms_eps);
  std::vector<std::vector<double>> logits(T, std::vector<double>(static_cast<size_t>(c.n_vocab)));
  for (int64_t r = 0; r < c.n_vocab; ++r) {
    FRUGAL_ASSIGN_OR_RETURN(std::vector<double> w, weight_row(*lm_head_, r));
    for (size_t t = 0; t < T; ++t) {
      double s = 0;
      for (int64_t e = 0; e < c.n_embd; ++e) s += w[static_cast<size_t>(e)] * hidden[t][static_cast<size_t>(e)];
      logits[t][static_cast<size_t>(r)] = s;
    }
  }
  return logits;
}

inline Result<std::vector<double>> window_nll(const ReferenceModel& ref, const std::vector<int32_t>& tokens,
                                              int32_t n_ctx, int32_t bos, const RefForwardOptions& options) {
  std::vector<double> nll;
  const int32_t first = n_ctx / 2;
  for (size_t start = 0; start + static_cast<size_t>(n_ctx) <= tokens.size(); start += static_cast<size_t>(n_ctx)) {
    std::vector<int32_t> w(tokens.begin() + static_cast<std::ptrdiff_t>(start),
                           tokens.begin() + static_cast<std::ptrdiff_t>(start) + n_ctx);
    if (bos >= 0) w[0] = bos;
    FRUGAL_ASSIGN_OR_RETURN(auto logits, ref.forward(w, options));
    for (int32_t j = first; j < n_ctx - 1; ++j) {
      const std::vector<double>& l = logits[static_cast<size_t>(j)];
      const double mx = *std::max_element(l.begin(), l.end());
      double z = 0;
      for (double x : l) z += std::exp(x - mx);
      nll.push_back(-(l[static_cast<size_t>(tokens[start + static_cast<size_t>(j) + 1])] - mx - std::log(z)));
    }
  }
  return nll;
}

}  // namespace frugal::reference
