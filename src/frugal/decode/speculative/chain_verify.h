// One verify pass over several drafts of one sequence (multi-candidate speculative decoding): the
// drafter ran `k` chains from the same sequence, each drawn independently from the draft (under
// greedy decoding: chain c starts with the draft's c-th most likely token, then follows its
// argmax), and the target scored every chain in the same pass. The chains form a token tree (the
// trie of their prefixes); the walk goes down it one depth at a time. At depth d the chains whose
// first d tokens equal the tokens accepted so far are alive; their d-th tokens are the candidates
// (i.i.d. from the draft's distribution after that common prefix) and multi_candidate.h's rule
// picks one of them or draws the target's token from the residual. Under greedy decoding a
// candidate is kept when it is the target's argmax, so the tokens are plain decoding's.
#pragma once

#include <span>
#include <vector>

#include "frugal/decode/sampler.h"
#include "frugal/decode/speculative/drafter.h"
#include "frugal/decode/speculative/multi_candidate.h"

namespace frugal::speculative {

struct ChainVerdict {
  int32_t chain = 0;     // a chain holding the whole accepted prefix (the lowest such index)
  int32_t accepted = 0;  // its tokens kept
  TokenId next = -1;     // the target's token after them
};

// rows[c][d]: the target's logits ([n_vocab]) after the sequence and the first d tokens of chain
// c, for d in [0, chains[c].tokens.size()] (row 0 is the same for every chain). `tokens`: the
// sequence before its drafts. `sampler`: the request's (its transform gives p, its generator the
// uniform draws; none under greedy decoding). `probs`: [n_vocab] scratch.
ChainVerdict verify_chains(std::span<const std::vector<const float*>> rows, size_t n_vocab,
                           std::span<const TokenId> tokens, std::span<const Draft> chains, CandidateRule rule,
                           Sampler& sampler, std::span<float> probs, CandidateScratch& scratch);

}  // namespace frugal::speculative
