// Pearson's chi-square goodness-of-fit test for the exactness tests of speculative decoding
// (speculative_test.cc, multi_candidate_test.cc).
#pragma once

#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace frugal::speculative {

// P(X >= x) for X ~ chi-square(df): the regularized upper incomplete gamma Q(df/2, x/2), by its
// series below a + 1 and its continued fraction above (Numerical Recipes, gammq).
inline double chi_square_survival(double x, int df) {
  const double a = df / 2.0, z = x / 2.0;
  if (z <= 0) return 1.0;
  const double log_prefix = -z + a * std::log(z) - std::lgamma(a);
  if (z < a + 1) {
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 10000; ++n) {
      term *= z / (a + n);
      sum += term;
      if (term < sum * 1e-15) break;
    }
    return 1.0 - sum * std::exp(log_prefix);
  }
  double b = z + 1 - a, c = 1e300, d = 1 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (std::fabs(c) < 1e-300) c = 1e-300;
    d = 1 / d;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1) < 1e-15) break;
  }
  return std::exp(log_prefix) * h;
}

struct FitResult {
  double p_value = 1.0;
  bool impossible_seen = false;  // a draw where the expected probability is 0
};

// Pearson's test of `counts` against `expected` probabilities.
inline FitResult goodness_of_fit(const std::vector<int64_t>& counts, const std::vector<double>& expected) {
  const double n = static_cast<double>(std::accumulate(counts.begin(), counts.end(), int64_t{0}));
  double stat = 0;
  int cells = 0;
  FitResult r;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (expected[i] <= 0) {
      r.impossible_seen = r.impossible_seen || counts[i] > 0;
      continue;
    }
    const double e = n * expected[i];
    stat += (counts[static_cast<size_t>(i)] - e) * (counts[static_cast<size_t>(i)] - e) / e;
    ++cells;
  }
  r.p_value = cells > 1 ? chi_square_survival(stat, cells - 1) : 1.0;
  return r;
}

}  // namespace frugal::speculative
