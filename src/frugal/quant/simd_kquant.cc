// Dequantization, dot products and gemm tiles of the K-quants (Q2_K..Q6_K against Q8_K
// activations; Q8_K dequantization).
//
// AVX2: a super-block is handled as 8 chunks of 32 codes. Every code is made a non-negative
// byte (signed formats are offset: Q3_K by +4, Q6_K by +32), so one maddubs against the int8
// activations gives pair sums, and a madd with the chunk's integer sub-block scales (int16,
// one per 16 lanes for the 16-element sub-blocks) accumulates int32 with the scales applied.
// Only one float FMA per super-block remains. The offsets of Q3_K/Q6_K and the mins of
// Q2_K/Q4_K/Q5_K come from Q8_K's bsums (sums of each 16 activation codes): one madd each.
// In a gemm tile the scales of each weight row are prepared once per super-block and every
// decoded chunk is reused against RY activation rows.
#include "frugal/quant/simd_config.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "frugal/quant/simd_kquant.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "frugal/quant/blocks.h"
#include "frugal/quant/reference.h"
#include "frugal/quant/simd_common-inl.h"
#include "frugal/quant/simd_kernels.h"
#include "frugal/quant/simd_panel-inl.h"
#include "frugal/quant/simd_tile-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace frugal::quant::HWY_NAMESPACE {

#if FRUGAL_QUANT_AVX2

// What a weight row's super-block contributes besides its codes.
struct KRow {
  __m256i scale[8];  // int16 multipliers of chunk k's maddubs pair sums
  __m256i corr;      // int16, madd'ed with the activation bsums (mins or code offsets)
  float d;
  float dmin;  // kMinTerm formats: the min term is -dmin * d8 * madd(bsums, corr)
};

HWY_INLINE __m256i load_bsums(const BlockQ8_K& y) { return loadu_256(y.bsums); }

HWY_INLINE __m256i srl16(__m256i v, int count) {
  return _mm256_srl_epi16(v, _mm_cvtsi32_si128(count));
}

// Scales of 16-element sub-blocks (int8 in s, 16 of them): chunk k's multiplier holds s[2k]
// in its low 8 lanes and s[2k+1] in its high 8 lanes.
HWY_INLINE void scales_16(__m128i s, bool is_signed, __m256i* out) {
  for (int k = 0; k < 8; ++k) {
    const __m128i ctrl = _mm_setr_epi8(2 * k, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k,  //
                                       2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1,
                                       2 * k + 1, 2 * k + 1, 2 * k + 1);
    const __m128i b = _mm_shuffle_epi8(s, ctrl);
    out[k] = is_signed ? _mm256_cvtepi8_epi16(b) : _mm256_cvtepu8_epi16(b);
  }
}

// 6-bit scales and mins of Q4_K/Q5_K as 8 bytes each: sc = s0..s7, m = m0..m7.
HWY_INLINE void unpack_scales_k4(const uint8_t* packed, uint64_t* sc, uint64_t* m) {
  uint32_t a[3];
  std::memcpy(a, packed, 12);
  const uint32_t sc_lo = a[0] & 0x3f3f3f3fu;
  const uint32_t m_lo = a[1] & 0x3f3f3f3fu;
  const uint32_t sc_hi = (a[2] & 0x0f0f0f0fu) | ((a[0] >> 2) & 0x30303030u);
  const uint32_t m_hi = ((a[2] >> 4) & 0x0f0f0f0fu) | ((a[1] >> 2) & 0x30303030u);
  *sc = sc_lo | (static_cast<uint64_t>(sc_hi) << 32);
  *m = m_lo | (static_cast<uint64_t>(m_hi) << 32);
}

