#include "frugal/attention/sparse/estimate.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace frugal::sparse {

LastQueries last_queries(const HeadInput& in, int32_t last_q) {
  LastQueries lq;
  lq.L = std::min<int32_t>(std::max<int32_t>(last_q, 1), in.n_q);
  lq.row0 = in.n_q - lq.L;
  lq.pos0 = in.q_pos0 + lq.row0;
  return lq;
}

void estimate_attention(const HeadInput& in, int h, const LastQueries& lq, float* qt, float* a, float* m, float* l) {
  const int32_t L = lq.L;
  const int32_t n_k = in.n_k;
  const int dim = in.head_dim;
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int32_t i = 0; i < L; ++i) {
    const float* q = in.q + static_cast<int64_t>(lq.row0 + i) * in.token_stride + static_cast<int64_t>(h) * dim;
    for (int e = 0; e < dim; ++e) qt[static_cast<size_t>(e) * L + i] = q[e] * in.scale;
  }
  // Scores, a key at a time over the L queries (contiguous, so the loop vectorizes).
  for (int32_t j = 0; j < n_k; ++j) {
    float* sj = a + static_cast<size_t>(j) * L;
    std::fill(sj, sj + L, 0.f);
    const float* k = in.k + static_cast<size_t>(j) * dim;
    for (int e = 0; e < dim; ++e) {
      const float ke = k[e];
      const float* qe = qt + static_cast<size_t>(e) * L;
      for (int32_t i = 0; i < L; ++i) sj[i] += ke * qe[i];
    }
    // Query i (position pos0 + i) sees keys j <= pos0 + i.
    for (int32_t i = 0; i < std::min<int32_t>(L, j - lq.pos0); ++i) sj[i] = ninf;
  }
  std::fill(m, m + L, ninf);
  for (int32_t j = 0; j < n_k; ++j) {
    const float* sj = a + static_cast<size_t>(j) * L;
    for (int32_t i = 0; i < L; ++i) m[i] = std::max(m[i], sj[i]);
  }
  std::fill(l, l + L, 0.f);
  for (int32_t j = 0; j < n_k; ++j) {
    float* sj = a + static_cast<size_t>(j) * L;
    for (int32_t i = 0; i < L; ++i) {
      sj[i] = std::exp(sj[i] - m[i]);
      l[i] += sj[i];
    }
  }
  for (int32_t i = 0; i < L; ++i) l[i] = 1.f / l[i];
  for (int32_t j = 0; j < n_k; ++j) {
    float* sj = a + static_cast<size_t>(j) * L;
    for (int32_t i = 0; i < L; ++i) sj[i] *= l[i];
  }
}

void vertical_slash_sums(const float* a, int32_t n_k, const LastQueries& lq, int32_t first_key, float scale,
                         float* vert, float* slash) {
  const int32_t L = lq.L;
  std::fill(vert, vert + n_k, 0.f);
  std::fill(slash, slash + n_k, 0.f);
  for (int32_t j = std::max<int32_t>(first_key, 0); j < n_k; ++j) {
    const float* aj = a + static_cast<size_t>(j) * L;
    float col = 0.f;
    for (int32_t i = std::max<int32_t>(0, j - lq.pos0); i < L; ++i) {
      col += aj[i];
      slash[lq.pos0 + i - j] += aj[i];
    }
    vert[j] = col;
  }
  if (scale != 1.f) {
    for (int32_t j = 0; j < n_k; ++j) {
      vert[j] *= scale;
      slash[j] *= scale;
    }
  }
}

int32_t cover(const float* v, int32_t* cand, int32_t n, double target, uint8_t* flag) {
  const auto before = [v](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); };
  // cand[0, lo) are taken; the answer's remaining entries are the largest of cand[lo, hi).
  int32_t lo = 0, hi = n;
  double need = target;
  while (lo < hi && need > 0) {
    if (hi - lo == 1) {
      lo = hi;
      break;
    }
    const int32_t mid = lo + (hi - lo - 1) / 2;  // [lo, mid]: the larger part, smaller than the range
    std::nth_element(cand + lo, cand + mid, cand + hi, before);
    double s = 0;
    for (int32_t k = lo; k <= mid; ++k) s += v[cand[k]];
    if (s >= need) {
      hi = mid + 1;
    } else {
      need -= s;
      lo = mid + 1;
    }
  }
  for (int32_t k = 0; k < lo; ++k) flag[cand[k]] = 1;
  return lo;
}

void mark_vertical_slash(const uint8_t* vsel, const uint8_t* ssel, int32_t n_k, uint8_t* vblock, uint8_t* dblock) {
  for (int32_t j = 0; j < n_k; ++j) {
    if (vsel[j]) vblock[j / kSparseBlock] = 1;
    // Offset o crosses, in query block qb, keys [64qb - o, 64qb + 63 - o]: key block qb - o/64,
    // and qb - o/64 - 1 too unless o is a multiple of 64.
    if (ssel[j]) {
      dblock[j / kSparseBlock] = 1;
      if (j % kSparseBlock != 0) dblock[j / kSparseBlock + 1] = 1;
    }
  }
}

void apply_vertical_slash(const BlockMask& mask, int32_t n_blocks, const uint8_t* vblock, const uint8_t* dblock) {
  for (int32_t r = 0; r < mask.n_qb; ++r) {
    const int32_t qb = mask.qb0 + r;
    uint8_t* row = mask.row(r);
    for (int32_t kb = 0; kb <= qb && kb < mask.n_kb; ++kb) {
      if ((kb < n_blocks && vblock[kb]) || dblock[qb - kb]) row[kb] = 1;
    }
  }
}

void key_block_means(const HeadInput& in, float* kbar) {
  const int dim = in.head_dim;
  const int32_t n_blocks = (in.n_k + kSparseBlock - 1) / kSparseBlock;
  for (int32_t kb = 0; kb < n_blocks; ++kb) {
    float* out = kbar + static_cast<size_t>(kb) * dim;
    std::fill(out, out + dim, 0.f);
    const int32_t j1 = std::min<int32_t>((kb + 1) * kSparseBlock, in.n_k);
    for (int32_t j = kb * kSparseBlock; j < j1; ++j) {
      const float* k = in.k + static_cast<size_t>(j) * dim;
      for (int e = 0; e < dim; ++e) out[e] += k[e];
    }
    const float inv = 1.f / static_cast<float>(j1 - kb * kSparseBlock);
    for (int e = 0; e < dim; ++e) out[e] *= inv;
  }
}

void query_block_means(const HeadInput& in, int h, const BlockMask& mask, float* qbar) {
  const int dim = in.head_dim;
  for (int32_t r = 0; r < mask.n_qb; ++r) {
    const int32_t qb = mask.qb0 + r;
    float* out = qbar + static_cast<size_t>(r) * dim;
    std::fill(out, out + dim, 0.f);
    const int32_t p0 = std::max<int32_t>(qb * kSparseBlock, in.q_pos0);
    const int32_t p1 = std::min<int32_t>((qb + 1) * kSparseBlock, in.q_pos0 + in.n_q);
    for (int32_t p = p0; p < p1; ++p) {
      const float* q = in.q + static_cast<int64_t>(p - in.q_pos0) * in.token_stride + static_cast<int64_t>(h) * dim;
      for (int e = 0; e < dim; ++e) out[e] += q[e];
    }
    const float f = p1 > p0 ? in.scale / static_cast<float>(p1 - p0) : 0.f;
    for (int e = 0; e < dim; ++e) out[e] *= f;
  }
}

}  // namespace frugal::sparse
