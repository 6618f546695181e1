#include "frugal/kv/round_stats.h"

#include <cmath>

namespace frugal {

void reduce_attention(const float* probs, int n_rep, int nq, int32_t n, const int32_t* query_pos,
                      int32_t fresh_after, float* attention, float* last, float* fresh) {
  for (int32_t i = 0; i < n; ++i) attention[i] = last[i] = fresh[i] = 0.f;
  for (int r = 0; r < n_rep; ++r) {
    for (int j = 0; j < nq; ++j) {
      const float* p = probs + (static_cast<size_t>(r) * nq + j) * n;
      for (int32_t i = 0; i < n; ++i) attention[i] += p[i];
      if (j == nq - 1) {
        for (int32_t i = 0; i < n; ++i) last[i] += p[i];
      }
      if (query_pos[j] > fresh_after) {
        for (int32_t i = 0; i < n; ++i) fresh[i] += p[i];
      }
    }
  }
}

void key_similarity(const float* keys, int32_t n, int head_dim, float* out) {
  if (n < 2) {
    for (int32_t i = 0; i < n; ++i) out[i] = 0.f;
    return;
  }
  std::vector<double> inv(static_cast<size_t>(n)), sum(static_cast<size_t>(head_dim), 0.0);
  for (int32_t i = 0; i < n; ++i) {
    const float* k = keys + static_cast<size_t>(i) * head_dim;
    double ss = 0;
    for (int e = 0; e < head_dim; ++e) ss += static_cast<double>(k[e]) * k[e];
    inv[static_cast<size_t>(i)] = ss > 0 ? 1.0 / std::sqrt(ss) : 0.0;
    for (int e = 0; e < head_dim; ++e) sum[static_cast<size_t>(e)] += k[e] * inv[static_cast<size_t>(i)];
  }
  for (int32_t i = 0; i < n; ++i) {
    const float* k = keys + static_cast<size_t>(i) * head_dim;
    const double u = inv[static_cast<size_t>(i)];
    double dot = 0, self = 0;
    for (int e = 0; e < head_dim; ++e) {
      const double x = k[e] * u;
      dot += x * sum[static_cast<size_t>(e)];
      self += x * x;
    }
    out[i] = static_cast<float>((dot - self) / (n - 1));
  }
}

}  // namespace frugal
