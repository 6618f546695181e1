// The draft-model drafter: a small model with the target's vocabulary proposes k tokens by running
// autoregressively, each drawn from its distribution after the request's own sampling transform
// (greedy: its argmax). It keeps a KV cache of its own with one sequence per engine slot and the
// tokens whose rows that cache holds, so on every call it keeps the longest prefix shared with the
// sequence's tokens (rolling back rejected drafts, or reusing a prefix a new sequence shares) and
// feeds only the rest: the token the target emitted and any drafts the target kept.
#pragma once

#include <memory>
#include <vector>

#include "frugal/decode/speculative/drafter.h"
#include "frugal/kv/kv_cache.h"
#include "frugal/model/model.h"

namespace frugal::speculative {

// kInvalidArgument when the vocabularies differ: the first differing token id and both strings
// (or the sizes when one is a prefix of the other).
Status check_same_vocabulary(const Model& target, const Model& draft);

class DraftModelDrafter : public Drafter {
 public:
  // Checks the vocabulary and the memory budget (`memory`: bytes for the draft's weights and KV
  // cache; 0: its weights must be smaller than the target's, or it cannot pay for itself).
  static Result<std::unique_ptr<DraftModelDrafter>> create(Model& draft, uint64_t memory, const DrafterContext& ctx);

  Method method() const override { return Method::kDraft; }
  Status propose(std::span<const DraftSequence> seqs, std::span<Draft> out) override;
  // Bytes read per token, draft over target: what a decode step costs where weights dominate.
  double cost_ratio() const override { return cost_ratio_; }
  const KvCache& cache() const { return kv_; }

 protected:
  // `own_backend`, when set, is the backend the draft runs on (kept by the drafter; `backend`
  // is then unused): DrafterContext::draft_on_cpu.
  DraftModelDrafter(Model& draft, Backend& backend, KvCache kv, int n_slots, double cost_ratio,
                    std::unique_ptr<Backend> own_backend = nullptr);
  // Layers every pass of the draft skips ([n_layer], empty: none). Changing it forgets every
  // sequence's cached rows (the skipped layers have none to reuse).
  void set_skip_layers(std::vector<uint8_t> skip);
  const std::vector<uint8_t>& skip_layers() const { return batch_.skip_layers; }
  Model& draft_model() { return draft_; }
  Backend& backend() { return backend_; }
  void set_cost_ratio(double c) { cost_ratio_ = c; }
  // Drafting of a sequence stops before a token whose top probability under the draft's raw
  // logits (softmax, before the request's sampling transform) is below `p` (SWIFT's early stop of
  // drafting); 0: never. The decision precedes the draw, so the rule's law is untouched.
  void set_stop_below(double p) { stop_below_ = p; }

 private:
  // Feeds tokens [cached, size) of each sequence; afterwards logits_ row i holds the draft's
  // logits after seqs[i]'s last token.
  Status catch_up(std::span<const DraftSequence> seqs);

  std::unique_ptr<Backend> own_backend_;  // first: it outlives the members that use it
  Model& draft_;
  Backend& backend_;
  KvCache kv_;                                // one sequence per engine slot
  std::vector<std::vector<TokenId>> cached_;  // [slot] tokens whose rows kv_ holds, in order
  double cost_ratio_;
  double stop_below_ = 0;
  int32_t n_vocab_;
  Batch batch_;
  std::vector<float> logits_;                 // [sequence][n_vocab]
  std::vector<float> probs_;                  // [n_vocab]
  std::vector<std::vector<TokenId>> history_;  // [sequence] tokens + drafts so far
  static constexpr int32_t kChunk = 512;      // tokens per pass when catching up on a long prompt
};

}  // namespace frugal::speculative
