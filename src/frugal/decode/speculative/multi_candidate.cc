#include "frugal/decode/speculative/multi_candidate.h"

#include <algorithm>

#include "frugal/decode/speculative/acceptance.h"
#include "frugal/decode/speculative/resispec.h"

namespace frugal::speculative {

const char* candidate_rule_name(CandidateRule r) {
  switch (r) {
    case CandidateRule::kStandard: return "standard";
    case CandidateRule::kResiSpec: return "resispec";
  }
  return "standard";
}

Result<CandidateRule> parse_candidate_rule(const std::string& name) {
  if (name == "standard") return CandidateRule::kStandard;
  if (name == "resispec") return CandidateRule::kResiSpec;
  return error(ErrorCode::kInvalidArgument, "multi-candidate rule '{}' is not standard or resispec", name);
}

CandidateChoice choose_candidate(std::span<const float> p, std::span<const std::span<const float>> q,
                                 std::span<const TokenId> x, CandidateRule rule, const std::function<double()>& uniform,
                                 CandidateScratch& s) {
  const size_t n = p.size();
  const size_t m = std::min(x.size(), q.size());
  const auto proposal = [&](size_t i) -> std::span<const float> {
    if (!q[i].empty()) return q[i];
    s.one_hot.assign(n, 0.0f);
    if (x[i] >= 0 && static_cast<size_t>(x[i]) < n) s.one_hot[static_cast<size_t>(x[i])] = 1.0f;
    return s.one_hot;
  };
  // R_1 = p; `reach` = P_i = sum R_i, recomputed from R after every candidate so the acceptance
  // probabilities always use the mass really left.
  s.residual.resize(n);
  double reach = 0.0;
  for (size_t y = 0; y < n; ++y) {
    s.residual[y] = p[y] > 0.0f ? static_cast<double>(p[y]) : 0.0;
    reach += s.residual[y];
  }
  // The plan is made for the first candidate's proposal; the later ones' (equal up to rounding
  // in the engine, where every chain's q comes from its own draft pass) only enter the bounds.
  const bool shaped = rule == CandidateRule::kResiSpec && m > 1;
  std::vector<float> plan_q;
  if (shaped) {
    const std::span<const float> q0 = proposal(0);
    plan_q.assign(q0.begin(), q0.end());
    resispec_plan(p, plan_q, static_cast<int>(m), s.capacity);
  }
  for (size_t i = 0; i < m && reach > 0.0; ++i) {
    const std::span<const float> qi = proposal(i);
    // b_i(y): at most what is left of y and what candidate i can bring (P_i q_i(y)); the plan
    // may ask for less.
    const auto give = [&](size_t y) {
      double b = std::min(s.residual[y], reach * static_cast<double>(qi[y]));
      if (shaped) {
        b = std::min(b, resispec_mass(static_cast<double>(p[y]), static_cast<double>(plan_q[y]), s.capacity[i],
                                      s.capacity[i + 1]));
      }
      return b > 0.0 ? b : 0.0;
    };
    const TokenId xi = x[i];
    const double u = uniform();
    if (xi >= 0 && static_cast<size_t>(xi) < n && qi[static_cast<size_t>(xi)] > 0.0f) {
      const auto y = static_cast<size_t>(xi);
      // Keep x_i with probability b_i(x_i) / (P_i q_i(x_i)), without the division.
      if (u * reach * static_cast<double>(qi[y]) < give(y)) return {static_cast<int32_t>(i), xi};
    }
    double left = 0.0;
    for (size_t y = 0; y < n; ++y) {
      const double r = s.residual[y] - give(y);
      s.residual[y] = r > 0.0 ? r : 0.0;
      left += s.residual[y];
    }
    reach = left;
  }
  // Every candidate rejected: a draw from R_{m+1} normalized. No mass left means rounding made
  // the rejection of all a probability-zero event; p is the answer then.
  const double u = uniform();
  if (!(reach > 0.0)) return {-1, sample_distribution(p, u)};
  const double target = u * reach;
  double cum = 0.0;
  TokenId last = 0;
  for (size_t y = 0; y < n; ++y) {
    if (s.residual[y] <= 0.0) continue;
    cum += s.residual[y];
    last = static_cast<TokenId>(y);
    if (cum > target) return {-1, last};
  }
  return {-1, last};
}

double kept_probability(std::span<const float> p, std::span<const float> q, int m, CandidateRule rule,
                        CandidateScratch& s) {
  const size_t n = std::min(p.size(), q.size());
  s.residual.resize(n);
  double reach = 0.0;
  for (size_t y = 0; y < n; ++y) {
    s.residual[y] = p[y] > 0.0f ? static_cast<double>(p[y]) : 0.0;
    reach += s.residual[y];
  }
  const bool shaped = rule == CandidateRule::kResiSpec && m > 1;
  if (shaped) resispec_plan(p, q, m, s.capacity);
  double kept = 0.0;
  for (int i = 0; i < m && reach > 0.0; ++i) {
    double left = 0.0;
    for (size_t y = 0; y < n; ++y) {
      // The same b_i(y) as choose_candidate() with q_i = q.
      double b = std::min(s.residual[y], reach * static_cast<double>(q[y]));
      if (shaped) {
        b = std::min(b, resispec_mass(static_cast<double>(p[y]), static_cast<double>(q[y]),
                                      s.capacity[static_cast<size_t>(i)], s.capacity[static_cast<size_t>(i) + 1]));
      }
      b = b > 0.0 ? b : 0.0;
      kept += b;
      s.residual[y] = std::max(0.0, s.residual[y] - b);
      left += s.residual[y];
    }
    reach = left;
  }
  return kept;
}

}  // namespace frugal::speculative
