// FlexPrefill (docs/long-context.md), per query head of the group: the attention of the chunk's
// last `last_q` queries is estimated exactly; a pooled estimate (their mean query against each key
// block's mean key, softmax over the blocks) is compared with the estimate summed per key block by
// the square root of their Jensen-Shannon divergence. Below tau the head is query-aware: blocks are
// chosen from a map of every query block's mean query against every key block's mean key (causal,
// softmax per row), largest first, until they cover gamma of the map's mass. Otherwise the head is
// vertical-slash: the fewest keys (column means of the estimate) and offsets (diagonal means) that
// each cover gamma of the estimated attention are kept and converted to blocks as MInference does.
// The mask is the union over the group's query heads.
#pragma once

#include "frugal/attention/sparse/prefill_sparsity.h"

namespace frugal::sparse {

class FlexPrefill final : public PrefillSparsity {
 public:
  explicit FlexPrefill(const PrefillSparseOptions& o) : o_(o) {}
  Method method() const override { return Method::kFlexPrefill; }
  void select(const HeadInput& in, Scratch& scratch, const BlockMask& mask) const override;

 private:
  PrefillSparseOptions o_;
};

// The square root of the Jensen-Shannon divergence (natural logarithm) of two distributions over
// n entries, each normalized to sum 1 first; 0 for identical ones, at most sqrt(ln 2).
double sqrt_js_divergence(const float* p, const float* q, int32_t n);

}  // namespace frugal::sparse