HWY_INLINE void prepare_k4(const uint8_t* packed, uint16_t d, uint16_t dmin, KRow* row) {
  uint64_t sc;
  uint64_t m;
  unpack_scales_k4(packed, &sc, &m);
  for (int k = 0; k < 8; ++k)
    row->scale[k] = _mm256_set1_epi16(static_cast<int16_t>((sc >> (8 * k)) & 0xFF));
  const __m128i mb = _mm_cvtsi64_si128(static_cast<int64_t>(m));
  row->corr = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mb, mb));  // m_j at lanes 2j and 2j+1
  row->d = half_to_float(d);
  row->dmin = half_to_float(dmin);
}

struct FmtQ4_K {
  using X = BlockQ4_K;
  static constexpr bool kMinTerm = true;
  // maddubs results summed in int16 before the scale madd (range and sub-block bound).
  static constexpr int kGroup = 8;
  static HWY_INLINE void prepare(const X& b, KRow* row) { prepare_k4(b.scales, b.d, b.dmin, row); }
  // Codes of elements 128g .. 128g+127 as 4 chunks of 32.
  static HWY_INLINE void codes(const X& b, int g, __m256i* q) {
    const __m256i mask = _mm256_set1_epi8(0x0F);
    const __m256i a = loadu_256(b.qs + 64 * g);
    const __m256i c = loadu_256(b.qs + 64 * g + 32);
    q[0] = _mm256_and_si256(a, mask);
    q[1] = _mm256_and_si256(_mm256_srli_epi16(a, 4), mask);
    q[2] = _mm256_and_si256(c, mask);
    q[3] = _mm256_and_si256(_mm256_srli_epi16(c, 4), mask);
  }
};

struct FmtQ5_K {
  using X = BlockQ5_K;
  static constexpr bool kMinTerm = true;
  // maddubs results summed in int16 before the scale madd (range and sub-block bound).
  static constexpr int kGroup = 4;
  static HWY_INLINE void prepare(const X& b, KRow* row) { prepare_k4(b.scales, b.d, b.dmin, row); }
  static HWY_INLINE void codes(const X& b, int g, __m256i* q) {
    const __m256i mask = _mm256_set1_epi8(0x0F);
    const __m256i one = _mm256_set1_epi8(1);
    const __m256i hbits = srl16(loadu_256(b.qh), 4 * g);  // bits 2c, 2c+1 of 64-chunk c = 2g
    for (int h = 0; h < 2; ++h) {
      const __m256i a = loadu_256(b.qs + 64 * g + 32 * h);
      const __m256i hb = srl16(hbits, 2 * h);
      const __m256i hi_lo = _mm256_slli_epi16(_mm256_and_si256(hb, one), 4);
      const __m256i hi_hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 1), one), 4);
      q[2 * h] = _mm256_or_si256(_mm256_and_si256(a, mask), hi_lo);
      q[2 * h + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), mask), hi_hi);
    }
  }
};

struct FmtQ6_K {
  using X = BlockQ6_K;
  static constexpr bool kMinTerm = false;
  // maddubs results summed in int16 before the scale madd (range and sub-block bound).
  static constexpr int kGroup = 2;
  static HWY_INLINE void prepare(const X& b, KRow* row) {
    const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
    scales_16(s, true, row->scale);
    // Codes are stored +32: subtract 32 * sum_j s_j * bsum_j.
    row->corr = _mm256_slli_epi16(_mm256_cvtepi8_epi16(s), 5);
    row->d = half_to_float(b.d);
    row->dmin = 0.f;
  }
  static HWY_INLINE void codes(const X& b, int g, __m256i* q) {
    const __m256i mask = _mm256_set1_epi8(0x0F);
    const __m256i hmask = _mm256_set1_epi8(0x30);
    const __m256i l0 = loadu_256(b.ql + 64 * g);
    const __m256i l1 = loadu_256(b.ql + 64 * g + 32);
    const __m256i h = loadu_256(b.qh + 32 * g);
    q[0] = _mm256_or_si256(_mm256_and_si256(l0, mask),
                           _mm256_and_si256(_mm256_slli_epi16(h, 4), hmask));
    q[1] = _mm256_or_si256(_mm256_and_si256(l1, mask),
                           _mm256_and_si256(_mm256_slli_epi16(h, 2), hmask));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), mask),
                           _mm256_and_si256(h, hmask));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), mask),
                           _mm256_and_si256(_mm256_srli_epi16(h, 2), hmask));
  }
};

