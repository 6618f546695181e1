#include "frugal/decode/speculative/resispec.h"

#include <algorithm>
#include <cstddef>

namespace frugal::speculative {

namespace {

// F(G) = sum_y min(p(y), q(y) G) over the tokens both give mass to: sorted by t = p / q, the
// tokens with t <= G contribute p, the others q G, so F is piecewise linear with breakpoints t.
class FillCurve {
 public:
  FillCurve(std::span<const float> p, std::span<const float> q) {
    struct Entry {
      double t, p, q;
    };
    std::vector<Entry> e;
    for (size_t y = 0; y < p.size() && y < q.size(); ++y) {
      if (p[y] > 0.0f && q[y] > 0.0f) e.push_back({double(p[y]) / double(q[y]), double(p[y]), double(q[y])});
    }
    std::sort(e.begin(), e.end(), [](const Entry& a, const Entry& b) { return a.t < b.t; });
    t_.resize(e.size());
    p_before_.assign(e.size() + 1, 0.0);
    q_from_.assign(e.size() + 1, 0.0);
    for (size_t i = 0; i < e.size(); ++i) {
      t_[i] = e[i].t;
      p_before_[i + 1] = p_before_[i] + e[i].p;
    }
    for (size_t i = e.size(); i-- > 0;) q_from_[i] = q_from_[i + 1] + e[i].q;
  }
  // Tokens with t <= g (saturated at capacity g).
  size_t saturated(double g) const { return static_cast<size_t>(std::upper_bound(t_.begin(), t_.end(), g) - t_.begin()); }
  double operator()(double g) const {
    const size_t j = saturated(g);
    return p_before_[j] + g * q_from_[j];
  }
  // The smallest reach P >= 0 with P - F(P + g) >= eps. The left side is continuous and does not
  // decrease in P (F grows by at most sum q <= 1 per unit), linear between the breakpoints
  // P = t_j - g: find the first breakpoint where it is reached, then solve on the piece before it.
  double solve_reach(double g, double eps) const {
    const auto phi = [&](double reach) { return reach - (*this)(reach + g) - eps; };
    if (phi(0.0) >= 0.0) return 0.0;
    size_t lo = saturated(g), hi = t_.size();  // breakpoints ahead: t_[lo..hi)
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (phi(t_[mid] - g) >= 0.0) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    // On the piece ending at breakpoint lo (or unbounded), tokens [0, lo) are saturated:
    // P - p_before[lo] - (P + g) q_from[lo] = eps.
    const double slope = 1.0 - q_from_[lo];
    const double start = lo > 0 ? std::max(0.0, t_[lo - 1] - g) : 0.0;
    const double end = lo < t_.size() ? t_[lo] - g : start + 1e300;
    if (!(slope > 0.0)) return end;  // flat below eps: reached only at the breakpoint
    const double reach = (eps + p_before_[lo] + g * q_from_[lo]) / slope;
    return std::clamp(reach, start, end);
  }

 private:
  std::vector<double> t_, p_before_, q_from_;
};

// Fills capacity[i] = G_{i+1} (0-based candidates) from the last candidate back for a given
// eps = P_{m+1}; returns P_1.
double plan_for(const FillCurve& fill, int m, double eps, std::vector<double>& capacity) {
  capacity.assign(static_cast<size_t>(m) + 1, 0.0);
  double g = 0.0, reach = 0.0;
  for (int i = m - 1; i >= 0; --i) {
    reach = fill.solve_reach(g, eps);
    g += reach;
    capacity[static_cast<size_t>(i)] = g;
  }
  return reach;
}

}  // namespace

void resispec_plan(std::span<const float> p, std::span<const float> q, int m, std::vector<double>& capacity) {
  if (m <= 0) {
    capacity.assign(1, 0.0);
    return;
  }
  const FillCurve fill(p, q);
  // P_1 must be the target mass there is (1 up to the rounding of p's sum; choose_candidate's
  // reach is sum R as well).
  double total = 0.0;
  for (const float v : p) total += v > 0.0f ? v : 0.0f;
  // P_1 grows with eps (every P_i does): eps = 0 gives the empty plan (P_1 = 0), eps = total one with
  // P_1 >= total. P_1(eps) is piecewise linear, so regula falsi (Illinois) finds P_1 = total in a few
  // steps where bisection would take dozens; the bracket keeps it safe.
  double lo = 0.0, hi = total;  // eps = total: every P_i >= total
  double f_lo = plan_for(fill, m, lo, capacity) - total, f_hi = plan_for(fill, m, hi, capacity) - total;
  int side = 0;
  for (int it = 0; it < 100 && f_hi > 1e-12; ++it) {
    double mid = f_hi - f_lo > 0.0 ? hi - f_hi * (hi - lo) / (f_hi - f_lo) : 0.5 * (lo + hi);
    if (!(mid > lo && mid < hi)) mid = 0.5 * (lo + hi);
    const double f_mid = plan_for(fill, m, mid, capacity) - total;
    if (f_mid >= 0.0) {
      hi = mid;
      f_hi = f_mid;
      if (side == 1) f_lo *= 0.5;
      side = 1;
    } else {
      lo = mid;
      f_lo = f_mid;
      if (side == -1) f_hi *= 0.5;
      side = -1;
    }
  }
  plan_for(fill, m, hi, capacity);
}

}  // namespace frugal::speculative
