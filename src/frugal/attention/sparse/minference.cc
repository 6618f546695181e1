#include "frugal/attention/sparse/minference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace frugal::sparse {
namespace {

int32_t scaled(int32_t knob, int32_t paper, int32_t min, int32_t n_k) {
  const int64_t v = knob > 0 ? knob : std::max<int64_t>(min, static_cast<int64_t>(paper) * n_k / kPaperLength);
  return static_cast<int32_t>(std::min<int64_t>(v, n_k));
}

// Marks the indices of the `count` largest of score[0, n) with flag (count <= n).
void top_k(const float* score, int32_t n, int32_t count, std::vector<int32_t>& idx, uint8_t* flag) {
  idx.resize(static_cast<size_t>(n));
  for (int32_t j = 0; j < n; ++j) idx[j] = j;
  if (count < n) {
    // Ties broken by index, so the choice does not depend on the library's partition.
    std::nth_element(idx.begin(), idx.begin() + count, idx.end(), [&](int32_t a, int32_t b) {
      return score[a] > score[b] || (score[a] == score[b] && a < b);
    });
  }
  for (int32_t j = 0; j < count; ++j) flag[idx[j]] = 1;
}

}  // namespace

int32_t MInference::vertical_size(int32_t n_k) const { return scaled(o_.vertical_size, kPaperVertical, kMinVertical, n_k); }
int32_t MInference::slash_size(int32_t n_k) const { return scaled(o_.slash_size, kPaperSlash, kMinSlash, n_k); }

void MInference::select(const HeadInput& in, Scratch& scratch, const BlockMask& mask) const {
  const int32_t n_k = in.n_k;
  const int dim = in.head_dim;
  const int32_t L = std::min<int32_t>(std::max<int32_t>(o_.last_q, 1), in.n_q);
  if (n_k <= 0 || L <= 0) return;
  const int32_t row0 = in.n_q - L;             // first estimated query of the chunk
  const int32_t pos0 = in.q_pos0 + row0;       // its position
  const int32_t n_blocks = (n_k + kSparseBlock - 1) / kSparseBlock;

  // qt [dim][L], s [n_k][L], m, l [L], vert, slash [n_k].
  const size_t need = static_cast<size_t>(dim) * L + static_cast<size_t>(n_k) * L + 2 * static_cast<size_t>(L) +
                      2 * static_cast<size_t>(n_k);
  if (scratch.f.size() < need) scratch.f.resize(need);
  float* qt = scratch.f.data();
  float* s = qt + static_cast<size_t>(dim) * L;
  float* m = s + static_cast<size_t>(n_k) * L;
  float* l = m + L;
  float* vert = l + L;
  float* slash = vert + n_k;
  // flags: selected keys [n_k], offsets [n_k], then key blocks and offset blocks hit [n_blocks + 1] each.
  scratch.b.assign(2 * static_cast<size_t>(n_k) + 2 * (static_cast<size_t>(n_blocks) + 1), 0);
  uint8_t* vsel = scratch.b.data();
  uint8_t* ssel = vsel + n_k;
  uint8_t* vblock = ssel + n_k;
  uint8_t* dblock = vblock + n_blocks + 1;
  const float ninf = -std::numeric_limits<float>::infinity();
  const float pinf = std::numeric_limits<float>::infinity();
  const int32_t nv = vertical_size(n_k);
  const int32_t ns = slash_size(n_k);

  for (int h = 0; h < in.n_rep; ++h) {
    for (int32_t i = 0; i < L; ++i) {
      const float* q = in.q + static_cast<int64_t>(row0 + i) * in.token_stride + static_cast<int64_t>(h) * dim;
      for (int e = 0; e < dim; ++e) qt[static_cast<size_t>(e) * L + i] = q[e] * in.scale;
    }
    // Scores, a key at a time over the L queries (contiguous, so the loop vectorizes).
    for (int32_t j = 0; j < n_k; ++j) {
      float* sj = s + static_cast<size_t>(j) * L;
      std::fill(sj, sj + L, 0.f);
      const float* k = in.k + static_cast<size_t>(j) * dim;
      for (int e = 0; e < dim; ++e) {
        const float ke = k[e];
        const float* qe = qt + static_cast<size_t>(e) * L;
        for (int32_t i = 0; i < L; ++i) sj[i] += ke * qe[i];
      }
      // Query i (position pos0 + i) sees keys j <= pos0 + i.
      for (int32_t i = 0; i < std::min<int32_t>(L, j - pos0); ++i) sj[i] = ninf;
    }
    std::fill(m, m + L, ninf);
    for (int32_t j = 0; j < n_k; ++j) {
      const float* sj = s + static_cast<size_t>(j) * L;
      for (int32_t i = 0; i < L; ++i) m[i] = std::max(m[i], sj[i]);
    }
    std::fill(l, l + L, 0.f);
    for (int32_t j = 0; j < n_k; ++j) {
      float* sj = s + static_cast<size_t>(j) * L;
      for (int32_t i = 0; i < L; ++i) {
        sj[i] = std::exp(sj[i] - m[i]);
        l[i] += sj[i];
      }
    }
    for (int32_t i = 0; i < L; ++i) l[i] = 1.f / l[i];
    std::fill(vert, vert + n_k, 0.f);
    std::fill(slash, slash + n_k, 0.f);
    for (int32_t j = 0; j < n_k; ++j) {
      const float* sj = s + static_cast<size_t>(j) * L;
      float col = 0.f;
      for (int32_t i = std::max<int32_t>(0, j - pos0); i < L; ++i) {
        const float a = sj[i] * l[i];
        col += a;
        slash[pos0 + i - j] += a;
      }
      vert[j] = col;
    }
    // The nearest diagonals are always kept. The paper also forces the first 30 keys (sinks);
    // here the whole first block is kept anyway, so verticals are chosen among the later keys and
    // none of the budget goes to the sink block.
    std::fill(slash, slash + std::min(kForcedLocal, n_k), pinf);
    std::memset(vsel, 0, static_cast<size_t>(n_k));
    std::memset(ssel, 0, static_cast<size_t>(n_k));
    if (n_k > kSparseBlock) {
      top_k(vert + kSparseBlock, n_k - kSparseBlock, std::min(nv, n_k - kSparseBlock), scratch.i, vsel + kSparseBlock);
    }
    top_k(slash, n_k, ns, scratch.i, ssel);
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
  for (int32_t r = 0; r < mask.n_qb; ++r) {
    const int32_t qb = mask.qb0 + r;
    uint8_t* row = mask.row(r);
    for (int32_t kb = 0; kb <= qb && kb < mask.n_kb; ++kb) {
      if ((kb < n_blocks && vblock[kb]) || dblock[qb - kb]) row[kb] = 1;
    }
  }
}

}  // namespace frugal::sparse