struct FmtQ2_K {
  using X = BlockQ2_K;
  static constexpr bool kMinTerm = true;
  // maddubs results summed in int16 before the scale madd (range and sub-block bound).
  static constexpr int kGroup = 4;
  static HWY_INLINE void prepare(const X& b, KRow* row) {
    const __m128i sm = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
    const __m128i mask = _mm_set1_epi8(0x0F);
    scales_16(_mm_and_si128(sm, mask), false, row->scale);
    row->corr = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), mask));
    row->d = half_to_float(b.d);
    row->dmin = half_to_float(b.dmin);
  }
  static HWY_INLINE void codes(const X& b, int g, __m256i* q) {
    const __m256i mask = _mm256_set1_epi8(3);
    const __m256i a = loadu_256(b.qs + 32 * g);
    q[0] = _mm256_and_si256(a, mask);
    q[1] = _mm256_and_si256(_mm256_srli_epi16(a, 2), mask);
    q[2] = _mm256_and_si256(_mm256_srli_epi16(a, 4), mask);
    q[3] = _mm256_and_si256(_mm256_srli_epi16(a, 6), mask);
  }
};

struct FmtQ3_K {
  using X = BlockQ3_K;
  static constexpr bool kMinTerm = false;
  // maddubs results summed in int16 before the scale madd (range and sub-block bound).
  static constexpr int kGroup = 4;
  static HWY_INLINE void prepare(const X& b, KRow* row) {
    uint32_t a[3];
    std::memcpy(a, b.scales, 12);
    const uint32_t lo4 = 0x0f0f0f0fu;
    const uint32_t hi2 = 0x03030303u;
    const uint32_t s0 = (a[0] & lo4) | ((a[2] & hi2) << 4);
    const uint32_t s1 = (a[1] & lo4) | (((a[2] >> 2) & hi2) << 4);
    const uint32_t s2 = ((a[0] >> 4) & lo4) | (((a[2] >> 4) & hi2) << 4);
    const uint32_t s3 = ((a[1] >> 4) & lo4) | (((a[2] >> 6) & hi2) << 4);
    const __m128i raw = _mm_setr_epi32(static_cast<int>(s0), static_cast<int>(s1),
                                       static_cast<int>(s2), static_cast<int>(s3));
    const __m128i s = _mm_sub_epi8(raw, _mm_set1_epi8(32));
    scales_16(s, true, row->scale);
    // Codes are stored +4: subtract 4 * sum_j s_j * bsum_j.
    row->corr = _mm256_slli_epi16(_mm256_cvtepi8_epi16(s), 2);
    row->d = half_to_float(b.d);
    row->dmin = 0.f;
  }
  static HWY_INLINE void codes(const X& b, int g, __m256i* q) {
    const __m256i mask = _mm256_set1_epi8(3);
    const __m256i one = _mm256_set1_epi8(1);
    const __m256i a = loadu_256(b.qs + 32 * g);
    const __m256i hm = srl16(loadu_256(b.hmask), 4 * g);
    for (int k = 0; k < 4; ++k) {
      const __m256i low = _mm256_and_si256(srl16(a, 2 * k), mask);
      const __m256i high = _mm256_slli_epi16(_mm256_and_si256(srl16(hm, k), one), 2);
      q[k] = _mm256_or_si256(low, high);
    }
  }
};

