#include "frugal/decode/speculative/acceptance.h"

namespace frugal::speculative {

namespace {
double draft_probability(std::span<const float> q, TokenId x) {
  return q.empty() ? 1.0 : static_cast<double>(q[static_cast<size_t>(x)]);
}

// Inverts the cumulative sum of weight(i) at target; the last positive weight when rounding
// leaves target at the very end.
template <typename Weight>
TokenId invert_cdf(size_t n, double target, Weight weight) {
  double cum = 0.0;
  TokenId last_positive = 0;
  for (size_t i = 0; i < n; ++i) {
    const double w = weight(i);
    if (w <= 0.0) continue;
    cum += w;
    last_positive = static_cast<TokenId>(i);
    if (cum > target) return last_positive;
  }
  return last_positive;
}
}  // namespace

bool accept_draft_token(std::span<const float> p, std::span<const float> q, TokenId x, double u) {
  if (x < 0 || static_cast<size_t>(x) >= p.size()) return false;
  const double px = p[static_cast<size_t>(x)];
  const double qx = draft_probability(q, x);
  if (qx <= 0.0) return false;  // not a token the draft could propose
  // u < p/q without the division: exact for q = 1, and p >= q always keeps x.
  return u * qx < px;
}

TokenId sample_residual(std::span<const float> p, std::span<const float> q, TokenId x, double u) {
  const size_t n = p.size();
  const auto residual = [&](size_t i) {
    const double qi = q.empty() ? (static_cast<TokenId>(i) == x ? 1.0 : 0.0) : static_cast<double>(q[i]);
    const double d = static_cast<double>(p[i]) - qi;
    return d > 0.0 ? d : 0.0;
  };
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += residual(i);
  if (!(total > 0.0)) return sample_distribution(p, u);
  return invert_cdf(n, u * total, residual);
}

TokenId sample_distribution(std::span<const float> p, double u) {
  double total = 0.0;
  for (float w : p) total += w > 0.0f ? w : 0.0f;
  return invert_cdf(p.size(), u * total, [&](size_t i) { return static_cast<double>(p[i]); });
}

}  // namespace frugal::speculative
