#include "frugal/model/architecture.h"

#include <cmath>
#include <cstring>

#include "frugal/quant/fluxbin.h"
#include "frugal/quant/type_traits.h"

namespace frugal {

// Defined in arch_*.cc, one file per architecture.
extern const Architecture kArchLlama;
extern const Architecture kArchMistral;
extern const Architecture kArchQwen2;
extern const Architecture kArchQwen3;

namespace {
const Architecture* const kArchitectures[] = {&kArchLlama, &kArchMistral, &kArchQwen2, &kArchQwen3};

Result<int64_t> get_dim(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return error(ErrorCode::kNotFound, "missing metadata key '{}'", key);
  if (v->type == GgufType::kArray) {
    // Some files write one value per layer; frugal runs uniform layers only.
    FRUGAL_ASSIGN_OR_RETURN(std::vector<int64_t> vals, f.get_int_array(key));
    if (vals.empty()) return error(ErrorCode::kCorrupt, "metadata key '{}' is an empty array", key);
    for (int64_t x : vals) {
      if (x != vals[0]) {
        return error(ErrorCode::kNotSupported, "metadata key '{}' varies per layer; only uniform layers are supported", key);
      }
    }
    return vals[0];
  }
  return f.get_int(key);
}

Status check_range(const std::string& key, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) {
    return error(ErrorCode::kCorrupt, "metadata key '{}' = {} is outside [{}, {}]", key, v, lo, hi);
  }
  return ok_status();
}
}  // namespace

const Architecture* find_architecture(const std::string& name) {
  for (const Architecture* a : kArchitectures) {
    if (name == a->name) return a;
  }
  return nullptr;
}

std::vector<std::string> architecture_names() {
  std::vector<std::string> names;
  for (const Architecture* a : kArchitectures) names.emplace_back(a->name);
  return names;
}

bool has_tensor(const GgufFile& f, const std::string& name) { return f.find_tensor(name) != nullptr; }

std::string global_scale_name(const std::string& weight_name) {
  constexpr std::string_view kSuffix = ".weight";
  if (weight_name.size() > kSuffix.size() && weight_name.ends_with(kSuffix)) {
    return weight_name.substr(0, weight_name.size() - kSuffix.size()) + ".scale";
  }
  return weight_name + ".scale";
}

Result<float> read_global_scale(const GgufFile& f, const std::string& weight_name) {
  const std::string name = global_scale_name(weight_name);
  const GgufTensorInfo* t = f.find_tensor(name);
  if (t == nullptr) return 1.f;  // a file without one: blocks that are their own values
  if (t->type != DType::kF32 || t->n_elements() != 1) {
    return error(ErrorCode::kCorrupt, "tensor '{}' (global scale of '{}') must be one f32, found {} {}", name,
                 weight_name, t->n_elements(), dtype_name(t->type));
  }
  float g;
  std::memcpy(&g, t->data, sizeof g);
  if (!std::isfinite(g) || g <= 0.f) {
    return error(ErrorCode::kCorrupt, "tensor '{}' (global scale of '{}') is {}, expected a positive finite value",
                 name, weight_name, g);
  }
  return g;
}

