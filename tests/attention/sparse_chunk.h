// A chunk of the planted inputs (planted.h) as a sparse prefill method sees it, and its mask.
#pragma once

#include <cstdint>
#include <vector>

#include "frugal/attention/sparse/prefill_sparsity.h"

namespace frugal::testing {

// One KV head's view of the chunk of positions [q_pos0, n_k): queries at every position are
// [n_k][n_head][head_dim], keys [n_k][head_dim].
inline sparse::HeadInput chunk_of(const std::vector<float>& q, int n_head, const std::vector<float>& k, int head_dim,
                                  int32_t n_k, float scale, int32_t q_pos0) {
  sparse::HeadInput in;
  in.q = q.data() + static_cast<size_t>(q_pos0) * n_head * head_dim;
  in.token_stride = static_cast<int64_t>(n_head) * head_dim;
  in.n_rep = n_head;
  in.n_q = n_k - q_pos0;
  in.q_pos0 = q_pos0;
  in.k = k.data();
  in.n_k = n_k;
  in.head_dim = head_dim;
  in.scale = scale;
  return in;
}

// A mask of the chunk with its own bytes.
struct OwnedMask {
  std::vector<uint8_t> bits;
  sparse::BlockMask mask;
  explicit OwnedMask(const sparse::HeadInput& in) : mask(sparse::mask_shape(in.q_pos0, in.n_q)) {
    bits.resize(static_cast<size_t>(mask.bytes()));
    mask.bits = bits.data();
  }
  bool at(int32_t qb, int32_t kb) const { return mask.row(qb - mask.qb0)[kb] != 0; }
};

}  // namespace frugal::testing
