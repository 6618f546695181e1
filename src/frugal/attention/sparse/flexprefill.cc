#include "frugal/attention/sparse/flexprefill.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "frugal/attention/sparse/estimate.h"

namespace frugal::sparse {
namespace {

double elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
}

// In place: x[0, n) <- softmax(x[0, n)).
void softmax(float* x, int32_t n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int32_t j = 0; j < n; ++j) mx = std::max(mx, x[j]);
  double sum = 0;
  for (int32_t j = 0; j < n; ++j) {
    x[j] = std::exp(x[j] - mx);
    sum += x[j];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int32_t j = 0; j < n; ++j) x[j] *= inv;
}

float dot(const float* a, const float* b, int dim) {
  float s = 0.f;
  for (int e = 0; e < dim; ++e) s += a[e] * b[e];
  return s;
}

// Budget of one query head in blocks (the reference's min_budget / max_budget: tokens rounded up
// to whole blocks); 0: no bound.
int32_t budget_blocks(int32_t tokens) { return tokens > 0 ? (tokens + kSparseBlock - 1) / kSparseBlock : 0; }

// Keeps between lo and hi (0: no bound; hi wins where lo > hi, as the reference's clamp) of the
// flagged entries of flags[0, n): above hi the flagged ones of least mass are dropped, below lo
// the unflagged ones of most mass are added. Entry `first` ranks above every other (the
// reference's sink block for keys, the diagonal for offsets), ties go to the lower index.
void clamp_blocks(uint8_t* flags, const float* mass, int32_t n, int32_t first, int32_t lo, int32_t hi,
                  int32_t* order) {
  if (n <= 0) return;
  int32_t count = 0;
  for (int32_t i = 0; i < n; ++i) {
    order[i] = i;
    count += flags[i] ? 1 : 0;
  }
  if (lo > 0 && hi > 0) lo = std::min(lo, hi);
  if (!((hi > 0 && count > hi) || count < lo)) return;
  std::sort(order, order + n, [&](int32_t a, int32_t b) {
    if ((a == first) != (b == first)) return a == first;
    if (mass[a] != mass[b]) return mass[a] > mass[b];
    return a < b;
  });
  for (int32_t r = n - 1; hi > 0 && count > hi && r >= 0; --r) {
    if (flags[order[r]]) {
      flags[order[r]] = 0;
      --count;
    }
  }
  for (int32_t r = 0; count < lo && r < n; ++r) {
    if (!flags[order[r]]) {
      flags[order[r]] = 1;
      ++count;
    }
  }
}

}  // namespace

double sqrt_js_divergence(const float* p, const float* q, int32_t n) {
  double sp = 0, sq = 0;
  for (int32_t j = 0; j < n; ++j) {
    sp += p[j];
    sq += q[j];
  }
  if (sp <= 0 || sq <= 0) return std::sqrt(std::log(2.0));
  double js = 0;
  for (int32_t j = 0; j < n; ++j) {
    const double a = p[j] / sp, b = q[j] / sq, m = 0.5 * (a + b);
    if (a > 0) js += 0.5 * a * std::log(a / m);
    if (b > 0) js += 0.5 * b * std::log(b / m);
  }
  return std::sqrt(std::max(js, 0.0));
}