Result<FluxBinParts> bind_fluxbin_parts(const GgufFile& f, const std::string& weight_name, int64_t cols,
                                        int64_t rows) {
  namespace fb = quant::fluxbin;
  FluxBinParts parts;
  const int64_t groups = cols / fb::kGroup;
  const std::string cols_name = fb::companion_name(weight_name, fb::kColsPart);
  const GgufTensorInfo* c = f.find_tensor(cols_name);
  if (c == nullptr || c->type != DType::kF16 || c->n_elements() != fb::kBases * cols) {
    return error(ErrorCode::kCorrupt, "FluxBin tensor '{}' needs its column scales '{}': {} f16 values", weight_name,
                 cols_name, fb::kBases * cols);
  }
  parts.col_scales = reinterpret_cast<const uint16_t*>(c->data);
  const std::string idx_name = fb::companion_name(weight_name, fb::kSalientIdxPart);
  const GgufTensorInfo* idx = f.find_tensor(idx_name);
  if (idx == nullptr) return parts;  // pure: no salient columns
  const int64_t n_idx = idx->n_elements();
  const int64_t salient = groups > 0 ? n_idx / groups : 0;
  if (idx->type != DType::kI8 || salient * groups != n_idx || salient <= 0 || salient > 32 || salient % 2 != 0) {
    return error(ErrorCode::kCorrupt, "tensor '{}' (salient columns of '{}') must be i8, an even count 2..32 per {} "
                 "columns, found {} {}", idx_name, weight_name, fb::kGroup, n_idx, dtype_name(idx->type));
  }
  for (int64_t i = 0; i < n_idx; ++i) {
    if (idx->data[i] >= fb::kGroup) {
      return error(ErrorCode::kCorrupt, "tensor '{}' holds column {} at {}, beyond a group of {}", idx_name,
                   idx->data[i], i, fb::kGroup);
    }
  }
  const std::string vals_name = fb::companion_name(weight_name, fb::kSalientValsPart);
  const GgufTensorInfo* vals = f.find_tensor(vals_name);
  const int64_t want = rows * groups * fb::salient_row_bytes(static_cast<int>(salient));
  if (vals == nullptr || vals->type != DType::kI8 || vals->n_elements() != want) {
    return error(ErrorCode::kCorrupt, "FluxBin tensor '{}' needs its salient values '{}': {} i8 bytes", weight_name,
                 vals_name, want);
  }
  parts.salient = static_cast<int>(salient);
  parts.salient_idx = idx->data;
  parts.salient_vals = vals->data;
  return parts;
}

Result<WeightTensor> bind_matrix(const GgufFile& f, const std::string& name, int64_t cols, int64_t rows) {
  const GgufTensorInfo* t = f.find_tensor(name);
  if (t == nullptr) return error(ErrorCode::kNotFound, "missing tensor '{}'", name);
  const bool shape_ok = (t->dims.size() == 2 && t->dims[0] == cols && t->dims[1] == rows) ||
                        (t->dims.size() == 1 && rows == 1 && t->dims[0] == cols);
  if (!shape_ok) {
    std::string dims;
    for (size_t i = 0; i < t->dims.size(); ++i) dims += (i ? ", " : "") + std::to_string(t->dims[i]);
    return error(ErrorCode::kCorrupt, "tensor '{}' has shape [{}], expected [{}, {}]", name, dims, cols, rows);
  }
  const TypeTraits* tt = type_traits(t->type);
  if (t->type != DType::kFLUXBIN && (tt == nullptr || tt->vec_dot == nullptr)) {
    return error(ErrorCode::kNotSupported, "tensor '{}' has type {}, which frugal cannot multiply", name,
                 dtype_name(t->type));
  }
  WeightTensor w;
  w.type = t->type;
  w.cols = cols;
  w.rows = rows;
  w.row_stride = static_cast<size_t>(row_bytes(t->type, cols));
  w.data = t->data;
  if (t->type == DType::kNVFP4) {
    FRUGAL_ASSIGN_OR_RETURN(w.scale, read_global_scale(f, name));
  }
  if (t->type == DType::kFLUXBIN) {
    FRUGAL_ASSIGN_OR_RETURN(w.fluxbin, bind_fluxbin_parts(f, name, cols, rows));
  }
  return w;
}

Result<std::vector<float>> load_vector(const GgufFile& f, const std::string& name, int64_t n) {
  const GgufTensorInfo* t = f.find_tensor(name);
  if (t == nullptr) return error(ErrorCode::kNotFound, "missing tensor '{}'", name);
  if (t->n_elements() != n) {
    return error(ErrorCode::kCorrupt, "tensor '{}' has {} elements, expected {}", name, t->n_elements(), n);
  }
  const TypeTraits* tt = type_traits(t->type);
  if (tt == nullptr || tt->to_float_ref == nullptr) {
    return error(ErrorCode::kNotSupported, "tensor '{}' has type {}, which frugal cannot read", name,
                 dtype_name(t->type));
  }
  std::vector<float> out(static_cast<size_t>(n));
  tt->to_float_ref(t->data, out.data(), n);
  for (float x : out) {
    if (!std::isfinite(x)) return error(ErrorCode::kCorrupt, "tensor '{}' holds a non-finite value", name);
  }
  return out;
}