// Dequantization: the same code decoders, then float scales per sub-block (rounded exactly
// as the scalar reference: (d * sc) * q - dmin * m, no FMA).
HWY_INLINE void to_float_block(const BlockQ4_K& b, float* y) {
  const float d = half_to_float(b.d);
  const float dmin = half_to_float(b.dmin);
  for (int g = 0; g < 2; ++g) {
    __m256i q[4];
    FmtQ4_K::codes(b, g, q);
    for (int k = 0; k < 4; ++k) {
      uint8_t sc;
      uint8_t m;
      unpack_scale_min_k4(4 * g + k, b.scales, &sc, &m);
      store_32<true>(q[k], d * sc, -(dmin * m), y + 128 * g + 32 * k);
    }
  }
}
HWY_INLINE void to_float_block(const BlockQ5_K& b, float* y) {
  const float d = half_to_float(b.d);
  const float dmin = half_to_float(b.dmin);
  for (int g = 0; g < 2; ++g) {
    __m256i q[4];
    FmtQ5_K::codes(b, g, q);
    for (int k = 0; k < 4; ++k) {
      uint8_t sc;
      uint8_t m;
      unpack_scale_min_k4(4 * g + k, b.scales, &sc, &m);
      store_32<true>(q[k], d * sc, -(dmin * m), y + 128 * g + 32 * k);
    }
  }
}
HWY_INLINE void to_float_block(const BlockQ2_K& b, float* y) {
  const float d = half_to_float(b.d);
  const float dmin = half_to_float(b.dmin);
  for (int g = 0; g < 2; ++g) {
    __m256i q[4];
    FmtQ2_K::codes(b, g, q);
    for (int k = 0; k < 4; ++k) {
      const int s0 = b.scales[8 * g + 2 * k];
      const int s1 = b.scales[8 * g + 2 * k + 1];
      float* out = y + 128 * g + 32 * k;
      store_16<true>(_mm256_castsi256_si128(q[k]), _mm256_set1_ps(d * static_cast<float>(s0 & 0xF)),
                     _mm256_set1_ps(-(dmin * static_cast<float>(s0 >> 4))), out);
      store_16<true>(_mm256_extracti128_si256(q[k], 1),
                     _mm256_set1_ps(d * static_cast<float>(s1 & 0xF)),
                     _mm256_set1_ps(-(dmin * static_cast<float>(s1 >> 4))), out + 16);
    }
  }
}
template <class F>
HWY_INLINE void to_float_signed16(const typename F::X& b, const int8_t* scales, int offset,
                                  float* y) {
  const float d = half_to_float(b.d);
  for (int g = 0; g < 2; ++g) {
    __m256i q[4];
    F::codes(b, g, q);
    for (int k = 0; k < 4; ++k) {
      const __m256i v = _mm256_sub_epi8(q[k], _mm256_set1_epi8(static_cast<char>(offset)));
      const __m128i part[2] = {_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)};
      for (int h = 0; h < 2; ++h) {
        const float dl = d * static_cast<float>(scales[8 * g + 2 * k + h]);
        store_16<false>(part[h], _mm256_set1_ps(dl), _mm256_setzero_ps(),
                        y + 128 * g + 32 * k + 16 * h);
      }
    }
  }
}
HWY_INLINE void to_float_block(const BlockQ3_K& b, float* y) {
  int8_t sc[16];
  unpack_scales_q3_k(b.scales, sc);
  to_float_signed16<FmtQ3_K>(b, sc, 4, y);
}
HWY_INLINE void to_float_block(const BlockQ6_K& b, float* y) {
  to_float_signed16<FmtQ6_K>(b, b.scales, 32, y);
}
HWY_INLINE void to_float_block(const BlockQ8_K& b, float* y) {
  for (int k = 0; k < 8; ++k) store_32<false>(loadu_256(b.qs + 32 * k), b.d, 0.f, y + 32 * k);
}

// noipa: GCC 12's inter-procedural mod/ref analysis wrongly dropped the call to the Q2_K
// instance (its wrapper compiled to a bare `ret`); keeping it opaque costs one call per row.
template <class X>
FRUGAL_QUANT_NOIPA void to_float_k(const void* src, float* dst, int64_t n) {
  const X* x = static_cast<const X*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) to_float_block(x[i], dst + i * kQK_K);
}

