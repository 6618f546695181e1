// The n-gram (prompt lookup) drafter: the sequence's own text is the draft model. It finds the most
// recent earlier occurrence of the sequence's last n tokens (n from ngram_max down to 1) and
// proposes the tokens that followed it, with certainty (q one-hot, so acceptance.h keeps a token
// with the target's probability of it). Costs no model pass, which pays off where the output
// copies from the context: retrieval, key-value recall, code edits.
#pragma once

#include "frugal/decode/speculative/drafter.h"

namespace frugal::speculative {

// The proposal for one token sequence: up to `max_tokens` tokens that followed the most recent
// earlier occurrence of its longest matching suffix (of at most `ngram_max` tokens); empty when
// no suffix recurs.
std::vector<TokenId> lookup_continuation(std::span<const TokenId> tokens, int32_t ngram_max, int32_t max_tokens);

class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(int32_t ngram_max) : ngram_max_(ngram_max) {}
  Method method() const override { return Method::kNgram; }
  Status propose(std::span<const DraftSequence> seqs, std::span<Draft> out) override;
  double cost_ratio() const override { return 0.0; }

 private:
  int32_t ngram_max_;
};

}  // namespace frugal::speculative
