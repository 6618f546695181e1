#include "frugal/quantize/mix_rules.h"

#include <cstdio>

namespace frugal::quantize {
namespace {

bool has(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

int layer_of(std::string_view name) {
  int layer = -1;
  const std::string s(name);
  if (std::sscanf(s.c_str(), "blk.%d.", &layer) != 1) return -1;
  return layer;
}

// The layers that get more bits in the _M mixes: the first and last eighth, and every third
// layer in between.
bool use_more_bits(int i_layer, int n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

int64_t block_size(DType t) { return dtype_layout(t).block_size; }

// A type whose blocks fit rows of `cols` elements, in place of one whose blocks do not.
DType fallback_type(DType t, int64_t cols) {
  DType out = t;
  switch (t) {
    case DType::kQ2_K:
    case DType::kQ3_K: out = DType::kIQ4_NL; break;
    case DType::kQ4_K: out = DType::kQ5_0; break;
    case DType::kQ5_K: out = DType::kQ5_1; break;
    case DType::kQ6_K: out = DType::kQ8_0; break;
    case DType::kNVFP4: out = DType::kMXFP4; break;  // same elements, blocks of 32
    case DType::kHBQ_A:
    case DType::kHBQ_E: out = DType::kMXFP4; break;  // same elements, blocks of 32
    default: break;
  }
  if (cols % block_size(out) != 0) out = DType::kF16;
  return out;
}

}  // namespace

bool is_quantizable(std::string_view name, int n_dims) {
  const bool ends_with_weight = name.size() >= 6 && name.substr(name.size() - 6) == "weight";
  if (!ends_with_weight || n_dims < 2) return false;
  for (std::string_view skip : {"_norm.weight", "ffn_gate_inp.weight", "ssm_conv1d.weight", "time_mix_first.weight",
                                "time_mix_w1.weight", "time_mix_w2.weight", "time_mix_decay_w1.weight",
                                "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight"}) {
    if (has(name, skip)) return false;
  }
  return name != "position_embd.weight" && name != "token_types.weight";
}

bool tensor_order_less(std::string_view a, std::string_view b) {
  const int la = layer_of(a);
  const int lb = layer_of(b);
  if (la != lb) return la < lb;
  return a < b;
}

MixRules::MixRules(const Target& target, const ModelShape& shape, const MixOptions& opts)
    : target_(target), shape_(shape), opts_(opts) {}

TypeChoice MixRules::choose(std::string_view name, int64_t cols) {
  TypeChoice c{target_.base, false};
  const bool mixes = !opts_.pure && dtype_layout(target_.base).block_size > 1;
  if (mixes) {
    c.type = rule_type(name, cols);
    if (cols % block_size(c.type) != 0) {
      c.type = fallback_type(c.type, cols);
      c.fallback = true;
    }
  }
  if (opts_.token_embd_type && name == "token_embd.weight") c.type = *opts_.token_embd_type;
  if (opts_.output_type && name == "output.weight") c.type = *opts_.output_type;
  return c;
}

// llama-quantize's per-tensor rules for the types of target.h (Falcon's and the MoE variants'
// rules are left out: frugal reads neither).
DType MixRules::rule_type(std::string_view name, int64_t cols) {
  const FileType ft = target_.file_type;
  DType t = target_.base;
  const int n_layer = shape_.n_layer;
  if (name == "output.weight" || (!shape_.has_output && name == "token_embd.weight")) {
    // The output projection (or the tied embedding serving as one) keeps more bits.
    if (opts_.output_type) return *opts_.output_type;
    if (cols % block_size(t) != 0) return DType::kQ8_0;
    return t != DType::kQ8_0 ? DType::kQ6_K : t;
  }
  if (name == "token_embd.weight") return opts_.token_embd_type ? *opts_.token_embd_type : t;
  if (has(name, "attn_v.weight")) {
    const int i = i_attention_wv_++;
    const bool gqa4 = shape_.n_gqa() >= 4;
    if (ft == FileType::kQ2_K) {
      t = gqa4 ? DType::kQ4_K : DType::kQ3_K;
    } else if (ft == FileType::kQ2_K_S && gqa4) {
      t = DType::kQ4_K;
    } else if (ft == FileType::kQ3_K_M) {
      t = i < 2 ? DType::kQ5_K : DType::kQ4_K;
    } else if (ft == FileType::kQ3_K_L) {
      t = DType::kQ5_K;
    } else if (ft == FileType::kIQ4_NL && gqa4) {
      t = DType::kQ5_K;
    } else if ((ft == FileType::kQ4_K_M || ft == FileType::kQ5_K_M) && use_more_bits(i, shape_.n_attention_wv)) {
      t = DType::kQ6_K;
    } else if (ft == FileType::kQ4_K_S && i < 4) {
      t = DType::kQ5_K;
    }
    // A 70B Llama shares each V projection among 8 heads: it is small, more bits cost little.
    const bool llama_70b = shape_.arch == "llama" && n_layer == 80 && shape_.n_head != shape_.n_head_kv;
    if (llama_70b && (t == DType::kQ3_K || t == DType::kQ4_K)) t = DType::kQ5_K;
    return t;
  }
  if (has(name, "ffn_down")) {
    const int i = i_ffn_down_++;
    if (ft == FileType::kQ2_K) {
      t = DType::kQ3_K;
    } else if (ft == FileType::kQ2_K_S) {
      if (i < n_layer / 8) t = DType::kQ4_K;
    } else if (ft == FileType::kQ3_K_M) {
      t = i < n_layer / 16 ? DType::kQ5_K : DType::kQ4_K;
    } else if (ft == FileType::kQ3_K_L) {
      t = DType::kQ5_K;
    } else if (ft == FileType::kQ4_K_M) {
      if (use_more_bits(i, n_layer)) t = DType::kQ6_K;
    } else if (i < n_layer / 8 && ft == FileType::kIQ4_NL && !opts_.has_imatrix) {
      t = DType::kQ5_K;
    } else if (ft == FileType::kQ5_K_M && use_more_bits(i, n_layer)) {
      t = DType::kQ6_K;
    } else if (ft == FileType::kQ4_K_S && i < n_layer / 8) {
      t = DType::kQ5_K;
    } else if ((ft == FileType::kQ4_0 || ft == FileType::kQ5_0) && opts_.has_imatrix && i < n_layer / 8) {
      // Early ffn_down layers can go badly at Q4_0/Q5_0 even with an importance matrix.
      t = ft == FileType::kQ4_0 ? DType::kQ4_1 : DType::kQ5_1;
    }
    return t;
  }
  if (has(name, "attn_output.weight")) {
    if (ft == FileType::kQ2_K) t = DType::kQ3_K;
    if (ft == FileType::kQ3_K_M) t = DType::kQ4_K;
    if (ft == FileType::kQ3_K_L) t = DType::kQ5_K;
    return t;
  }
  if (has(name, "attn_qkv.weight")) {
    if (ft == FileType::kQ3_K_M || ft == FileType::kQ3_K_L) t = DType::kQ4_K;
    if (ft == FileType::kQ4_K_M) t = DType::kQ5_K;
    if (ft == FileType::kQ5_K_M) t = DType::kQ6_K;
    return t;
  }
  return t;
}

}  // namespace frugal::quantize