// Per-row scalars of a super-block for the panel: multipliers of each 16-element half-chunk
// (sc), coefficients of the 16 activation bsums (corr), and the float scales.
struct KScalars {
  int16_t sc[16];
  int16_t corr[16];
  float d;
  float dmin;
};
HWY_INLINE void k_scalars(const BlockQ4_K& b, KScalars* k) {
  for (int j = 0; j < 8; ++j) {
    uint8_t sc;
    uint8_t m;
    unpack_scale_min_k4(j, b.scales, &sc, &m);
    k->sc[2 * j] = k->sc[2 * j + 1] = sc;
    k->corr[2 * j] = k->corr[2 * j + 1] = m;
  }
  k->d = half_to_float(b.d);
  k->dmin = half_to_float(b.dmin);
}
HWY_INLINE void k_scalars(const BlockQ5_K& b, KScalars* k) {
  for (int j = 0; j < 8; ++j) {
    uint8_t sc;
    uint8_t m;
    unpack_scale_min_k4(j, b.scales, &sc, &m);
    k->sc[2 * j] = k->sc[2 * j + 1] = sc;
    k->corr[2 * j] = k->corr[2 * j + 1] = m;
  }
  k->d = half_to_float(b.d);
  k->dmin = half_to_float(b.dmin);
}
HWY_INLINE void k_scalars(const BlockQ2_K& b, KScalars* k) {
  for (int l = 0; l < 16; ++l) {
    k->sc[l] = b.scales[l] & 0xF;
    k->corr[l] = b.scales[l] >> 4;
  }
  k->d = half_to_float(b.d);
  k->dmin = half_to_float(b.dmin);
}
HWY_INLINE void k_scalars(const BlockQ3_K& b, KScalars* k) {
  int8_t s[16];
  unpack_scales_q3_k(b.scales, s);
  for (int l = 0; l < 16; ++l) {
    k->sc[l] = s[l];
    k->corr[l] = static_cast<int16_t>(4 * s[l]);  // codes are stored +4
  }
  k->d = half_to_float(b.d);
  k->dmin = 0.f;
}
HWY_INLINE void k_scalars(const BlockQ6_K& b, KScalars* k) {
  for (int l = 0; l < 16; ++l) {
    k->sc[l] = b.scales[l];
    k->corr[l] = static_cast<int16_t>(32 * b.scales[l]);  // codes are stored +32
  }
  k->d = half_to_float(b.d);
  k->dmin = 0.f;
}

// Panel policy (simd_panel-inl.h): 8 weight rows x one super-block per unit.
template <class F>
struct KPanel {
  struct Packed {
    __m256i codes[8][8];  // chunk j, register k, lane r: codes 32j+4k .. +3 of row r
    __m256i sc[16];       // int16 lanes 2r, 2r+1: row r's multiplier of half-chunk l
    __m256i corr[8];      // int16 lanes 2r, 2r+1: row r's coefficients of bsums 2i, 2i+1
    __m256 d;
    __m256 dmin;
  };
  static constexpr int64_t kUnitElems = kQK_K;
  static constexpr int kChunkUnits = 4;
  static constexpr int kGroupCols = 4;
  static constexpr int kRows = kPanelRows;

