#include "frugal/attention/sparse/minference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "frugal/attention/sparse/estimate.h"

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
  const LastQueries lq = last_queries(in, o_.last_q);
  const int32_t L = lq.L;
  if (n_k <= 0 || L <= 0) return;
  const int32_t n_blocks = (n_k + kSparseBlock - 1) / kSparseBlock;

  // qt [dim][L], a [n_k][L], m, l [L], vert, slash [n_k].
  const size_t need = static_cast<size_t>(dim) * L + static_cast<size_t>(n_k) * L + 2 * static_cast<size_t>(L) +
                      2 * static_cast<size_t>(n_k);
  if (scratch.f.size() < need) scratch.f.resize(need);
  float* qt = scratch.f.data();
  float* a = qt + static_cast<size_t>(dim) * L;
  float* m = a + static_cast<size_t>(n_k) * L;
  float* l = m + L;
  float* vert = l + L;
  float* slash = vert + n_k;
  // flags: selected keys [n_k], offsets [n_k], then key blocks and offset blocks hit [n_blocks + 1] each.
  scratch.b.assign(2 * static_cast<size_t>(n_k) + 2 * (static_cast<size_t>(n_blocks) + 1), 0);
  uint8_t* vsel = scratch.b.data();
  uint8_t* ssel = vsel + n_k;
  uint8_t* vblock = ssel + n_k;
  uint8_t* dblock = vblock + n_blocks + 1;
  const float pinf = std::numeric_limits<float>::infinity();
  const int32_t nv = vertical_size(n_k);
  const int32_t ns = slash_size(n_k);

  for (int h = 0; h < in.n_rep; ++h) {
    estimate_attention(in, h, lq, qt, a, m, l);
    vertical_slash_sums(a, n_k, lq, 0, 1.f, vert, slash);
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
    mark_vertical_slash(vsel, ssel, n_k, vblock, dblock);
  }
  apply_vertical_slash(mask, n_blocks, vblock, dblock);
}

}  // namespace frugal::sparse
