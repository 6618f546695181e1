// Multi-candidate verification at one position: m candidates x_1..x_m, candidate i drawn from its
// own proposal q_i independently of the others and of the target (k drafts drawn i.i.d. from the
// draft, SpecInfer / MCSD "multi-draft"), are tried in order against the target distribution p;
// the first one kept is the output, and when none is, the output is drawn from what is left.
//
// Every rule here is one instance of a sequential coupling written with unnormalized masses.
// R_1 = p is the target mass not yet given out; P_i = sum_y R_i(y) is the probability that
// candidate i is reached (every earlier one rejected). The rule chooses, for every token y, the
// mass b_i(y) it gives out at candidate i, with
//
//     0 <= b_i(y) <= min(R_i(y), P_i q_i(y)),
//
// and keeps x_i with probability b_i(x_i) / (P_i q_i(x_i)); then R_{i+1} = R_i - b_i. After the
// last candidate the output is drawn from R_{m+1} normalized. Then
// P(output y) = sum_i P_i q_i(y) b_i(y) / (P_i q_i(y)) + R_{m+1}(y) = sum_i b_i(y) + R_{m+1}(y)
// = p(y): the output law is exactly p, whatever b_i is chosen within the bounds, provided b_i
// depends only on what is known before x_i is drawn (p, the q_j and the earlier candidates: none
// of the rules here looks at a candidate before it is tried). The rules differ only in b_i:
//
// - kStandard: b_i = min(R_i, P_i q_i), the most each candidate can take. In normalized terms
//   (r_i = R_i / P_i) this is the recursive rejection rule: keep x_i with min(1, r_i(x) / q_i(x)),
//   on rejection r_{i+1} = norm(max(r_i - q_i, 0)). m = 1 is Leviathan / Chen's rule.
// - kResiSpec: the residual-shaping plan of resispec.h, which gives out less at the early
//   candidates on the tokens the draft proposes often, so that the residual keeps its mass where
//   the later candidates land (see docs/speculative.md for the derivation).
//
// Candidates drawn without replacement (q_i = q with the tried tokens removed, renormalized) are
// covered by the same bounds with that q_i; the engine draws its candidates i.i.d., so only the
// i.i.d. schemes are wired in.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "frugal/core/status.h"
#include "frugal/core/token_id.h"

namespace frugal::speculative {

// Values are frozen (logs and the request record name them).
enum class CandidateRule : int {
  kStandard = 0,  // recursive rejection, the most mass at every candidate
  kResiSpec = 1,  // residual shaping (resispec.h)
};
const char* candidate_rule_name(CandidateRule r);  // "standard", "resispec"
Result<CandidateRule> parse_candidate_rule(const std::string& name);

struct CandidateChoice {
  int32_t index = -1;  // the candidate kept, or -1: none, `token` drawn from the last residual
  TokenId token = -1;
};

// Reusable buffers (one per thread of verification).
struct CandidateScratch {
  std::vector<double> residual;    // R_i, [n_vocab]
  std::vector<double> capacity;    // the ResiSpec plan's G_0..G_m
  std::vector<float> one_hot;      // q of a candidate proposed with certainty
};

// Tries candidates x[i] ~ q[i] (each [n_vocab]; an empty span: x[i] was proposed with certainty)
// against p ([n_vocab], sums to 1 up to rounding) under `rule`, drawing the uniforms it needs
// from `uniform` (values in [0, 1)). x.size() == q.size() >= 1.
CandidateChoice choose_candidate(std::span<const float> p, std::span<const std::span<const float>> q,
                                 std::span<const TokenId> x, CandidateRule rule, const std::function<double()>& uniform,
                                 CandidateScratch& scratch);

// The probability that one of m candidates drawn i.i.d. from q is kept under `rule` (the
// expectation of choose_candidate()'s index >= 0 over the candidates and its uniforms):
// sum_i sum_y b_i(y), with every b_i as choose_candidate() gives it. 1 - this is the
// probability that the depth ends in a draw from the residual.
double kept_probability(std::span<const float> p, std::span<const float> q, int m, CandidateRule rule,
                        CandidateScratch& scratch);

}  // namespace frugal::speculative