  static HWY_INLINE void pack(const uint8_t* const* rows, int nr, int64_t unit, Packed* out) {
    using X = typename F::X;
    KScalars ks[kPanelRows];
    alignas(32) float d[kPanelRows];
    alignas(32) float dmin[kPanelRows];
    for (int g = 0; g < 2; ++g) {
      __m256i q[kPanelRows][4];
      for (int r = 0; r < kPanelRows; ++r)
        F::codes(reinterpret_cast<const X*>(rows[r])[unit], g, q[r]);
      for (int c = 0; c < 4; ++c) {
        __m256i* dst = out->codes[4 * g + c];
        for (int r = 0; r < kPanelRows; ++r) dst[r] = q[r][c];
        transpose_8x8_epi32(dst);
      }
    }
    for (int r = 0; r < kPanelRows; ++r) {
      k_scalars(reinterpret_cast<const X*>(rows[r])[unit], &ks[r]);
      d[r] = r < nr ? ks[r].d : 0.f;
      dmin[r] = r < nr ? ks[r].dmin : 0.f;
    }
    alignas(32) int16_t lanes[16];
    for (int l = 0; l < 16; ++l) {
      for (int r = 0; r < kPanelRows; ++r) lanes[2 * r] = lanes[2 * r + 1] = ks[r].sc[l];
      out->sc[l] = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes));
    }
    for (int i = 0; i < 8; ++i) {
      for (int r = 0; r < kPanelRows; ++r) {
        lanes[2 * r] = ks[r].corr[2 * i];
        lanes[2 * r + 1] = ks[r].corr[2 * i + 1];
      }
      out->corr[i] = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes));
    }
    out->d = _mm256_load_ps(d);
    out->dmin = _mm256_load_ps(dmin);
  }

  template <int RY>
  static HWY_INLINE void compute(const Packed* units, int count, int64_t unit0,
                                 const uint8_t* const* cols, __m256* acc) {
    const BlockQ8_K* yc[RY];
    __m256 a[RY];
    for (int c = 0; c < RY; ++c) {
      yc[c] = reinterpret_cast<const BlockQ8_K*>(cols[c]) + unit0;
      a[c] = acc[c];
    }
    for (int u = 0; u < count; ++u) {
      const Packed& p = units[u];
      __m256i sumi[RY];
      for (int c = 0; c < RY; ++c) sumi[c] = _mm256_setzero_si256();
        // Not unrolled: the unrolled chunk loop made GCC's compile time explode.
#pragma GCC unroll 1
      for (int j = 0; j < 8; ++j) {
        __m256i s16[RY];
        for (int c = 0; c < RY; ++c) s16[c] = _mm256_setzero_si256();
        for (int k = 0; k < 8; ++k) {
          const __m256i xk = p.codes[j][k];
          for (int c = 0; c < RY; ++c) {
            const __m256i yk = broadcast4(yc[c][u].qs + 32 * j + 4 * k);
            s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(xk, yk));
          }
          if ((k + 1) % F::kGroup == 0) {
            const __m256i sc = p.sc[2 * j + k / 4];
            for (int c = 0; c < RY; ++c) {
              sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(s16[c], sc));
              s16[c] = _mm256_setzero_si256();
            }
          }
        }
      }
      for (int c = 0; c < RY; ++c) {
        __m256i corr = _mm256_setzero_si256();
        for (int i = 0; i < 8; ++i) {
          corr = _mm256_add_epi32(corr,
                                  _mm256_madd_epi16(p.corr[i], broadcast4(yc[c][u].bsums + 2 * i)));
        }
        const __m256 d8 = _mm256_set1_ps(yc[c][u].d);
        if constexpr (F::kMinTerm) {
          a[c] = _mm256_fmadd_ps(_mm256_mul_ps(p.d, d8), _mm256_cvtepi32_ps(sumi[c]), a[c]);
          a[c] = _mm256_fnmadd_ps(_mm256_mul_ps(p.dmin, d8), _mm256_cvtepi32_ps(corr), a[c]);
        } else {
          a[c] = _mm256_fmadd_ps(_mm256_mul_ps(p.d, d8),
                                 _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[c], corr)), a[c]);
        }
      }
    }
    for (int c = 0; c < RY; ++c) acc[c] = a[c];
  }
};

