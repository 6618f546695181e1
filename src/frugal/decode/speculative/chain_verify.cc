#include "frugal/decode/speculative/chain_verify.h"

#include "frugal/decode/speculative/acceptance.h"

namespace frugal::speculative {

ChainVerdict verify_chains(std::span<const std::vector<const float*>> rows, size_t n_vocab,
                           std::span<const TokenId> tokens, std::span<const Draft> chains, CandidateRule rule,
                           Sampler& sampler, std::span<float> probs, CandidateScratch& scratch) {
  const bool greedy = !(sampler.params().temperature > 0.0f);
  std::vector<size_t> alive;  // chains agreeing with the accepted prefix, in index order
  for (size_t c = 0; c < chains.size() && c < rows.size(); ++c) alive.push_back(c);
  ChainVerdict v;
  if (alive.empty()) return v;
  std::vector<TokenId> history(tokens.begin(), tokens.end());  // the sequence + the accepted prefix
  std::vector<size_t> cand_chain;
  std::vector<TokenId> cand_token;
  std::vector<std::span<const float>> cand_q;
  const std::function<double()> uniform = [&sampler] { return sampler.uniform(); };
  for (size_t d = 0;; ++d) {
    v.chain = static_cast<int32_t>(alive.front());
    v.accepted = static_cast<int32_t>(d);
    // Every alive chain has the same prefix, hence the same target row at this depth.
    const float* row = rows[alive.front()][d];
    cand_chain.clear();
    cand_token.clear();
    cand_q.clear();
    for (size_t c : alive) {
      if (chains[c].tokens.size() <= d) continue;
      cand_chain.push_back(c);
      cand_token.push_back(chains[c].tokens[d]);
      cand_q.push_back(chains[c].q_row(d, n_vocab));
    }
    TokenId kept = -1;
    if (greedy) {
      const TokenId t = sampler.sample(row, history);  // plain decoding's choice at this position
      for (TokenId x : cand_token) {
        if (x == t) kept = t;
      }
      if (kept < 0) {
        v.next = t;
        return v;
      }
    } else {
      sampler.distribution(row, history, probs.data());
      if (cand_chain.empty()) {  // every alive chain ends here: the target's own next token
        v.next = sample_distribution(probs, sampler.uniform());
        return v;
      }
      const CandidateChoice choice = choose_candidate(probs, cand_q, cand_token, rule, uniform, scratch);
      if (choice.index < 0) {
        v.next = choice.token;
        return v;
      }
      kept = choice.token;
    }
    // Down one depth: the chains whose token here is the kept one (duplicates of it stay alive).
    std::vector<size_t> next_alive;
    for (size_t j = 0; j < cand_chain.size(); ++j) {
      if (cand_token[j] == kept) next_alive.push_back(cand_chain[j]);
    }
    alive.swap(next_alive);
    history.push_back(kept);
  }
}

}  // namespace frugal::speculative
