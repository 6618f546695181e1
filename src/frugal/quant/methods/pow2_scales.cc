#include "frugal/quant/methods/pow2_scales.h"

#include <algorithm>
#include <cmath>

namespace frugal::quant::methods {

float nearest_pow2(float s) {
  int e = 0;
  const double m = std::frexp(static_cast<double>(s), &e);  // s = m * 2^e, m in [0.5, 1)
  // log2(s) = e + log2(m), log2(m) in [-1, 0): round up to e when log2(m) >= -1/2.
  return static_cast<float>(std::ldexp(1.0, m >= std::sqrt(0.5) ? e : e - 1));
}

bool is_pow2(float s) {
  int e = 0;
  return s > 0 && std::isfinite(s) && std::frexp(s, &e) == 0.5f;
}

w8a8::Int8Weights requantize_pow2(const w8a8::Int8Weights& w, Pow2Stats* stats) {
  w8a8::Int8Weights out = w;
  Pow2Stats st;
  st.rows = w.rows;
  for (int64_t r = 0; r < w.rows; ++r) {
    const float s = w.scale[static_cast<size_t>(r)];
    if (is_pow2(s)) continue;
    const float p = nearest_pow2(s);
    ++st.rows_rescaled;
    out.scale[static_cast<size_t>(r)] = p;
    const double ratio = static_cast<double>(s) / static_cast<double>(p);
    for (int64_t k = 0; k < w.cols; ++k) {
      const size_t i = static_cast<size_t>(r * w.cols + k);
      const double v = std::nearbyint(static_cast<double>(w.q[i]) * ratio);
      if (std::fabs(v) > w8a8::kQMax) ++st.clipped;
      out.q[i] = static_cast<int8_t>(std::clamp(v, -double{w8a8::kQMax}, double{w8a8::kQMax}));
    }
  }
  if (stats != nullptr) *stats = st;
  return out;
}

w8a8::Int8Weights rewrite_scales_only(const w8a8::Int8Weights& w) {
  w8a8::Int8Weights out = w;
  for (float& s : out.scale) s = nearest_pow2(s);
  return out;
}

}  // namespace frugal::quant::methods