template <class F>
struct KTile {
  template <int RX, int RY>
  static HWY_INLINE void run(const TileArgs& a) {
    using X = typename F::X;
    const X* xr[RX];
    const BlockQ8_K* yc[RY];
    for (int r = 0; r < RX; ++r) xr[r] = reinterpret_cast<const X*>(a.x + r * a.bx);
    for (int c = 0; c < RY; ++c) yc[c] = reinterpret_cast<const BlockQ8_K*>(a.y + c * a.by);
    __m256 acc[RX][RY];
    for (int r = 0; r < RX; ++r) {
      for (int c = 0; c < RY; ++c) acc[r][c] = _mm256_setzero_ps();
    }
    const int64_t nb = a.n / kQK_K;
    for (int64_t i = 0; i < nb; ++i) {
      KRow row[RX];
      for (int r = 0; r < RX; ++r) F::prepare(xr[r][i], &row[r]);
      __m256i sumi[RX][RY];
      for (int r = 0; r < RX; ++r) {
        for (int c = 0; c < RY; ++c) sumi[r][c] = _mm256_setzero_si256();
      }
      for (int g = 0; g < 2; ++g) {
        for (int r = 0; r < RX; ++r) {
          __m256i q[4];
          F::codes(xr[r][i], g, q);
          for (int c = 0; c < RY; ++c) {
            const int8_t* yq = yc[c][i].qs + 128 * g;
            for (int k = 0; k < 4; ++k) {
              const __m256i p = _mm256_maddubs_epi16(q[k], loadu_256(yq + 32 * k));
              sumi[r][c] =
                  _mm256_add_epi32(sumi[r][c], _mm256_madd_epi16(p, row[r].scale[4 * g + k]));
            }
          }
        }
      }
      for (int c = 0; c < RY; ++c) {
        const __m256i bsums = load_bsums(yc[c][i]);
        const float d8 = yc[c][i].d;
        for (int r = 0; r < RX; ++r) {
          const __m256i corr = _mm256_madd_epi16(bsums, row[r].corr);
          if constexpr (F::kMinTerm) {
            acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(row[r].d * d8),
                                        _mm256_cvtepi32_ps(sumi[r][c]), acc[r][c]);
            acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(-row[r].dmin * d8), _mm256_cvtepi32_ps(corr),
                                        acc[r][c]);
          } else {
            const __m256i total = _mm256_sub_epi32(sumi[r][c], corr);
            acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(row[r].d * d8), _mm256_cvtepi32_ps(total),
                                        acc[r][c]);
          }
        }
      }
    }
    for (int c = 0; c < RY; ++c) {
      for (int r = 0; r < RX; ++r) a.s[c * a.ldc + r] = hsum_ps(acc[r][c]);
    }
  }
};

#define FRUGAL_KQUANT_TO_FLOAT(Name, Block, ref) \
  void ToFloat##Name(const void* src, float* dst, int64_t n) { to_float_k<Block>(src, dst, n); }

#define FRUGAL_KQUANT_KERNELS(Name, Fmt, ref)                                                     \
  void VecDot##Name(int64_t n, float* s, const void* x, const void* y) {                          \
    KTile<Fmt>::run<1, 1>(                                                                        \
        TileArgs{n, s, 1, static_cast<const uint8_t*>(x), 0, static_cast<const uint8_t*>(y), 0}); \
  }                                                                                               \
  void Gemm##Name(int64_t n, float* s, size_t ldc, const void* x, size_t bx, int nrx,             \
                  const void* y, size_t by, int nry) {                                            \
    panel_gemm<KPanel<Fmt>>(n, s, ldc, x, bx, nrx, y, by, nry);                                   \
  }

#else  // generic targets: the scalar reference, one pair of rows at a time

#define FRUGAL_KQUANT_TO_FLOAT(Name, Block, ref) \
  void ToFloat##Name(const void* src, float* dst, int64_t n) { ref(src, dst, n); }

#define FRUGAL_KQUANT_KERNELS(Name, Fmt, ref)                                               \
  void VecDot##Name(int64_t n, float* s, const void* x, const void* y) { ref(n, s, x, y); } \
  void Gemm##Name(int64_t n, float* s, size_t ldc, const void* x, size_t bx, int nrx,       \
                  const void* y, size_t by, int nry) {                                      \
    for (int c = 0; c < nry; ++c) {                                                         \
      for (int r = 0; r < nrx; ++r) {                                                       \
        ref(n, s + c * ldc + r, static_cast<const uint8_t*>(x) + r * bx,                    \
            static_cast<const uint8_t*>(y) + c * by);                                       \
      }                                                                                     \
    }                                                                                       \
  }

