// MInference's vertical-slash pattern, estimated online (docs/long-context.md): the attention of
// the chunk's last `last_q` queries over every key is computed exactly (softmax per query head);
// column sums score keys (verticals), sums along each diagonal score offsets (slashes); the top
// vertical_size keys (after the first block, always kept) and slash_size offsets (the 100 nearest
// always among them) of each query head are kept, and every 64 x 64 block
// that one of them crosses is computed for the whole group of query heads.
#pragma once

#include "frugal/attention/sparse/prefill_sparsity.h"

namespace frugal::sparse {

// The paper's budgets at 128k keys and its minimums, and the local diagonals it always keeps
// (its 30 forced sink columns lie in the first block, which every query block keeps).
inline constexpr int32_t kPaperVertical = 1000;
inline constexpr int32_t kPaperSlash = 6096;
inline constexpr int32_t kPaperLength = 131072;
inline constexpr int32_t kMinVertical = 30;
inline constexpr int32_t kMinSlash = 50;
inline constexpr int32_t kForcedLocal = 100;

class MInference final : public PrefillSparsity {
 public:
  explicit MInference(const PrefillSparseOptions& o) : o_(o) {}
  Method method() const override { return Method::kMInference; }
  void select(const HeadInput& in, Scratch& scratch, const BlockMask& mask) const override;

  // The budgets used for a sequence of n_k keys (knob, or the scaled paper value), at most n_k.
  int32_t vertical_size(int32_t n_k) const;
  int32_t slash_size(int32_t n_k) const;

 private:
  PrefillSparseOptions o_;
};

}  // namespace frugal::sparse
