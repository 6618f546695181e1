#include "frugal/quantize/ocg_fold.h"

#include <charconv>
#include <cmath>
#include <numeric>
#include <span>

#include "frugal/model/architecture.h"
#include "frugal/quant/methods/ocg_grouping.h"

namespace frugal::quantize {
namespace {

namespace qm = quant::methods;

// "blk.12.ffn_down.weight" -> layer 12, rest "ffn_down.weight"; -1 for tensors outside blocks.
int split_block_name(const std::string& name, std::string* rest) {
  if (name.rfind("blk.", 0) != 0) {
    *rest = name;
    return -1;
  }
  const size_t dot = name.find('.', 4);
  int layer = -1;
  if (dot == std::string::npos) return -1;
  const auto [p, ec] = std::from_chars(name.data() + 4, name.data() + dot, layer);
  if (ec != std::errc() || p != name.data() + dot) return -1;
  *rest = name.substr(dot + 1);
  return layer;
}

bool known_tensor(const std::string& name, int64_t n_layer) {
  std::string rest;
  const int layer = split_block_name(name, &rest);
  if (rest.ends_with(".scale")) return true;  // an NVFP4 input's global scale: no channel order
  if (layer < 0) {
    return name == "token_embd.weight" || name == "output.weight" || name == "output_norm.weight" ||
           name == "rope_freqs.weight";
  }
  if (layer >= n_layer) return false;
  for (const char* k : {"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
                        "attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_q_norm.weight", "attn_k_norm.weight",
                        "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"}) {
    if (rest == k) return true;
  }
  return false;
}

// The mean squares of a weight's input columns, or why they cannot be had.
Result<std::vector<float>> mean_squares(const Imatrix& m, const std::string& weight, int64_t n) {
  auto it = m.entries.find(weight);
  if (it == m.entries.end()) {
    return error(ErrorCode::kInvalidArgument, "OCG: the imatrix has no entry for '{}' (its input's statistics)", weight);
  }
  if (static_cast<int64_t>(it->second.values.size()) != n) {
    return error(ErrorCode::kInvalidArgument, "OCG: imatrix entry '{}' has {} values, the tensor has {} columns", weight,
                 it->second.values.size(), n);
  }
  std::vector<float> ms = it->second.mean();
  for (float v : ms) {
    if (!(v >= 0.f) || !std::isfinite(v)) {
      return error(ErrorCode::kInvalidArgument, "OCG: imatrix entry '{}' holds a negative or non-finite value", weight);
    }
  }
  return ms;
}

std::vector<float> sqrt_of(const std::vector<double>& ms) {
  std::vector<float> r(ms.size());
  for (size_t i = 0; i < ms.size(); ++i) r[i] = static_cast<float>(std::sqrt(ms[i]));
  return r;
}

bool is_identity(const std::vector<int32_t>& order) {
  for (size_t i = 0; i < order.size(); ++i) {
    if (order[i] != static_cast<int32_t>(i)) return false;
  }
  return true;
}

}  // namespace

Result<OcgFold> OcgFold::plan(const GgufFile& f, const Imatrix& imatrix) {
  ModelConfig c;
  FRUGAL_ASSIGN_OR_RETURN(c.arch, f.get_string("general.architecture"));
  const Architecture* arch = find_architecture(c.arch);
  if (arch == nullptr) {
    return error(ErrorCode::kNotSupported, "OCG: architecture '{}' is not one the fold knows (llama, mistral, qwen2, qwen3)",
                 c.arch);
  }
  FRUGAL_RETURN_IF_ERROR(arch->read_config(f, c));
  for (const auto& t : f.tensors()) {
    if (!known_tensor(t.name, c.n_layer)) {
      return error(ErrorCode::kNotSupported,
                   "OCG: tensor '{}' is not one the fold knows how to reorder (the {} tensors frugal loads)", t.name,
                   c.arch);
    }
  }
  const int64_t q_dim = c.n_head * c.head_dim;
  const int64_t group = qm::kOcgGroupSize;
  OcgFold fold;

  // The residual stream: every consumer's mean squares, each divided by its own mean.
  {
    OcgSite site{"residual", c.n_embd, 0, ""};
    std::vector<double> pooled(static_cast<size_t>(c.n_embd), 0.0);
    int consumers = 0;
    for (int64_t il = 0; il < c.n_layer; ++il) {
      const std::string p = "blk." + std::to_string(il) + ".";
      // attn_q/k/v share one input, as do ffn_gate/up: one of each pair is the statistic.
      for (const char* w : {"attn_q.weight", "ffn_gate.weight"}) {
        FRUGAL_ASSIGN_OR_RETURN(std::vector<float> ms, mean_squares(imatrix, p + w, c.n_embd));
        double mean = 0;
        for (float v : ms) mean += v;
        mean /= static_cast<double>(c.n_embd);
        if (mean <= 0) continue;  // a consumer that only ever saw zeros says nothing about the order
        for (size_t j = 0; j < ms.size(); ++j) pooled[j] += ms[j] / mean;
        ++consumers;
      }
    }
    if (c.n_embd % group != 0) {
      site.note = "n_embd " + std::to_string(c.n_embd) + " is not a multiple of 16";
    } else if (consumers == 0) {
      site.note = "no consumer saw a non-zero activation";
    } else {
      const qm::OcgGrouping g = qm::ocg_grouping(sqrt_of(pooled));
      site.anchors = g.n_anchors;
      if (!is_identity(g.order)) fold.residual_ = g.order;
    }
    fold.sites_.push_back(site);
  }

  fold.ffn_.resize(static_cast<size_t>(c.n_layer));
  fold.v_rows_.resize(static_cast<size_t>(c.n_layer));
  fold.o_cols_.resize(static_cast<size_t>(c.n_layer));
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const auto L = static_cast<size_t>(il);
    {
      OcgSite site{p + "ffn_down", c.n_ff, 0, ""};
      FRUGAL_ASSIGN_OR_RETURN(std::vector<float> ms, mean_squares(imatrix, p + "ffn_down.weight", c.n_ff));
      if (c.n_ff % group != 0) {
        site.note = "n_ff " + std::to_string(c.n_ff) + " is not a multiple of 16";
      } else {
        std::vector<double> d(ms.begin(), ms.end());
        const qm::OcgGrouping g = qm::ocg_grouping(sqrt_of(d));
        site.anchors = g.n_anchors;
        if (!is_identity(g.order)) fold.ffn_[L] = g.order;
      }
      fold.sites_.push_back(site);
    }
    {
      OcgSite site{p + "attn_output", q_dim, 0, ""};
      FRUGAL_ASSIGN_OR_RETURN(std::vector<float> ms, mean_squares(imatrix, p + "attn_output.weight", q_dim));
      if (c.head_dim % group != 0) {
        site.note = "head_dim " + std::to_string(c.head_dim) +
                    " is not a multiple of 16: channels cannot leave their head, so no group can change";
      } else {
        const int64_t hd = c.head_dim;
        const int64_t per_kv = c.n_head / c.n_head_kv;
        std::vector<int32_t> v_rows(static_cast<size_t>(c.n_head_kv * hd));
        std::vector<int32_t> o_cols(static_cast<size_t>(q_dim));
        for (int64_t kvh = 0; kvh < c.n_head_kv; ++kvh) {
          // The query heads kvh * per_kv .. + per_kv - 1 read this KV head (model.cc's grouping).
          std::vector<double> pooled(static_cast<size_t>(hd), 0.0);
          for (int64_t h = kvh * per_kv; h < (kvh + 1) * per_kv; ++h) {
            for (int64_t d = 0; d < hd; ++d) pooled[static_cast<size_t>(d)] += ms[static_cast<size_t>(h * hd + d)];
          }
          const qm::OcgGrouping g = qm::ocg_grouping(sqrt_of(pooled));
          site.anchors += g.n_anchors;
          for (int64_t d = 0; d < hd; ++d) {
            v_rows[static_cast<size_t>(kvh * hd + d)] = static_cast<int32_t>(kvh * hd + g.order[static_cast<size_t>(d)]);
          }
          for (int64_t h = kvh * per_kv; h < (kvh + 1) * per_kv; ++h) {
            for (int64_t d = 0; d < hd; ++d) {
              o_cols[static_cast<size_t>(h * hd + d)] = static_cast<int32_t>(h * hd + g.order[static_cast<size_t>(d)]);
            }
          }
        }
        if (!is_identity(v_rows)) {
          fold.v_rows_[L] = std::move(v_rows);
          fold.o_cols_[L] = std::move(o_cols);
        }
      }
      fold.sites_.push_back(site);
    }
  }
  return fold;
}