#endif  // FRUGAL_QUANT_AVX2

FRUGAL_KQUANT_KERNELS(Q2_K, FmtQ2_K, vec_dot_q2_k_q8_k_ref)
FRUGAL_KQUANT_KERNELS(Q3_K, FmtQ3_K, vec_dot_q3_k_q8_k_ref)
FRUGAL_KQUANT_KERNELS(Q4_K, FmtQ4_K, vec_dot_q4_k_q8_k_ref)
FRUGAL_KQUANT_KERNELS(Q5_K, FmtQ5_K, vec_dot_q5_k_q8_k_ref)
FRUGAL_KQUANT_KERNELS(Q6_K, FmtQ6_K, vec_dot_q6_k_q8_k_ref)
#undef FRUGAL_KQUANT_KERNELS

FRUGAL_KQUANT_TO_FLOAT(Q2_K, BlockQ2_K, dequantize_q2_k_ref)
FRUGAL_KQUANT_TO_FLOAT(Q3_K, BlockQ3_K, dequantize_q3_k_ref)
FRUGAL_KQUANT_TO_FLOAT(Q4_K, BlockQ4_K, dequantize_q4_k_ref)
FRUGAL_KQUANT_TO_FLOAT(Q5_K, BlockQ5_K, dequantize_q5_k_ref)
FRUGAL_KQUANT_TO_FLOAT(Q6_K, BlockQ6_K, dequantize_q6_k_ref)
FRUGAL_KQUANT_TO_FLOAT(Q8_K, BlockQ8_K, dequantize_q8_k_ref)
#undef FRUGAL_KQUANT_TO_FLOAT

}  // namespace frugal::quant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace frugal::quant::fast {

#define FRUGAL_KQUANT_EXPORT(Name, name)                                               \
  HWY_EXPORT(VecDot##Name);                                                            \
  HWY_EXPORT(Gemm##Name);                                                              \
  void vec_dot_##name(int64_t n, float* s, const void* x, const void* y) {             \
    HWY_DYNAMIC_DISPATCH(VecDot##Name)(n, s, x, y);                                    \
  }                                                                                    \
  void gemm_##name(int64_t n, float* s, size_t ldc, const void* x, size_t bx, int nrx, \
                   const void* y, size_t by, int nry) {                                \
    HWY_DYNAMIC_DISPATCH(Gemm##Name)(n, s, ldc, x, bx, nrx, y, by, nry);               \
  }

FRUGAL_KQUANT_EXPORT(Q2_K, q2_k)
FRUGAL_KQUANT_EXPORT(Q3_K, q3_k)
FRUGAL_KQUANT_EXPORT(Q4_K, q4_k)
FRUGAL_KQUANT_EXPORT(Q5_K, q5_k)
FRUGAL_KQUANT_EXPORT(Q6_K, q6_k)
#undef FRUGAL_KQUANT_EXPORT

#define FRUGAL_KQUANT_EXPORT_TO_FLOAT(Name, name)                \
  HWY_EXPORT(ToFloat##Name);                                     \
  void to_float_##name(const void* src, float* dst, int64_t n) { \
    HWY_DYNAMIC_DISPATCH(ToFloat##Name)(src, dst, n);            \
  }

FRUGAL_KQUANT_EXPORT_TO_FLOAT(Q2_K, q2_k)
FRUGAL_KQUANT_EXPORT_TO_FLOAT(Q3_K, q3_k)
FRUGAL_KQUANT_EXPORT_TO_FLOAT(Q4_K, q4_k)
FRUGAL_KQUANT_EXPORT_TO_FLOAT(Q5_K, q5_k)
FRUGAL_KQUANT_EXPORT_TO_FLOAT(Q6_K, q6_k)
FRUGAL_KQUANT_EXPORT_TO_FLOAT(Q8_K, q8_k)
#undef FRUGAL_KQUANT_EXPORT_TO_FLOAT

}  // namespace frugal::quant::fast
#endif  // HWY_ONCE
