// One verify pass of speculative decoding for one sequence: walks the draft against the target's
// logits at each drafted position and decides how many draft tokens are kept and which token the
// target adds (acceptance.h's rule under sampling, argmax matching under greedy decoding).
#pragma once

#include <span>
#include <vector>

#include "frugal/decode/sampler.h"
#include "frugal/decode/speculative/drafter.h"

namespace frugal::speculative {

struct Verdict {
  int32_t accepted = 0;  // draft tokens kept, a prefix of the draft
  TokenId next = -1;     // the target's token after them (a replacement, or the bonus token when
                         // the whole draft was kept)
};

// `target_logits`: [draft.tokens.size() + 1][n_vocab], row i the target's logits after the
// sequence and the first i draft tokens. `history`: the sequence's tokens followed by the draft
// (the sampler's penalties see the drafted prefix at each position). `sampler` is the request's:
// its transform gives p, its generator the uniform draws (none under greedy decoding, where each
// row's choice is sample()'s, i.e. plain decoding's). `probs`: [n_vocab] scratch.
Verdict verify_draft(const float* target_logits, size_t n_vocab, std::span<const TokenId> history, const Draft& draft,
                     Sampler& sampler, std::span<float> probs);

}  // namespace frugal::speculative
