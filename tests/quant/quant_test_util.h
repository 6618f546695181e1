// Shared helpers of the quant tests: random rows whose scale varies from block to block and
// that carry occasional outliers, and error measures.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "frugal/core/dtype.h"
#include "frugal/quant/type_traits.h"

namespace frugal::quant_test {

// Gaussian values, scale log-uniform in [1e-3, 1e2] per 32 elements, with about 1% outliers
// of 8-30x and an occasional all-positive (shifted) block to exercise the min/offset terms.
inline std::vector<float> random_row(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> uni(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t b = 0; b < n; b += 32) {
    const float scale = std::pow(10.f, -3.f + 5.f * uni(rng));
    const float shift = uni(rng) < 0.1f ? 3.f * scale : 0.f;
    for (int64_t i = b; i < std::min<int64_t>(n, b + 32); ++i) {
      float v = normal(rng) * scale + shift;
      if (uni(rng) < 0.01f) v *= 8.f + 22.f * uni(rng);
      x[static_cast<size_t>(i)] = v;
    }
  }
  return x;
}

inline int64_t block_size(DType t) { return dtype_layout(t).block_size; }

// Row length in elements fitting both types' blocks, `blocks` times the larger block size.
inline int64_t row_length(const TypeTraits& t, int64_t blocks) {
  const int64_t bs = std::max(block_size(t.type), block_size(t.vec_dot_type));
  return std::max<int64_t>(bs, 32) * blocks;
}

inline std::vector<uint8_t> quantize(DType type, FromFloatFn fn, const std::vector<float>& x) {
  std::vector<uint8_t> q(static_cast<size_t>(row_bytes(type, static_cast<int64_t>(x.size()))));
  fn(x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}

inline std::vector<float> dequantize(ToFloatFn fn, const std::vector<uint8_t>& q, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  fn(q.data(), y.data(), n);
  return y;
}

inline double dot_f64(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

inline double abs_dot_f64(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += std::fabs(static_cast<double>(a[i]) * b[i]);
  return s;
}

}  // namespace frugal::quant_test
