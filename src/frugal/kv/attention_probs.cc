// Attention weights of an eviction round (attention_probs.h has the why).
#include "frugal/kv/attention_probs.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

namespace frugal {
namespace {

bool visible(int32_t key_pos, int32_t query_pos, int32_t window) {
  return key_pos <= query_pos && (window <= 0 || key_pos > query_pos - window);
}

// Row j of probs holds its raw scores at the visible keys; the softmax in place, the invisible
// entries zero (the reference's arithmetic and order).
void softmax_rows(const ProbsQueries& q, const int32_t* kpos, int32_t n, int32_t window, float* probs) {
  for (int j = 0; j < q.m; ++j) {
    float* row = probs + static_cast<size_t>(j) * n;
    const int32_t qp = q.pos[j];
    float mx = -std::numeric_limits<float>::infinity();
    for (int32_t i = 0; i < n; ++i) {
      if (visible(kpos[i], qp, window)) mx = std::max(mx, row[i]);
    }
    if (mx == -std::numeric_limits<float>::infinity()) {
      std::fill(row, row + n, 0.f);
      continue;
    }
    double z = 0;
    for (int32_t i = 0; i < n; ++i) {
      if (!visible(kpos[i], qp, window)) {
        row[i] = 0.f;
        continue;
      }
      row[i] = std::exp(row[i] - mx);
      z += row[i];
    }
    const float inv = static_cast<float>(1.0 / z);
    for (int32_t i = 0; i < n; ++i) row[i] *= inv;
  }
}

}  // namespace

void attention_probs_reference(const ProbsQueries& q, const float* keys, const int32_t* kpos, int32_t n, int head_dim,
                               float scale, int32_t window, float* probs) {
  for (int j = 0; j < q.m; ++j) {
    float* row = probs + static_cast<size_t>(j) * n;
    for (int32_t i = 0; i < n; ++i) {
      if (!visible(kpos[i], q.pos[j], window)) continue;
      const float* k = keys + static_cast<size_t>(i) * head_dim;
      float s = 0.f;
      for (int e = 0; e < head_dim; ++e) s += q.rows[j][e] * k[e];
      row[i] = s * scale;
    }
  }
  softmax_rows(q, kpos, n, window, probs);
}

void attention_probs(const ProbsQueries& q, const float* keys, const int32_t* kpos, int32_t n, int head_dim,
                     float scale, int32_t window, float* probs, std::vector<float>& scratch) {
  // A tile of kQ queries x kK keys: 32 sums that stay in registers while the loop over dimensions
  // runs (each dimension: kQ query values, kK key values, kQ * kK multiply-adds).
  constexpr int kQ = 8, kK = 4;
  const int m = q.m;
  if (m <= 0 || n <= 0) return;
  const int mp = (m + kQ - 1) / kQ * kQ;  // queries padded with zero rows, computed and not stored
  scratch.assign(static_cast<size_t>(head_dim) * mp, 0.f);
  float* qt = scratch.data();  // [head_dim][mp]
  for (int j = 0; j < m; ++j) {
    for (int e = 0; e < head_dim; ++e) qt[static_cast<size_t>(e) * mp + j] = q.rows[j][e];
  }
  for (int j0 = 0; j0 < mp; j0 += kQ) {
    const int jn = std::min(kQ, m - j0);
    for (int32_t i0 = 0; i0 < n; i0 += kK) {
      const int nb = static_cast<int>(std::min<int32_t>(kK, n - i0));
      const float* k0 = keys + static_cast<size_t>(i0) * head_dim;
      float acc[kK][kQ] = {};
      for (int e = 0; e < head_dim; ++e) {
        const float* qe = qt + static_cast<size_t>(e) * mp + j0;
        // Keys past the end count as zeros; their sums are not stored.
        float c[kK];
        for (int b = 0; b < kK; ++b) c[b] = b < nb ? k0[static_cast<size_t>(b) * head_dim + e] : 0.f;
        for (int b = 0; b < kK; ++b) {
          for (int t = 0; t < kQ; ++t) acc[b][t] += qe[t] * c[b];
        }
      }
      for (int t = 0; t < jn; ++t) {
        float* row = probs + static_cast<size_t>(j0 + t) * n + i0;
        for (int b = 0; b < nb; ++b) row[b] = acc[b][t] * scale;
      }
    }
  }
  softmax_rows(q, kpos, n, window, probs);
}

}  // namespace frugal
