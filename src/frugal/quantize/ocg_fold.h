// OCG folded into the weights: the channel orders Outlier-Companion Grouping chooses
// (quant/methods/ocg_grouping.h) applied to the tensors that produce and consume each activation,
// so that the model computes the same function (in exact arithmetic) while every NVFP4 group along
// the input of a linear layer, of its weight and of its activations, holds the channels OCG put
// together. Inference needs no gather.
//
// Where a reordering can be folded, and where it cannot (per activation):
//  * The residual stream (input of attn_q/k/v through attn_norm, of ffn_gate/up through ffn_norm).
//    RMSNorm is elementwise, so its output is in the order of its input, the residual stream; a
//    norm weight permuted alone does not reorder anything. The fold therefore permutes the whole
//    stream with ONE order shared by every layer: token_embd's and output's columns, every norm
//    weight, the columns of attn_q/k/v and ffn_gate/up, the rows of attn_output and ffn_down. A
//    per-layer order for Q/K/V or gate/up would need a gather in the norm kernel (OCGQuant's own
//    kernels do that) and is not done. The shared order comes from the RMS of all these inputs
//    pooled: each layer's mean squares divided by their mean (every consumer counts alike),
//    averaged over consumers, square-rooted.
//  * The FFN's intermediate (input of ffn_down): per layer, ffn_gate's and ffn_up's rows and
//    ffn_down's columns; swiglu is elementwise.
//  * The attention output (input of attn_output): attention mixes positions, not channels, so a
//    reordering of V's rows within a KV head reorders the output of every query head reading that
//    head the same way. Per layer and KV head: one order of its head_dim channels, from the RMS of
//    those channels pooled over its query heads, applied to V's rows (and bias) and to
//    attn_output's columns of each of those query heads. Channels cannot move between heads (a
//    head reordering would have to move Q, K and V heads together and changes no group when
//    head_dim is a multiple of 16), so with head_dim not a multiple of 16 this site is left as is.
// Q and K are never reordered (RoPE pairs and the Q/K norms depend on their order).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "frugal/core/status.h"
#include "frugal/format/gguf.h"
#include "frugal/quantize/imatrix_file.h"

namespace frugal::quantize {

// new[i] = old[order[i]] along a tensor's rows and/or its columns (for a 1-D tensor: its values).
struct TensorPermutation {
  const std::vector<int32_t>* rows = nullptr;  // nullptr: not reordered
  const std::vector<int32_t>* cols = nullptr;
  bool any() const { return rows != nullptr || cols != nullptr; }
};

struct OcgSite {
  std::string name;      // "residual", "blk.3.ffn_down", "blk.3.attn_output"
  int64_t channels = 0;  // length of the reordered activation
  int anchors = 0;       // packed groups (0: left in its order)
  std::string note;      // why a site was left as is, or empty
};

class OcgFold {
 public:
  // The orders for a llama/mistral/qwen2/qwen3 GGUF, from an importance matrix of that model (its
  // mean squares are the calibration statistics). Refuses, naming it, a tensor the fold does not
  // know, a missing or mis-sized imatrix entry, and a model of another architecture.
  static Result<OcgFold> plan(const GgufFile& f, const Imatrix& imatrix);

  // How tensor `name` is reordered (pointers into this object).
  TensorPermutation for_tensor(const std::string& name) const;

  const std::vector<OcgSite>& sites() const { return sites_; }
  int total_anchors() const;

 private:
  std::vector<int32_t> residual_;              // [n_embd], empty: identity
  std::vector<std::vector<int32_t>> ffn_;      // per layer [n_ff]
  std::vector<std::vector<int32_t>> v_rows_;   // per layer [n_head_kv * head_dim]
  std::vector<std::vector<int32_t>> o_cols_;   // per layer [n_head * head_dim]
  std::vector<OcgSite> sites_;
};

}  // namespace frugal::quantize
