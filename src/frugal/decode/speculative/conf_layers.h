// ConfLayers as the layer-skipping audit runs it: confidence-gated early exit. The target drafts
// by running its first `exit` layers only (the later ones skipped whole; the final norm and the
// LM head read the residual stream there), and the full model verifies. The exit layer is chosen
// online: at the first drafting call and every `search_every` calls after, the last kWindow tokens
// of the first sequence drafted for run teacher-forced through each exit from the shallowest, and
// the first exit whose mean top-token probability (softmax of the LM head there) reaches
// --spec-confidence is used; none does: the deepest (all layers but the last). Drafting of a sequence stops
// before a token whose top probability is below the same threshold.
//
// The exit is chosen per search step, not per token: a token exiting earlier than the tokens
// after it would leave those deeper layers without its K/V. The ConfLayers repository itself
// selects a skip set of middle layers from the entropy of hidden states instead; that variant is
// not done here.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "frugal/decode/speculative/draft_model.h"

namespace frugal::speculative {

class ConfLayersDrafter final : public DraftModelDrafter {
 public:
  static constexpr int32_t kWindow = 32;

  // o.skip_set: the set frozen, no search (any set; the audit replays an exit mask); o.skip_layers
  // must be 0 (the exit is chosen by confidence). kInvalidArgument for fewer than three layers;
  // kOverBudget when o.draft_memory > 0 cannot hold its KV.
  static Result<std::unique_ptr<ConfLayersDrafter>> create(Model& target, const SpeculativeOptions& o,
                                                           const DrafterContext& ctx);
  Method method() const override { return Method::kConfLayers; }
  Status propose(std::span<const DraftSequence> seqs, std::span<Draft> out) override;
  std::string skip_set() const override;
  double search_ms() const override { return search_ms_; }
  // Layers the draft runs (0 before the first choice or with a frozen set).
  int32_t exit_layer() const { return exit_; }
  // The mean top-token probability at each exit 1..n_layer - 2 at the last search step (entries
  // past the chosen exit were not measured: NaN).
  const std::vector<double>& confidences() const { return confidences_; }

 private:
  ConfLayersDrafter(Model& target, Backend& backend, KvCache kv, int n_slots, const SpeculativeOptions& o);
  Status choose_exit(std::span<const TokenId> tokens);
  static std::vector<uint8_t> exit_set(int32_t n_layer, int32_t exit);

  double threshold_;
  int32_t search_every_;
  bool frozen_;
  int64_t calls_ = 0;
  int32_t exit_ = 0;
  double search_ms_ = 0;
  std::vector<uint8_t> in_use_;
  std::vector<double> confidences_;
  std::optional<KvCache> scratch_;
  std::vector<float> window_logits_;
};

}  // namespace frugal::speculative