TensorPermutation OcgFold::for_tensor(const std::string& name) const {
  auto opt = [](const std::vector<int32_t>& v) { return v.empty() ? nullptr : &v; };
  TensorPermutation t;
  std::string rest;
  const int layer = split_block_name(name, &rest);
  const std::vector<int32_t>* res = opt(residual_);
  if (layer < 0) {
    if (name == "token_embd.weight" || name == "output.weight" || name == "output_norm.weight") t.cols = res;
    return t;
  }
  if (static_cast<size_t>(layer) >= ffn_.size()) return t;
  const auto L = static_cast<size_t>(layer);
  if (rest == "attn_norm.weight" || rest == "ffn_norm.weight" || rest == "attn_q.weight" || rest == "attn_k.weight") {
    t.cols = res;
  } else if (rest == "attn_v.weight") {
    t.cols = res;
    t.rows = opt(v_rows_[L]);
  } else if (rest == "attn_v.bias") {
    t.cols = opt(v_rows_[L]);
  } else if (rest == "attn_output.weight") {
    t.cols = opt(o_cols_[L]);
    t.rows = res;
  } else if (rest == "ffn_gate.weight" || rest == "ffn_up.weight") {
    t.cols = res;
    t.rows = opt(ffn_[L]);
  } else if (rest == "ffn_down.weight") {
    t.cols = opt(ffn_[L]);
    t.rows = res;
  }
  return t;
}

int OcgFold::total_anchors() const {
  int n = 0;
  for (const OcgSite& s : sites_) n += s.anchors;
  return n;
}

}  // namespace frugal::quantize
