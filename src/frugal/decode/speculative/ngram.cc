#include "frugal/decode/speculative/ngram.h"

#include <algorithm>

namespace frugal::speculative {

std::vector<TokenId> lookup_continuation(std::span<const TokenId> tokens, int32_t ngram_max, int32_t max_tokens) {
  const auto n_tok = static_cast<int64_t>(tokens.size());
  if (max_tokens <= 0) return {};
  for (int64_t n = std::min<int64_t>(ngram_max, n_tok - 1); n >= 1; --n) {
    const auto suffix = tokens.subspan(static_cast<size_t>(n_tok - n));
    // Most recent first: an occurrence starting at j ends before the suffix itself starts to
    // overlap its own continuation at j + n <= n_tok - 1.
    for (int64_t j = n_tok - n - 1; j >= 0; --j) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + j)) continue;
      const int64_t from = j + n;
      const int64_t to = std::min<int64_t>(n_tok, from + max_tokens);
      return std::vector<TokenId>(tokens.begin() + from, tokens.begin() + to);
    }
  }
  return {};
}

Status NgramDrafter::propose(std::span<const DraftSequence> seqs, std::span<Draft> out) {
  if (out.size() != seqs.size()) {
    return error(ErrorCode::kInvalidArgument, "ngram drafter: {} outputs for {} sequences", out.size(), seqs.size());
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    out[i].q.clear();
    out[i].tokens = lookup_continuation(seqs[i].tokens, ngram_max_, seqs[i].max_tokens);
  }
  return ok_status();
}

}  // namespace frugal::speculative
