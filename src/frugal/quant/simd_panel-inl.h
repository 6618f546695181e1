// The "panel" gemm shared by the quantized formats (AVX2 targets only; Highway re-inclusion
// idiom). Eight weight rows are decoded once per call into a small packed buffer in which
// vector lane r belongs to weight row r: register k of a packed 32-element unit holds bytes
// 4k..4k+3 of each row. Each activation row then streams past the panel: 4 activation bytes
// are broadcast to all lanes, one maddubs against the packed register yields 8 rows x 4
// multiply-adds, int16 partial sums accumulate over several of those, and the per-row scales
// apply lane-wise. There are no horizontal sums and no per-(row, column) scale broadcasts, and
// the decoding cost is shared by every activation row of the call.
//
// A policy P describes one format:
//   static constexpr int kRows;            weight rows per panel (8, or 16 for floats)
//   using Packed;                          one packed unit (kRows x kUnitElems elements)
//   static constexpr int64_t kUnitElems;   elements per unit (32 or 256)
//   static constexpr int kChunkUnits;      units packed per pass (sized to stay in L1)
//   static void pack(const uint8_t* const* rows, int nr, int64_t unit, Packed* out);
//   template <int RY> static void compute(const Packed* units, int count, int64_t unit0,
//                                         const uint8_t* const* cols, __m256* acc);
//   (acc: kRows / 8 vectors per activation row, row-major)

#if defined(FRUGAL_QUANT_SIMD_PANEL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FRUGAL_QUANT_SIMD_PANEL_INL_H_
#undef FRUGAL_QUANT_SIMD_PANEL_INL_H_
#else
#define FRUGAL_QUANT_SIMD_PANEL_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "frugal/quant/simd_common-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace frugal::quant::HWY_NAMESPACE {

#if FRUGAL_QUANT_AVX2

inline constexpr int kPanelRows = 8;       // weight rows per panel: one per 32-bit lane
inline constexpr int kPanelPassCols = 64;  // activation rows whose accumulators live on the stack

// r[i] holds 8 dwords of row i; afterwards r[k] holds dword k of rows 0..7.
HWY_INLINE void transpose_8x8_epi32(__m256i* r) {
  const __m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]);
  const __m256i t1 = _mm256_unpackhi_epi32(r[0], r[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(r[2], r[3]);
  const __m256i t3 = _mm256_unpackhi_epi32(r[2], r[3]);
  const __m256i t4 = _mm256_unpacklo_epi32(r[4], r[5]);
  const __m256i t5 = _mm256_unpackhi_epi32(r[4], r[5]);
  const __m256i t6 = _mm256_unpacklo_epi32(r[6], r[7]);
  const __m256i t7 = _mm256_unpackhi_epi32(r[6], r[7]);
  const __m256i u0 = _mm256_unpacklo_epi64(t0, t2);  // dword 0 of rows 0-3 | dword 4
  const __m256i u1 = _mm256_unpackhi_epi64(t0, t2);  // 1 | 5
  const __m256i u2 = _mm256_unpacklo_epi64(t1, t3);  // 2 | 6
  const __m256i u3 = _mm256_unpackhi_epi64(t1, t3);  // 3 | 7
  const __m256i u4 = _mm256_unpacklo_epi64(t4, t6);
  const __m256i u5 = _mm256_unpackhi_epi64(t4, t6);
  const __m256i u6 = _mm256_unpacklo_epi64(t5, t7);
  const __m256i u7 = _mm256_unpackhi_epi64(t5, t7);
  r[0] = _mm256_permute2x128_si256(u0, u4, 0x20);
  r[4] = _mm256_permute2x128_si256(u0, u4, 0x31);
  r[1] = _mm256_permute2x128_si256(u1, u5, 0x20);
  r[5] = _mm256_permute2x128_si256(u1, u5, 0x31);
  r[2] = _mm256_permute2x128_si256(u2, u6, 0x20);
  r[6] = _mm256_permute2x128_si256(u2, u6, 0x31);
  r[3] = _mm256_permute2x128_si256(u3, u7, 0x20);
  r[7] = _mm256_permute2x128_si256(u3, u7, 0x31);
}

// Four activation bytes, the same in every lane.
HWY_INLINE __m256i broadcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

template <class P, int RY = 1>
HWY_INLINE void panel_compute_cols(int ry, const typename P::Packed* units, int count,
                                   int64_t unit0, const uint8_t* const* cols, __m256* acc) {
  if constexpr (RY <= P::kGroupCols) {
    if (ry == RY) {
      P::template compute<RY>(units, count, unit0, cols, acc);
      return;
    }
    panel_compute_cols<P, RY + 1>(ry, units, count, unit0, cols, acc);
  }
}

// The whole product s[c * ldc + r] = dot(x row r, y row c) for r < nrx, c < nry. P::kRows (8 or
// 16) weight rows per panel; acc holds kRows / 8 vectors per activation row.
template <class P>
HWY_INLINE void panel_gemm(int64_t n, float* s, size_t ldc, const void* x, size_t bx, int nrx,
                           const void* y, size_t by, int nry) {
  constexpr int kRows = P::kRows;
  constexpr int kVecs = kRows / 8;
  const int64_t nunits = n / P::kUnitElems;
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  const uint8_t* yb = static_cast<const uint8_t*>(y);
  alignas(32) typename P::Packed packed[P::kChunkUnits];
  alignas(32) __m256 acc[kPanelPassCols * kVecs];
  for (int r0 = 0; r0 < nrx; r0 += kRows) {
    const int nr = nrx - r0 < kRows ? nrx - r0 : kRows;
    // Rows past the end repeat the panel's first row; their lanes are never stored.
    const uint8_t* rows[kRows];
    for (int r = 0; r < kRows; ++r) rows[r] = xb + static_cast<size_t>(r0 + (r < nr ? r : 0)) * bx;
    for (int c0 = 0; c0 < nry; c0 += kPanelPassCols) {
      const int npc = nry - c0 < kPanelPassCols ? nry - c0 : kPanelPassCols;
      for (int i = 0; i < npc * kVecs; ++i) acc[i] = _mm256_setzero_ps();
      for (int64_t u0 = 0; u0 < nunits; u0 += P::kChunkUnits) {
        const int count =
            static_cast<int>(nunits - u0 < P::kChunkUnits ? nunits - u0 : P::kChunkUnits);
        for (int u = 0; u < count; ++u) P::pack(rows, nr, u0 + u, &packed[u]);
        for (int cg = 0; cg < npc; cg += P::kGroupCols) {
          const int ry = npc - cg < P::kGroupCols ? npc - cg : P::kGroupCols;
          const uint8_t* cols[P::kGroupCols];
          for (int c = 0; c < ry; ++c) cols[c] = yb + static_cast<size_t>(c0 + cg + c) * by;
          panel_compute_cols<P>(ry, packed, count, u0, cols, acc + cg * kVecs);
        }
      }
      for (int c = 0; c < npc; ++c) {
        alignas(32) float lanes[kRows];
        for (int h = 0; h < kVecs; ++h) _mm256_store_ps(lanes + 8 * h, acc[c * kVecs + h]);
        float* out = s + static_cast<size_t>(c0 + c) * ldc + r0;
        for (int r = 0; r < nr; ++r) out[r] = lanes[r];
      }
    }
  }
}

#endif  // FRUGAL_QUANT_AVX2

}  // namespace frugal::quant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
