// ResiSpec-style residual shaping for multi-candidate verification (multi_candidate.h): a plan of
// how much target mass each of m i.i.d. candidates gives out, chosen so that the residual keeps
// its mass on the tokens later candidates are likely to be.
//
// Why: under the standard rule the first candidate takes min(p, q) of every token, so the tokens
// the draft proposes often (q >= p) are used up at once and the residual moves to tokens the
// draft rarely proposes, where the later candidates, drawn from the same q, seldom land ("residual
// drift"). A token the draft proposes often will very likely come up again among the remaining
// candidates, so giving it out early gains little and costs reach probability for everything else.
//
// The plan, in the unnormalized terms of multi_candidate.h (b_i(y) <= min(R_i(y), P_i q(y))):
// fill every token as late as possible. With G_i = P_i + ... + P_m (the expected number of
// candidates from i on that are reached), token y is given out
//
//     b_i(y) = min(p(y), q(y) G_i) - min(p(y), q(y) G_{i+1}),     G_{m+1} = 0,
//
// i.e. the last candidates take what they can of y and only the rest is left to earlier ones.
// Each b_i(y) <= q(y) P_i, and the reach probabilities must be consistent with what is given
// out: P_i - P_{m+1} = F(G_i), F(G) = sum_y min(p(y), q(y) G). Given eps = P_{m+1} (the
// probability that every candidate is rejected) the P_i follow one by one from the last (each
// equation is monotone in P_i); eps is the one with P_1 = 1 (the sum of p, in floating point). This is our construction for the
// abstract's "reform the proposal during verification to anchor the residual mass in the draft's
// high-confidence region"; the paper's own construction was not available. It never changes the
// output law: exactness rests only on the bounds above, which choose_candidate() enforces
// against the true residual whatever the plan says.
#pragma once

#include <span>
#include <vector>

namespace frugal::speculative {

// capacity = G_1..G_{m+1} (m + 1 values, non-increasing, the last 0) for target p and the
// candidates' proposal q (both [n_vocab]).
void resispec_plan(std::span<const float> p, std::span<const float> q, int m, std::vector<double>& capacity);

// The plan's b_i(y) for a token with target p_y and proposal q_y between capacities g_i >= g_next.
inline double resispec_mass(double p_y, double q_y, double g_i, double g_next) {
  const double a = q_y * g_i < p_y ? q_y * g_i : p_y;
  const double b = q_y * g_next < p_y ? q_y * g_next : p_y;
  return a - b;
}

}  // namespace frugal::speculative
