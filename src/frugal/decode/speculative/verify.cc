#include "frugal/decode/speculative/verify.h"

#include "frugal/decode/speculative/acceptance.h"

namespace frugal::speculative {

Verdict verify_draft(const float* target_logits, size_t n_vocab, std::span<const TokenId> history, const Draft& draft,
                     Sampler& sampler, std::span<float> probs) {
  const size_t n_drafted = draft.tokens.size();
  const size_t n_tok = history.size() - n_drafted;  // the sequence before its draft
  const bool greedy = !(sampler.params().temperature > 0.0f);
  Verdict v;
  for (size_t i = 0; i <= n_drafted; ++i) {
    const float* row = target_logits + i * n_vocab;
    const std::span<const TokenId> before = history.first(n_tok + i);
    if (greedy) {
      // Exactly plain decoding's choice at this position: the argmax after penalties.
      const TokenId t = sampler.sample(row, before);
      if (i < n_drafted && t == draft.tokens[i]) {
        ++v.accepted;
        continue;
      }
      v.next = t;
      return v;
    }
    sampler.distribution(row, before, probs.data());
    if (i == n_drafted) {  // every draft token kept: one more from the target's last row
      v.next = sample_distribution(probs, sampler.uniform());
      return v;
    }
    const TokenId x = draft.tokens[i];
    const std::span<const float> q = draft.q_row(i, n_vocab);
    if (accept_draft_token(probs, q, x, sampler.uniform())) {
      ++v.accepted;
      continue;
    }
    v.next = sample_residual(probs, q, x, sampler.uniform());
    return v;
  }
  return v;  // not reached: the loop returns at i == n_drafted at the latest
}

}  // namespace frugal::speculative