Status read_llama_like_config(const GgufFile& f, ModelConfig& c) {
  const std::string a = c.arch + ".";
  FRUGAL_ASSIGN_OR_RETURN(c.n_embd, get_dim(f, a + "embedding_length"));
  FRUGAL_ASSIGN_OR_RETURN(c.n_layer, get_dim(f, a + "block_count"));
  FRUGAL_ASSIGN_OR_RETURN(c.n_head, get_dim(f, a + "attention.head_count"));
  FRUGAL_ASSIGN_OR_RETURN(c.n_ff, get_dim(f, a + "feed_forward_length"));
  FRUGAL_RETURN_IF_ERROR(check_range(a + "embedding_length", c.n_embd, 1, 1 << 17));
  FRUGAL_RETURN_IF_ERROR(check_range(a + "block_count", c.n_layer, 1, 4096));
  FRUGAL_RETURN_IF_ERROR(check_range(a + "attention.head_count", c.n_head, 1, 4096));
  FRUGAL_RETURN_IF_ERROR(check_range(a + "feed_forward_length", c.n_ff, 1, 1 << 20));
  c.n_head_kv = c.n_head;
  if (f.has(a + "attention.head_count_kv")) {
    FRUGAL_ASSIGN_OR_RETURN(c.n_head_kv, get_dim(f, a + "attention.head_count_kv"));
  }
  FRUGAL_RETURN_IF_ERROR(check_range(a + "attention.head_count_kv", c.n_head_kv, 1, c.n_head));
  if (c.n_head % c.n_head_kv != 0) {
    return error(ErrorCode::kCorrupt, "attention.head_count {} is not a multiple of attention.head_count_kv {}",
                 c.n_head, c.n_head_kv);
  }
  if (f.has(a + "attention.key_length")) {
    FRUGAL_ASSIGN_OR_RETURN(c.head_dim, f.get_int(a + "attention.key_length"));
    FRUGAL_ASSIGN_OR_RETURN(int64_t vlen, f.get_int_or(a + "attention.value_length", c.head_dim));
    if (vlen != c.head_dim) {
      return error(ErrorCode::kNotSupported, "attention.value_length {} differs from key_length {}", vlen, c.head_dim);
    }
  } else {
    if (c.n_embd % c.n_head != 0) {
      return error(ErrorCode::kCorrupt, "embedding_length {} is not a multiple of head_count {}", c.n_embd, c.n_head);
    }
    c.head_dim = c.n_embd / c.n_head;
  }
  FRUGAL_RETURN_IF_ERROR(check_range(a + "attention.key_length", c.head_dim, 2, 1024));
  FRUGAL_ASSIGN_OR_RETURN(c.n_ctx_train, f.get_int_or(a + "context_length", 2048));
  FRUGAL_ASSIGN_OR_RETURN(double eps, f.get_float_or(a + "attention.layer_norm_rms_epsilon", 1e-5));
  c.rms_eps = static_cast<float>(eps);
  FRUGAL_ASSIGN_OR_RETURN(int64_t n_rot, f.get_int_or(a + "rope.dimension_count", c.head_dim));
  if (n_rot <= 0 || n_rot > c.head_dim || n_rot % 2 != 0) {
    return error(ErrorCode::kCorrupt, "rope.dimension_count {} must be even and in [2, head_dim {}]", n_rot, c.head_dim);
  }
  c.rope.n_rot = static_cast<int>(n_rot);
  FRUGAL_ASSIGN_OR_RETURN(double base, f.get_float_or(a + "rope.freq_base", 10000.0));
  c.rope.freq_base = static_cast<float>(base);
  FRUGAL_ASSIGN_OR_RETURN(std::string scaling, f.get_string_or(a + "rope.scaling.type", "none"));
  if (scaling == "linear") {
    FRUGAL_ASSIGN_OR_RETURN(double factor, f.get_float_or(a + "rope.scaling.factor", 1.0));
    if (!(factor > 0)) return error(ErrorCode::kCorrupt, "rope.scaling.factor {} must be positive", factor);
    c.rope.freq_scale = static_cast<float>(1.0 / factor);
  } else if (f.has(a + "rope.scale_linear")) {
    FRUGAL_ASSIGN_OR_RETURN(double factor, f.get_float(a + "rope.scale_linear"));
    if (!(factor > 0)) return error(ErrorCode::kCorrupt, "rope.scale_linear {} must be positive", factor);
    c.rope.freq_scale = static_cast<float>(1.0 / factor);
  } else if (scaling != "none" && !scaling.empty()) {
    return error(ErrorCode::kNotSupported, "rope.scaling.type '{}' is not supported (none, linear)", scaling);
  }
  FRUGAL_ASSIGN_OR_RETURN(int64_t window, f.get_int_or(a + "attention.sliding_window", 0));
  if (window < 0) return error(ErrorCode::kCorrupt, "attention.sliding_window {} is negative", window);
  c.sliding_window = static_cast<int32_t>(window);

  const GgufTensorInfo* embd = f.find_tensor("token_embd.weight");
  if (embd == nullptr) return error(ErrorCode::kNotFound, "missing tensor 'token_embd.weight'");
  if (embd->dims.size() != 2) return error(ErrorCode::kCorrupt, "tensor 'token_embd.weight' must be 2-D");
  c.n_vocab = embd->dims[1];
  c.tied_embeddings = !has_tensor(f, "output.weight");
  return ok_status();
}

