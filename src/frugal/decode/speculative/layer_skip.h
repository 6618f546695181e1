// Self-speculative drafting by layer skipping (SWIFT, Xia et al., ICLR 2025): the target itself,
// with some of its middle layers skipped (the residual stream passes through them), is the draft,
// so no second model or vocabulary is needed. It drafts exactly as the draft-model drafter does
// (draft_model.h), with a KV cache of its own for the layers it runs.
//
// The skip set: `n_skip` layers of [1, n_layer - 2] (the first and the last always run), chosen on
// the first sequence drafted for. Every candidate set (all of them when there are at most
// kMaxCandidates, else that many drawn with a fixed seed) runs teacher-forced over the first
// kScoreTokens tokens of that sequence, and the set whose argmax agrees most often with the full
// model's argmax there wins: SWIFT's "matchness" criterion. SWIFT also keeps optimising the set
// during generation (random search and Bayesian optimisation) and drafts a token tree; this
// drafter keeps its first choice and drafts one sequence.
#pragma once

#include <memory>
#include <vector>

#include "frugal/decode/speculative/draft_model.h"

namespace frugal::speculative {

class LayerSkipDrafter final : public DraftModelDrafter {
 public:
  static constexpr int kMaxCandidates = 64;
  static constexpr int32_t kScoreTokens = 64;

  // `n_skip` 0: half of the middle layers (at least one). kInvalidArgument for fewer than three
  // layers or n_skip outside [1, n_layer - 2]; kOverBudget when `memory` > 0 cannot hold its KV.
  static Result<std::unique_ptr<LayerSkipDrafter>> create(Model& target, int32_t n_skip, uint64_t memory,
                                                          const DrafterContext& ctx);
  Method method() const override { return Method::kLayerSkip; }
  Status propose(std::span<const DraftSequence> seqs, std::span<Draft> out) override;
  // The layers skipped ([n_layer], 1: skipped), empty before the first proposal.
  const std::vector<uint8_t>& chosen() const { return skip_layers(); }
  // How often each candidate's argmax matched the full model's on the scored tokens (diagnostics).
  double chosen_matchness() const { return matchness_; }

 private:
  LayerSkipDrafter(Model& target, Backend& backend, KvCache kv, int n_slots, int32_t n_skip);
  Status choose(std::span<const TokenId> tokens);

  int32_t n_skip_;
  bool chosen_ = false;
  double matchness_ = 0;
};

// Every n_skip-subset of the middle layers [1, n_layer - 2] as masks, in lexicographic order, or
// kMaxCandidates of them drawn with a fixed seed when there are more.
std::vector<std::vector<uint8_t>> layer_skip_candidates(int32_t n_layer, int32_t n_skip, int max_candidates);

}  // namespace frugal::speculative
