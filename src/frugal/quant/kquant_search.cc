#include "frugal/quant/kquant_search.h"

#include <algorithm>
#include <cmath>

#include "frugal/quant/ref_util.h"

namespace frugal::quant {
namespace {

constexpr float kEps = 1e-15f;

// Codes for one candidate inverse scale and the weighted sums of the LS fit scale = sxl/sll.
void symmetric_candidate(int n, int nmax, const float* x, const float* w, float iscale, int8_t* L,
                         float* sxl, float* sll) {
  float sumlx = 0.f;
  float suml2 = 0.f;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l + nmax);
    const float wi = w ? w[i] : x[i] * x[i];
    sumlx += wi * x[i] * l;
    suml2 += wi * l * l;
  }
  *sxl = sumlx;
  *sll = suml2;
}

}  // namespace

float search_symmetric_scale(int n, int nmax, const float* x, const float* w, int8_t* L) {
  const float max = signed_absmax(x, n);
  if (std::fabs(max) < kEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  int8_t trial[256];
  float sumlx = 0.f;
  float suml2 = 0.f;
  symmetric_candidate(n, nmax, x, w, -nmax / max, L, &sumlx, &suml2);
  float scale = suml2 > 0.f ? sumlx / suml2 : 0.f;
  float best = scale * sumlx;  // reduction of the weighted squared error: sxl^2/sll
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    symmetric_candidate(n, nmax, x, w, -(nmax + 0.1f * is) / max, trial, &sumlx, &suml2);
    if (suml2 > 0.f && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = trial[i];
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

float search_symmetric_scale_iterative(int n, int nmax, const float* x, int8_t* L) {
  const float max = signed_absmax(x, n);
  if (std::fabs(max) < kEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  const float iscale = -nmax / max;
  int l[256];
  float sumlx = 0.f;
  float suml2 = 0.f;
  for (int i = 0; i < n; ++i) {
    l[i] = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    const float wi = x[i] * x[i];
    sumlx += wi * x[i] * l[i];
    suml2 += wi * l[i] * l[i];
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float wi = x[i] * x[i];
      // Fit without element i, then the code for i that suits that scale best.
      float slx = sumlx - wi * x[i] * l[i];
      if (!(slx > 0.f)) continue;
      float sl2 = suml2 - wi * l[i] * l[i];
      const int nl = clamp_int(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (nl == l[i]) continue;
      slx += wi * x[i] * nl;
      sl2 += wi * nl * nl;
      if (sl2 > 0.f && slx * slx * suml2 > sumlx * sumlx * sl2) {
        l[i] = nl;
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(l[i] + nmax);
  return sumlx / suml2;
}

float search_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min_out,
                       const ScaleMinSearch& p) {
  float min = x[0];
  float max = x[0];
  float sum_w = 0.f;
  float sum_x = 0.f;
  auto weight = [&](int i) { return w ? w[i] : x[i] * x[i]; };
  for (int i = 0; i < n; ++i) {
    min = std::fmin(min, x[i]);
    max = std::fmax(max, x[i]);
    sum_w += weight(i);
    sum_x += weight(i) * x[i];
  }
  if (min > 0.f) min = 0.f;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *min_out = -min;
    return 0.f;
  }
  auto score = [&](float scale, float mn, const uint8_t* codes) {
    float err = 0.f;
    for (int i = 0; i < n; ++i) {
      const float diff = scale * codes[i] + mn - x[i];
      err += weight(i) * (p.use_mad ? std::fabs(diff) : diff * diff);
    }
    return err;
  };
  float iscale = nmax / (max - min);
  float scale = 1.f / iscale;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax));
  }
  float best = score(scale, min, L);
  uint8_t trial[256];
  for (int is = 0; is <= p.nstep; ++is) {
    iscale = (p.rmin + p.rdelta * is + nmax) / (max - min);
    float sum_l = 0.f;
    float sum_l2 = 0.f;
    float sum_xl = 0.f;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax);
      trial[i] = static_cast<uint8_t>(l);
      sum_l += weight(i) * l;
      sum_l2 += weight(i) * l * l;
      sum_xl += weight(i) * l * x[i];
    }
    // Weighted LS for x ~ a*l + b over this candidate's codes.
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det <= 0.f) continue;
    float a = (sum_w * sum_xl - sum_x * sum_l) / det;
    float b = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (b > 0.f) {
      b = 0.f;
      a = sum_xl / sum_l2;
    }
    const float err = score(a, b, trial);
    if (err < best) {
      for (int i = 0; i < n; ++i) L[i] = trial[i];
      best = err;
      scale = a;
      min = b;
    }
  }
  *min_out = -min;
  return scale;
}

float search_positive_scale(int n, int nmax, const float* x, const float* w, uint8_t* L) {
  float max = 0.f;
  for (int i = 0; i < n; ++i) max = std::max(max, x[i]);
  if (max == 0.f) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  // The candidate inverse scale with the least weighted squared error at its own 1/iscale
  // (codes are not clamped for the first one: x <= max maps to at most nmax).
  float iscale = nmax / max;
  auto mse = [&](float is, bool clamp) {
    const float scale = 1.f / is;
    float err = 0.f;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(is * x[i]);
      if (clamp) l = std::min(nmax, l);
      const float diff = x[i] - scale * l;
      err += w[i] * diff * diff;
    }
    return err;
  };
  float best = mse(iscale, false);
  for (int is = -4; is <= 4; ++is) {
    if (is == 0) continue;
    const float candidate = (0.1f * is + nmax) / max;
    const float err = mse(candidate, true);
    if (err < best) {
      best = err;
      iscale = candidate;
    }
  }
  float sumlx = 0.f;
  float suml2 = 0.f;
  int l[256];
  for (int i = 0; i < n; ++i) {
    l[i] = std::min(nmax, nearest_int(iscale * x[i]));
    sumlx += w[i] * x[i] * l[i];
    suml2 += w[i] * l[i] * l[i];
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      float slx = sumlx - w[i] * x[i] * l[i];
      float sl2 = suml2 - w[i] * l[i] * l[i];
      if (!(slx > 0.f && sl2 > 0.f)) continue;
      const int nl = std::min(nmax, nearest_int(x[i] * sl2 / slx));
      if (nl == l[i]) continue;
      slx += w[i] * x[i] * nl;
      sl2 += w[i] * nl * nl;
      if (slx * slx * suml2 > sumlx * sumlx * sl2) {
        l[i] = nl;
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(l[i]);
  return sumlx / suml2;
}

int nearest_table_index(const int8_t* table, int n, float v) {
  if (v <= table[0]) return 0;
  if (v >= table[n - 1]) return n - 1;
  int lo = 0;
  int hi = n - 1;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (v < table[mid]) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return v - table[lo] < table[hi] - v ? lo : hi;
}

}  // namespace frugal::quant
