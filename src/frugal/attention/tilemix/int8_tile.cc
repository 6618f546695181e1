#include "frugal/attention/tilemix/int8_tile.h"

#include <cmath>
#include <limits>

namespace frugal::tilemix {

float quantize_row(const float* x, int n, int8_t* codes) {
  float m = 0.f;
  for (int e = 0; e < n; ++e) m = std::max(m, std::fabs(x[e]));
  if (!(m > 0.f)) {
    for (int e = 0; e < n; ++e) codes[e] = 0;
    return 0.f;
  }
  const float inv = static_cast<float>(kCodeMax) / m;
  for (int e = 0; e < n; ++e) codes[e] = static_cast<int8_t>(std::nearbyint(x[e] * inv));
  return m / static_cast<float>(kCodeMax);
}

void quantize_keys(const float* k, int32_t n_k, int head_dim, int8_t* codes, float* scales, int32_t* sums) {
  for (int32_t j = 0; j < n_k; ++j) {
    int8_t* c = codes + static_cast<int64_t>(j) * head_dim;
    scales[j] = quantize_row(k + static_cast<int64_t>(j) * head_dim, head_dim, c);
    int32_t sum = 0;
    for (int e = 0; e < head_dim; ++e) sum += c[e];
    sums[j] = sum;
  }
}

void scores_reference(const int8_t* q_codes, const float* q_scales, int rows, const KeyCodes& k, int32_t k0, int nk,
                      int dim, float* s) {
  for (int j = 0; j < nk; ++j) {
    const int8_t* kc = k.codes + static_cast<int64_t>(k0 + j) * dim;
    for (int r = 0; r < rows; ++r) {
      const int8_t* qc = q_codes + static_cast<int64_t>(r) * dim;
      int32_t dot = 0;
      for (int e = 0; e < dim; ++e) dot += static_cast<int32_t>(qc[e]) * kc[e];
      s[static_cast<int64_t>(j) * rows + r] = static_cast<float>(dot) * q_scales[r] * k.scales[k0 + j];
    }
  }
}

double quant_error_bound(const float* q, float q_scale, const float* k, float k_scale, int dim) {
  double q1 = 0, k1 = 0, dot = 0;
  for (int e = 0; e < dim; ++e) {
    q1 += std::fabs(static_cast<double>(q[e]));
    k1 += std::fabs(static_cast<double>(k[e]));
  }
  const double kh1 = k1 + dim * 0.5 * k_scale;
  // The integer dot times the scales: |score| <= |q̂|_1 max|k̂|, rounded twice, and the scales' own rounding (4 ulps of it).
  dot = (q1 + dim * 0.5 * q_scale) * kCodeMax * k_scale;
  const double eps = std::numeric_limits<float>::epsilon();
  return 0.5 * k_scale * q1 + 0.5 * q_scale * kh1 + 4 * eps * dot;
}

}  // namespace frugal::tilemix
