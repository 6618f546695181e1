// CRISP as built here (docs/long-context.md gives the algorithm and how it reads the paper's
// abstract), per query head of the group. The attention of the chunk's last `last_q` queries is
// estimated exactly, and the first key block (the sink, always computed) is set aside: vertical
// (column) and slash (diagonal) means are taken over the other keys only, M is their mass and
// b = M / (n_k - 64) the uniform background of one key or one offset.
// Routing by structure, C_struct: the share of M on "peaked" keys and offsets, those at or above
// floor x b and floor x the mean of their own 64-wide block of keys or offsets (mass on single
// columns and diagonals, which block means would blur), summed over both and capped at 1.
// C_struct >= route: vertical-slash; else query-aware.
// Budgets at the noise floor: vertical-slash takes keys and offsets greedily by the mass of the
// estimate they cover that no index taken before covers, until that marginal mass falls below
// floor x b or gamma x M is covered. Query-aware takes, per query block, the key blocks of the
// pooled map (mean query x mean key, causal, softmax per row) the same way, the sink block's share
// set aside and the background the rest over the row's other blocks. So on background noise the
// kept set stays near the sink and the diagonal, however long the context. The mask is the union
// over the group's query heads.
#pragma once

#include "frugal/attention/sparse/prefill_sparsity.h"

namespace frugal::sparse {

class Crisp final : public PrefillSparsity {
 public:
  explicit Crisp(const PrefillSparseOptions& o) : o_(o) {}
  Method method() const override { return Method::kCrisp; }
  void select(const HeadInput& in, Scratch& scratch, const BlockMask& mask) const override;

 private:
  PrefillSparseOptions o_;
};

}  // namespace frugal::sparse