Status bind_llama_like_weights(const GgufFile& f, const ModelConfig& c, ModelWeights& w) {
  const int64_t q_dim = c.n_head * c.head_dim;
  const int64_t kv_dim = c.n_head_kv * c.head_dim;
  FRUGAL_ASSIGN_OR_RETURN(w.token_embd, bind_matrix(f, "token_embd.weight", c.n_embd, c.n_vocab));
  FRUGAL_ASSIGN_OR_RETURN(w.output_norm, load_vector(f, "output_norm.weight", c.n_embd));
  if (c.tied_embeddings) {
    w.output = w.token_embd;
  } else {
    FRUGAL_ASSIGN_OR_RETURN(w.output, bind_matrix(f, "output.weight", c.n_embd, c.n_vocab));
  }
  if (has_tensor(f, "rope_freqs.weight")) {
    FRUGAL_ASSIGN_OR_RETURN(w.rope_freqs, load_vector(f, "rope_freqs.weight", c.rope.n_rot / 2));
  }
  w.layers.resize(static_cast<size_t>(c.n_layer));
  for (int64_t il = 0; il < c.n_layer; ++il) {
    LayerWeights& L = w.layers[static_cast<size_t>(il)];
    const std::string p = "blk." + std::to_string(il) + ".";
    FRUGAL_ASSIGN_OR_RETURN(L.attn_norm, load_vector(f, p + "attn_norm.weight", c.n_embd));
    FRUGAL_ASSIGN_OR_RETURN(L.wq, bind_matrix(f, p + "attn_q.weight", c.n_embd, q_dim));
    FRUGAL_ASSIGN_OR_RETURN(L.wk, bind_matrix(f, p + "attn_k.weight", c.n_embd, kv_dim));
    FRUGAL_ASSIGN_OR_RETURN(L.wv, bind_matrix(f, p + "attn_v.weight", c.n_embd, kv_dim));
    FRUGAL_ASSIGN_OR_RETURN(L.wo, bind_matrix(f, p + "attn_output.weight", q_dim, c.n_embd));
    if (c.qkv_bias) {
      FRUGAL_ASSIGN_OR_RETURN(L.bq, load_vector(f, p + "attn_q.bias", q_dim));
      FRUGAL_ASSIGN_OR_RETURN(L.bk, load_vector(f, p + "attn_k.bias", kv_dim));
      FRUGAL_ASSIGN_OR_RETURN(L.bv, load_vector(f, p + "attn_v.bias", kv_dim));
    }
    if (c.qk_norm) {
      FRUGAL_ASSIGN_OR_RETURN(L.q_norm, load_vector(f, p + "attn_q_norm.weight", c.head_dim));
      FRUGAL_ASSIGN_OR_RETURN(L.k_norm, load_vector(f, p + "attn_k_norm.weight", c.head_dim));
    }
    FRUGAL_ASSIGN_OR_RETURN(L.ffn_norm, load_vector(f, p + "ffn_norm.weight", c.n_embd));
    FRUGAL_ASSIGN_OR_RETURN(L.w_gate, bind_matrix(f, p + "ffn_gate.weight", c.n_embd, c.n_ff));
    FRUGAL_ASSIGN_OR_RETURN(L.w_up, bind_matrix(f, p + "ffn_up.weight", c.n_embd, c.n_ff));
    FRUGAL_ASSIGN_OR_RETURN(L.w_down, bind_matrix(f, p + "ffn_down.weight", c.n_ff, c.n_embd));
  }
  return ok_status();
}

}  // namespace frugal
