// SWIFT self-speculative decoding (Xia et al., ICLR 2025): the target itself with a subset of its
// sublayers skipped (the attention or the MLP of middle layers; the residual stream passes a
// skipped sublayer) drafts, and the subset is searched online during generation.
//
// The search. Every `search_every` drafting calls (and at the first), one search step measures one
// candidate set on the context already there: the last kWindow tokens of the first sequence drafted
// for run teacher-forced through the full model and through the candidate, and the candidate's
// score is its "matchness", the share of positions where its argmax equals the full model's (what
// greedy acceptance of its drafts would be there). Candidates have a fixed number of skipped
// sublayers (--spec-skip, default half of the middle layers' sublayers); most are drawn at random,
// every kBayesEvery-th is the Bayesian-optimisation pick: the set of kBayesPool random unmeasured
// ones with the largest expected improvement under a Gaussian process fitted to the scores so far
// (mask_gp.h). After each step the set in use becomes the measured set with the largest posterior
// mean, when it beats the one in use by kSwitchMargin (a switch costs a catch-up pass over the
// whole sequence: the drafter's KV rows of the old set are of no use to the new one). The search
// stops after kSearchSteps steps. Drafting of a sequence stops before a token whose top
// probability under the draft is below --spec-confidence.
//
// Not done: SWIFT's token tree (a list of candidates per pass is what the engine verifies), and
// reading the target's own KV rows for the context (the draft keeps a KV cache of its own, as the
// draft-model drafter does).
#pragma once

#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "frugal/decode/speculative/draft_model.h"
#include "frugal/decode/speculative/mask_gp.h"

namespace frugal::speculative {

class SwiftDrafter final : public DraftModelDrafter {
 public:
  static constexpr int32_t kWindow = 32;
  static constexpr int32_t kSearchSteps = 32;
  static constexpr int32_t kBayesEvery = 3;
  static constexpr int32_t kBayesPool = 128;
  static constexpr double kSwitchMargin = 0.02;

  // o.skip_layers: sublayers to skip (0: half of the 2 (n_layer - 2) middle ones); o.skip_set:
  // the set frozen, no search. kInvalidArgument for fewer than three layers, a count outside
  // [1, 2 (n_layer - 2)] or a malformed set; kOverBudget when `memory` > 0 cannot hold its KV.
  static Result<std::unique_ptr<SwiftDrafter>> create(Model& target, const SpeculativeOptions& o,
                                                      const DrafterContext& ctx);
  Method method() const override { return Method::kSwift; }
  Status propose(std::span<const DraftSequence> seqs, std::span<Draft> out) override;
  std::string skip_set() const override;
  double search_ms() const override { return search_ms_; }
  int32_t search_steps() const { return steps_; }
  int32_t switches() const { return switches_; }

 private:
  SwiftDrafter(Model& target, Backend& backend, KvCache kv, int n_slots, const SpeculativeOptions& o,
               int32_t n_skip);
  Status search_step(std::span<const TokenId> tokens);
  // Argmaxes of the model with `skip` teacher-forced over `window` (from position 0).
  Result<std::vector<TokenId>> argmaxes(const std::vector<uint8_t>& skip, std::span<const TokenId> window);
  std::vector<uint8_t> random_set();
  std::vector<uint8_t> bayes_pick();
  void use(const std::vector<uint8_t>& skip);

  int32_t n_skip_;
  int32_t search_every_;
  bool frozen_;
  std::mt19937_64 rng_;
  MaskGp gp_;
  std::vector<std::vector<uint8_t>> measured_;  // distinct sets measured, in order
  std::vector<uint8_t> in_use_;
  int64_t calls_ = 0;
  int32_t steps_ = 0;
  int32_t switches_ = 0;
  double search_ms_ = 0;
  std::optional<KvCache> scratch_;  // one sequence of kWindow tokens, made at the first step
  std::vector<float> window_logits_;
};

}  // namespace frugal::speculative