void FlexPrefill::select(const HeadInput& in, Scratch& scratch, const BlockMask& mask) const {
  const int32_t n_k = in.n_k;
  const int dim = in.head_dim;
  const LastQueries lq = last_queries(in, o_.last_q);
  const int32_t L = lq.L;
  if (n_k <= 0 || L <= 0) return;
  const int32_t n_blocks = (n_k + kSparseBlock - 1) / kSparseBlock;
  const int32_t n_map = mask.n_qb * mask.n_kb;

  // qt [dim][L], a [n_k][L], m, l [L], vert, slash [n_k], kbar [n_blocks][dim], qmean [dim],
  // pooled, vblock_mass [n_blocks], qbar [n_qb][dim], map [n_qb][n_kb], and for the budgets the
  // slash mass of each diagonal block (offsets [64 d, 64 d + 64)) [n_blocks + 1].
  const size_t need = static_cast<size_t>(dim) * L + static_cast<size_t>(n_k) * L + 2 * static_cast<size_t>(L) +
                      2 * static_cast<size_t>(n_k) + static_cast<size_t>(n_blocks) * dim + dim +
                      2 * static_cast<size_t>(n_blocks) + static_cast<size_t>(mask.n_qb) * dim +
                      static_cast<size_t>(n_map) + static_cast<size_t>(n_blocks) + 1;
  if (scratch.f.size() < need) scratch.f.resize(need);
  float* qt = scratch.f.data();
  float* a = qt + static_cast<size_t>(dim) * L;
  float* m = a + static_cast<size_t>(n_k) * L;
  float* l = m + L;
  float* vert = l + L;
  float* slash = vert + n_k;
  float* kbar = slash + n_k;
  float* qmean = kbar + static_cast<size_t>(n_blocks) * dim;
  float* pooled = qmean + dim;
  float* vmass = pooled + n_blocks;
  float* qbar = vmass + n_blocks;
  float* map = qbar + static_cast<size_t>(mask.n_qb) * dim;
  float* smass = map + n_map;
  // flags: selected keys [n_k], offsets [n_k], key blocks and offset blocks hit [n_blocks + 1] each
  // (the group's union), and with budgets one query head's key and offset blocks [n_blocks + 1] each.
  const int32_t lo = budget_blocks(o_.flex_min_budget), hi = budget_blocks(o_.flex_max_budget);
  const bool budgets = lo > 0 || hi > 0;
  scratch.b.assign(2 * static_cast<size_t>(n_k) + 4 * (static_cast<size_t>(n_blocks) + 1), 0);
  uint8_t* vsel = scratch.b.data();
  uint8_t* ssel = vsel + n_k;
  uint8_t* vblock = ssel + n_k;
  uint8_t* dblock = vblock + n_blocks + 1;
  uint8_t* head_vblock = dblock + n_blocks + 1;
  uint8_t* head_dblock = head_vblock + n_blocks + 1;
  const size_t n_int = static_cast<size_t>(std::max(n_k, n_map)) + static_cast<size_t>(n_blocks) + 1;
  if (scratch.i.size() < n_int) scratch.i.resize(n_int);
  int32_t* cand = scratch.i.data();
  int32_t* order = cand + std::max(n_k, n_map);
  // One head's key and diagonal blocks, bounded by the budgets, into the group's union.
  const auto add_head_blocks = [&](bool query_aware) {
    std::memset(head_vblock, 0, 2 * (static_cast<size_t>(n_blocks) + 1));
    if (!query_aware) mark_vertical_slash(vsel, ssel, n_k, head_vblock, head_dblock);
    std::fill(smass, smass + n_blocks + 1, 0.f);
    for (int32_t o = 0; o < n_k; ++o) smass[o / kSparseBlock] += slash[o];
    // Query-aware heads: only the minimum (their other blocks come from the map).
    clamp_blocks(head_vblock, vmass, n_blocks, 0, lo, query_aware ? 0 : hi, order);
    clamp_blocks(head_dblock, smass, n_blocks + 1, 0, lo, query_aware ? 0 : hi, order);
    for (int32_t b = 0; b <= n_blocks; ++b) {
      vblock[b] |= head_vblock[b];
      dblock[b] |= head_dblock[b];
    }
  };

  const auto t_keys = std::chrono::steady_clock::now();
  key_block_means(in, kbar);
  scratch.route_ms += elapsed_ms(t_keys);
  const float inv_l = 1.f / static_cast<float>(L);
  // Gamma 1 takes every entry (float sums need not reach the total exactly).
  const double gamma = o_.flex_gamma >= 1.f ? std::numeric_limits<double>::infinity() : o_.flex_gamma;
  for (int h = 0; h < in.n_rep; ++h) {
    estimate_attention(in, h, lq, qt, a, m, l);
    vertical_slash_sums(a, n_k, lq, 0, inv_l, vert, slash);

    // Routing: the pooled estimate against the estimate summed per key block.
    const auto t_route = std::chrono::steady_clock::now();
    for (int e = 0; e < dim; ++e) {
      const float* qe = qt + static_cast<size_t>(e) * L;  // already scaled
      float s = 0.f;
      for (int32_t i = 0; i < L; ++i) s += qe[i];
      qmean[e] = s * inv_l;
    }
    for (int32_t kb = 0; kb < n_blocks; ++kb) {
      pooled[kb] = dot(qmean, kbar + static_cast<size_t>(kb) * dim, dim);
      float s = 0.f;
      for (int32_t j = kb * kSparseBlock; j < std::min<int32_t>((kb + 1) * kSparseBlock, n_k); ++j) s += vert[j];
      vmass[kb] = s;
    }
    softmax(pooled, n_blocks);
    const bool query_aware = sqrt_js_divergence(pooled, vmass, n_blocks) < o_.flex_tau;
    scratch.route_ms += elapsed_ms(t_route);

    if (query_aware) {
      ++scratch.heads_query_aware;
      // Every query block's mean query against every key block's mean key, causal, softmax per
      // row; the largest entries over the chunk's rows until they cover gamma of the rows' mass.
      query_block_means(in, h, mask, qbar);
      int32_t n_cand = 0;
      for (int32_t r = 0; r < mask.n_qb; ++r) {
        const int32_t qb = mask.qb0 + r;
        float* row = map + static_cast<size_t>(r) * mask.n_kb;
        const int32_t n_row = std::min<int32_t>(qb + 1, mask.n_kb);
        for (int32_t kb = 0; kb < n_row; ++kb) row[kb] = dot(qbar + static_cast<size_t>(r) * dim, kbar + static_cast<size_t>(kb) * dim, dim);
        softmax(row, n_row);
        for (int32_t kb = n_row; kb < mask.n_kb; ++kb) row[kb] = 0.f;
        for (int32_t kb = 0; kb < n_row; ++kb) cand[n_cand++] = r * mask.n_kb + kb;
      }
      cover(map, cand, n_cand, gamma * mask.n_qb, mask.bits);
      if (lo > 0) add_head_blocks(true);
    } else {
      ++scratch.heads_vertical_slash;
      std::memset(vsel, 0, 2 * static_cast<size_t>(n_k));
      double vsum = 0, ssum = 0;
      for (int32_t j = 0; j < n_k; ++j) {
        vsum += vert[j];
        ssum += slash[j];
      }
      for (int32_t j = 0; j < n_k; ++j) cand[j] = j;
      cover(vert, cand, n_k, gamma * vsum, vsel);
      for (int32_t j = 0; j < n_k; ++j) cand[j] = j;
      cover(slash, cand, n_k, gamma * ssum, ssel);
      if (budgets) {
        add_head_blocks(false);
      } else {
        mark_vertical_slash(vsel, ssel, n_k, vblock, dblock);
      }
    }
  }
  apply_vertical_slash(mask, n_blocks, vblock, dblock);
}

}  // namespace frugal::sparse
