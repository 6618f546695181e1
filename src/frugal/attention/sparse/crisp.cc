#include "frugal/attention/sparse/crisp.h"

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

// Flags the entries of x[0, n) at or above `floor` and at or above c x the mean of their block of
// 64 entries, from `first` on.
void flag_peaks(const float* x, int32_t first, int32_t n, float floor, float c, uint8_t* peak) {
  std::memset(peak, 0, static_cast<size_t>(n));
  for (int32_t b0 = first; b0 < n; b0 += kSparseBlock) {
    const int32_t b1 = std::min<int32_t>(b0 + kSparseBlock, n);
    double s = 0;
    for (int32_t j = b0; j < b1; ++j) s += x[j];
    const float local = static_cast<float>(c * s / (b1 - b0));
    for (int32_t j = b0; j < b1; ++j) peak[j] = x[j] >= floor && x[j] >= local && x[j] > 0.f;
  }
}

// c x the uniform share of `mass` over n indices; none when n <= c (no index could reach it).
float noise_floor(float c, double mass, int32_t n) {
  return n > c ? static_cast<float>(c * mass / n) : 0.f;
}

}  // namespace

void Crisp::select(const HeadInput& in, Scratch& scratch, const BlockMask& mask) const {
  const int32_t n_k = in.n_k;
  const int dim = in.head_dim;
  const LastQueries lq = last_queries(in, o_.last_q);
  const int32_t L = lq.L;
  // The sink block holds every key: nothing beyond what select_blocks keeps.
  if (n_k <= kSparseBlock || L <= 0) return;
  const int32_t n_blocks = (n_k + kSparseBlock - 1) / kSparseBlock;
  const int32_t n_rest = n_k - kSparseBlock;  // keys (and offsets) outside the sink block
  const float c = o_.crisp_floor;

  // qt [dim][L], a [n_k][L], m, l [L], vert, slash [n_k] (adjacent: ranked together), snap
  // [2 n_k], kbar [n_blocks][dim], qbar [n_qb][dim], row [n_kb].
  const size_t need = static_cast<size_t>(dim) * L + static_cast<size_t>(n_k) * L + 2 * static_cast<size_t>(L) +
                      4 * static_cast<size_t>(n_k) + static_cast<size_t>(n_blocks) * dim +
                      static_cast<size_t>(mask.n_qb) * dim + static_cast<size_t>(mask.n_kb);
  if (scratch.f.size() < need) scratch.f.resize(need);
  float* qt = scratch.f.data();
  float* a = qt + static_cast<size_t>(dim) * L;
  float* m = a + static_cast<size_t>(n_k) * L;
  float* l = m + L;
  float* vert = l + L;
  float* slash = vert + n_k;
  float* snap = slash + n_k;
  float* kbar = snap + 2 * static_cast<size_t>(n_k);
  float* qbar = kbar + static_cast<size_t>(n_blocks) * dim;
  float* rowp = qbar + static_cast<size_t>(mask.n_qb) * dim;
  // flags: selected keys, offsets [n_k] each (adjacent), peaked keys, offsets [n_k] each, key blocks
  // and offset blocks hit [n_blocks + 1] each.
  scratch.b.assign(4 * static_cast<size_t>(n_k) + 2 * (static_cast<size_t>(n_blocks) + 1), 0);
  uint8_t* vsel = scratch.b.data();
  uint8_t* ssel = vsel + n_k;
  uint8_t* vpeak = ssel + n_k;
  uint8_t* speak = vpeak + n_k;
  uint8_t* vblock = speak + n_k;
  uint8_t* dblock = vblock + n_blocks + 1;
  if (scratch.i.size() < 2 * static_cast<size_t>(n_k)) scratch.i.resize(2 * static_cast<size_t>(n_k));
  int32_t* cand = scratch.i.data();
  int32_t* heap = cand;

  bool have_kbar = false;
  const float inv_l = 1.f / static_cast<float>(L);
  for (int h = 0; h < in.n_rep; ++h) {
    estimate_attention(in, h, lq, qt, a, m, l);
    // Means over the queries of the non-sink keys only: the sink's share is set aside.
    vertical_slash_sums(a, n_k, lq, kSparseBlock, inv_l, vert, slash);
    double mass = 0;
    for (int32_t j = kSparseBlock; j < n_k; ++j) mass += vert[j];
    if (!(mass > 0)) continue;  // all of it on the sink (or underflowed)
    const float floor = noise_floor(c, mass, n_rest);

    // C_struct: the non-sink mass of the peaked keys plus that of the peaked offsets (an entry on
    // both counts twice; capped at M), in O(n_k).
    const auto t_route = std::chrono::steady_clock::now();
    flag_peaks(vert, kSparseBlock, n_k, floor, c, vpeak);
    flag_peaks(slash, 0, n_k, floor, c, speak);
    double structural = 0;
    for (int32_t j = 0; j < n_k; ++j) {
      if (vpeak[j]) structural += vert[j];
      if (speak[j]) structural += slash[j];
    }
    structural = std::min(structural, mass);
    const bool vertical_slash = structural / mass >= o_.crisp_route;
    scratch.route_ms += elapsed_ms(t_route);

    if (vertical_slash) {
      ++scratch.heads_vertical_slash;
      // Greedy coverage of the estimate's non-sink entries by keys (index j) and offsets (index
      // n_k + o): res[x] is the mass of x's entries that no chosen index covers yet (vert and slash
      // are adjacent, so res = vert); the index of most such mass is taken next, until it falls
      // below the floor or gamma x M is covered. A lazy heap: masses only shrink, so a popped
      // index whose snapshot is stale is pushed back with its current mass.
      float* res = vert;
      std::memcpy(snap, res, 2 * static_cast<size_t>(n_k) * sizeof(float));
      const auto less = [snap](int32_t x, int32_t y) { return snap[x] < snap[y] || (snap[x] == snap[y] && x > y); };
      int32_t n_heap = 0;
      for (int32_t x = kSparseBlock; x < 2 * n_k; ++x) {
        if (res[x] >= floor && res[x] > 0.f) heap[n_heap++] = x;
      }
      std::make_heap(heap, heap + n_heap, less);
      std::memset(vsel, 0, 2 * static_cast<size_t>(n_k));
      const double goal = static_cast<double>(o_.crisp_gamma) * mass;
      double covered = 0;
      while (n_heap > 0 && covered < goal) {
        std::pop_heap(heap, heap + n_heap, less);
        const int32_t x = heap[n_heap - 1];
        if (snap[x] != res[x]) {
          snap[x] = res[x];
          if (res[x] >= floor && res[x] > 0.f) {
            std::push_heap(heap, heap + n_heap, less);
          } else {
            --n_heap;
          }
          continue;
        }
        --n_heap;
        if (res[x] < floor || !(res[x] > 0.f)) break;  // the largest left is background
        covered += res[x];
        vsel[x] = 1;
        if (x < n_k) {  // key j: its entries leave the offsets that do not cover them yet
          const float* aj = a + static_cast<size_t>(x) * L;
          for (int32_t i = std::max<int32_t>(0, x - lq.pos0); i < L; ++i) {
            const int32_t o = lq.pos0 + i - x;
            if (!ssel[o]) slash[o] -= aj[i] * inv_l;
          }
        } else {  // offset o: its entries leave the keys that do not cover them yet
          const int32_t o = x - n_k;
          for (int32_t i = 0; i < L; ++i) {
            const int32_t j = lq.pos0 + i - o;
            if (j >= kSparseBlock && !vsel[j]) vert[j] -= a[static_cast<size_t>(j) * L + i] * inv_l;
          }
        }
      }
      mark_vertical_slash(vsel, ssel, n_k, vblock, dblock);
    } else {
      ++scratch.heads_query_aware;
      if (!have_kbar) {
        key_block_means(in, kbar);
        have_kbar = true;
      }
      query_block_means(in, h, mask, qbar);
      for (int32_t r = 0; r < mask.n_qb; ++r) {
        const int32_t qb = mask.qb0 + r;
        const int32_t n_row = std::min<int32_t>(qb + 1, mask.n_kb);
        if (n_row <= 1) continue;
        const float* qr = qbar + static_cast<size_t>(r) * dim;
        float mx = -std::numeric_limits<float>::infinity();
        for (int32_t kb = 0; kb < n_row; ++kb) {
          const float* kr = kbar + static_cast<size_t>(kb) * dim;
          float s = 0.f;
          for (int e = 0; e < dim; ++e) s += qr[e] * kr[e];
          rowp[kb] = s;
          mx = std::max(mx, s);
        }
        double total = 0, rest = 0;
        for (int32_t kb = 0; kb < n_row; ++kb) {
          rowp[kb] = std::exp(rowp[kb] - mx);
          total += rowp[kb];
          if (kb > 0) rest += rowp[kb];
        }
        // Shares of the row's mass; the sink's is set aside.
        const double row_mass = rest / total;
        const float row_floor = noise_floor(c, row_mass, n_row - 1);
        int32_t n_cand = 0;
        for (int32_t kb = 1; kb < n_row; ++kb) {
          rowp[kb] = static_cast<float>(rowp[kb] / total);
          if (rowp[kb] >= row_floor && rowp[kb] > 0.f) cand[n_cand++] = kb;
        }
        cover(rowp, cand, n_cand, o_.crisp_gamma * row_mass, mask.row(r));
      }
    }
  }
  apply_vertical_slash(mask, n_blocks, vblock, dblock);
}

}  // namespace frugal::sparse
