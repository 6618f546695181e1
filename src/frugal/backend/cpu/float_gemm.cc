// Highway kernels of the F32 batch matrix product; compiled once per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "frugal/backend/cpu/float_gemm.cc"
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS HWY_SSSE3
#endif
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <algorithm>

#include "frugal/backend/cpu/float_gemm.h"

HWY_BEFORE_NAMESPACE();
namespace frugal::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;

// Register tile: kMR weight rows x kNV vectors of activations. Up to AVX2 (16 vector registers):
// 6 x 2 (12 accumulators + 2 B vectors + 1 broadcast). AVX-512 (32 registers): 6 x 4; 12 x 2
// measured ~10% slower (twelve weight-row streams per k instead of six).
constexpr int kMR = 6;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr int kNV = 4;
#else
constexpr int kNV = 2;
#endif

int PanelCols() { return static_cast<int>(kNV * hn::Lanes(DF())); }

void PackB(const float* x, int64_t k, int64_t c0, int64_t nc, float* panel) {
  const int nr = PanelCols();
  for (int64_t kk0 = 0; kk0 < k; kk0 += 64) {
    // 64 columns of k at a time: the panel part written stays in L1.
    const int64_t kk1 = std::min(k, kk0 + 64);
    for (int j = 0; j < nr; ++j) {
      if (j < nc) {
        const float* src = x + (c0 + j) * k;
        for (int64_t kk = kk0; kk < kk1; ++kk) panel[kk * nr + j] = src[kk];
      } else {
        for (int64_t kk = kk0; kk < kk1; ++kk) panel[kk * nr + j] = 0.f;
      }
    }
  }
}

// tile[i][0 .. NV * N) = sum_k a[i][k] * b[k][0 .. NV * N) for i < MR; tile rows are kNV * N apart.
template <int MR, int NV>
HWY_NOINLINE void Kernel(const float* HWY_RESTRICT a, int64_t lda, const float* HWY_RESTRICT b, int64_t k,
                         float* HWY_RESTRICT tile) {
  const DF d;
  const size_t N = hn::Lanes(d);
  hn::Vec<DF> acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = hn::Zero(d);
  }
  for (int64_t kk = 0; kk < k; ++kk) {
    hn::Vec<DF> bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = hn::LoadU(d, b + v * N);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const auto ai = hn::Set(d, a[i * lda + kk]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = hn::MulAdd(ai, bv[v], acc[i][v]);
    }
    b += kNV * N;
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) hn::StoreU(acc[i][v], d, tile + (i * kNV + v) * N);
  }
}

// Runs the kernel for `mr` (kMR or fewer) rows and NV vectors; tile is [mr][kNV * N].
template <int NV>
HWY_INLINE void RunTile(const float* a, int64_t lda, const float* b, int64_t k, int64_t mr, float* tile) {
  if (mr == kMR) {
    Kernel<kMR, NV>(a, lda, b, k, tile);
  } else {
    const size_t row = kNV * hn::Lanes(DF());
    for (int64_t i = 0; i < mr; ++i) Kernel<1, NV>(a + i * lda, lda, b, k, tile + i * row);
  }
}

// Only as many vectors of activations as the panel has valid columns.
HWY_INLINE void RunTileCols(const float* a, int64_t lda, const float* b, int64_t k, int64_t mr, int64_t nc,
                            float* tile) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
  const int64_t nv = (nc + N - 1) / N;
  if (nv >= kNV) {
    RunTile<kNV>(a, lda, b, k, mr, tile);
  } else if (nv == 1) {
    RunTile<1>(a, lda, b, k, mr, tile);
  } else if (nv == 2 || kNV <= 2) {
    RunTile<(kNV >= 2 ? 2 : 1)>(a, lda, b, k, mr, tile);
  } else {
    RunTile<(kNV >= 3 ? 3 : 1)>(a, lda, b, k, mr, tile);
  }
}

void Block(const FloatGemmBlock& g) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t nr = kNV * N;
  HWY_ALIGN float tile[kMR * kNV * HWY_LANES(float)];
  for (int64_t c0 = 0; c0 < g.n; c0 += nr) {
    const int64_t nc = std::min(nr, g.n - c0);
    const float* bp = g.b + (c0 / nr) * g.k * nr;
    for (int64_t r = g.r0; r < g.r1; r += kMR) {
      const int64_t mr = std::min<int64_t>(kMR, g.r1 - r);
      const float* ap = g.a + (r - g.r0) * g.lda;
      RunTileCols(ap, g.lda, bp, g.k, mr, nc, tile);
      // The tile is [row][activation]; y is [activation][row].
      for (int64_t i = 0; i < mr; ++i) {
        const float bias = g.bias != nullptr ? g.bias[r + i] : 0.f;
        const float* t = tile + i * nr;
        float* yr = g.y + r + i;
        for (int64_t j = 0; j < nc; ++j) yr[(c0 + j) * g.ldy] = t[j] + bias;
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace frugal::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace frugal::cpu {

HWY_EXPORT(PanelCols);
HWY_EXPORT(PackB);
HWY_EXPORT(Block);

int float_gemm_panel_cols() { return HWY_DYNAMIC_DISPATCH(PanelCols)(); }
void float_gemm_pack_b(const float* x, int64_t k, int64_t c0, int64_t nc, float* panel) {
  HWY_DYNAMIC_DISPATCH(PackB)(x, k, c0, nc, panel);
}
void float_gemm_block(const FloatGemmBlock& blk) { HWY_DYNAMIC_DISPATCH(Block)(blk); }

}  // namespace frugal::cpu
#endif  // HWY_ONCE
