// The verification rule of speculative decoding (Leviathan et al. 2023, Chen et al. 2023): a drafted
// token x, proposed with probability q(x), is kept with probability min(1, p(x) / q(x)), where p is
// the target's distribution at that position; at the first rejection the replacement is drawn from
// the residual max(0, p - q), normalized. Whatever q is, the kept-or-replaced token is then
// distributed exactly as p, so speculative sampling changes speed, never the output law. p and q
// are the distributions the request's sampler really draws from (Sampler::distribution: penalties,
// top-k, top-p, min-p and temperature applied to both), so the law is that of plain sampling.
//
// A drafter that proposes deterministically (n-gram lookup, a greedy draft) has q one-hot at x:
// then x is kept with probability p(x) and the residual is p without x, renormalized. Under greedy
// decoding p is one-hot at the target's argmax and the rule reduces to "keep x while it is the
// argmax; else emit the argmax", which gives the plain greedy tokens exactly.
#pragma once

#include <cstdint>
#include <span>

#include "frugal/core/token_id.h"

namespace frugal::speculative {

// True when draft token `x` is kept: u < p(x) / q(x), u uniform in [0, 1). `q` empty: x was
// proposed with certainty (q(x) = 1).
bool accept_draft_token(std::span<const float> p, std::span<const float> q, TokenId x, double u);

// The replacement after `x` was rejected: a draw from max(0, p - q) normalized (q empty: one-hot
// at x), inverting the cumulative sum at u * total. When rounding leaves no residual mass (p == q
// up to float error, where a rejection has probability ~0) it draws from p instead.
TokenId sample_residual(std::span<const float> p, std::span<const float> q, TokenId x, double u);

// A draw from distribution `p` (sums to 1 up to rounding): the first token whose cumulative
// probability passes u * sum(p).
TokenId sample_distribution(std::span<const float> p, double u);

}  // namespace frugal::speculative
