// Activation quantizers: F32 rows into Q8_0, Q8_1 and Q8_K. The AVX2 versions reproduce the
// reference bytes exactly: the scale is computed in scalar code as the reference does, the
// vector multiply is the same IEEE operation, and rounding is emulated exactly (roundf's
// ties-away for Q8_0/Q8_1, nearest-even for Q8_K).
#include "frugal/quant/simd_config.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "frugal/quant/simd_q8.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "frugal/quant/blocks.h"
#include "frugal/quant/reference.h"
#include "frugal/quant/simd_common-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace frugal::quant::HWY_NAMESPACE {

#if FRUGAL_QUANT_AVX2

HWY_INLINE __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.f), v); }

HWY_INLINE float hmax_ps(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// C roundf: round half away from zero. trunc(v) and v - trunc(v) are exact in float.
HWY_INLINE __m256i round_away_epi32(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 frac = _mm256_sub_ps(v, t);
  const __m256 half = _mm256_cmp_ps(abs_ps(frac), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 step = _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.f)), _mm256_set1_ps(1.f));
  return _mm256_cvtps_epi32(_mm256_add_ps(t, _mm256_and_ps(half, step)));
}

// Four vectors of 8 int32 (each in [-128, 127]) -> 32 int8 in order.
HWY_INLINE __m256i pack_i32_to_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b);  // a0-3 b0-3 | a4-7 b4-7
  const __m256i cd = _mm256_packs_epi32(c, d);
  const __m256i abcd = _mm256_packs_epi16(ab, cd);  // a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7
  return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// One 32-element block of Q8_0/Q8_1: stores the codes, returns d (as float) and sum of codes.
HWY_INLINE float quantize_block32(const float* x, int8_t* qs, int* sum) {
  const __m256 v0 = _mm256_loadu_ps(x);
  const __m256 v1 = _mm256_loadu_ps(x + 8);
  const __m256 v2 = _mm256_loadu_ps(x + 16);
  const __m256 v3 = _mm256_loadu_ps(x + 24);
  const __m256 m =
      _mm256_max_ps(_mm256_max_ps(abs_ps(v0), abs_ps(v1)), _mm256_max_ps(abs_ps(v2), abs_ps(v3)));
  const float d = hmax_ps(m) / 127.f;
  const float id = d != 0.f ? 1.f / d : 0.f;
  const __m256 vid = _mm256_set1_ps(id);
  const __m256i i0 = round_away_epi32(_mm256_mul_ps(v0, vid));
  const __m256i i1 = round_away_epi32(_mm256_mul_ps(v1, vid));
  const __m256i i2 = round_away_epi32(_mm256_mul_ps(v2, vid));
  const __m256i i3 = round_away_epi32(_mm256_mul_ps(v3, vid));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), pack_i32_to_i8(i0, i1, i2, i3));
  if (sum) *sum = hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
  return d;
}

void FromFloatQ8_0(const float* src, void* dst, int64_t n) {
  BlockQ8_0* b = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    b[i].d = f32_to_fp16(quantize_block32(src + i * kQK, b[i].qs, nullptr));
  }
}

void FromFloatQ8_1(const float* src, void* dst, int64_t n) {
  BlockQ8_1* b = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sum = 0;
    const float d = quantize_block32(src + i * kQK, b[i].qs, &sum);
    b[i].d = f32_to_fp16(d);
    b[i].s = f32_to_fp16(static_cast<float>(sum) * d);
  }
}

// The signed value of largest magnitude, first occurrence on ties (as the reference).
HWY_INLINE float signed_absmax_256(const float* x) {
  __m256 m = _mm256_setzero_ps();
  for (int j = 0; j < kQK_K; j += 8) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + j)));
  const float amax = hmax_ps(m);
  const __m256 va = _mm256_set1_ps(amax);
  for (int j = 0; j < kQK_K; j += 8) {
    const int hit =
        _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(_mm256_loadu_ps(x + j)), va, _CMP_EQ_OQ));
    if (hit) return x[j + __builtin_ctz(static_cast<unsigned>(hit))];
  }
  return 0.f;
}

// bsums: sums of each 16 codes, from the stored int8 codes.
HWY_INLINE void block_sums_q8_k(const int8_t* qs, int16_t* bsums) {
  const __m256i ones8 = _mm256_set1_epi8(1);
  __m256i m[8];
  for (int k = 0; k < 8; ++k) {  // lanes 0-3: partial sums of group 2k, lanes 4-7: group 2k+1
    m[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, loadu_256(qs + 32 * k)), ones_i16());
  }
  const __m256i r0 =
      _mm256_hadd_epi32(_mm256_hadd_epi32(m[0], m[1]), _mm256_hadd_epi32(m[2], m[3]));
  const __m256i r1 =
      _mm256_hadd_epi32(_mm256_hadd_epi32(m[4], m[5]), _mm256_hadd_epi32(m[6], m[7]));
  // r0 = g0 g2 g4 g6 | g1 g3 g5 g7, r1 likewise for g8..g15.
  const __m256i p = _mm256_packs_epi32(r0, r1);  // g0 g2 .. g14 | g1 g3 .. g15 (int16)
  const __m128i even = _mm256_castsi256_si128(p);
  const __m128i odd = _mm256_extracti128_si256(p, 1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(bsums), _mm_unpacklo_epi16(even, odd));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(bsums + 8), _mm_unpackhi_epi16(even, odd));
}

void FromFloatQ8_K(const float* src, void* dst, int64_t n) {
  BlockQ8_K* b = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* x = src + i * kQK_K;
    const float max = signed_absmax_256(x);
    if (max == 0.f) {
      b[i] = BlockQ8_K{};
      continue;
    }
    const float iscale = -127.f / max;
    const __m256 vs = _mm256_set1_ps(iscale);
    const __m256i cap = _mm256_set1_epi32(127);
    for (int j = 0; j < kQK_K; j += 32) {
      __m256i q[4];
      for (int k = 0; k < 4; ++k) {
        const __m256 p = _mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * k), vs);
        q[k] = _mm256_min_epi32(
            _mm256_cvtps_epi32(_mm256_round_ps(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)),
            cap);
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(b[i].qs + j),
                          pack_i32_to_i8(q[0], q[1], q[2], q[3]));
    }
    block_sums_q8_k(b[i].qs, b[i].bsums);
    b[i].d = 1.f / iscale;
  }
}

#else

void FromFloatQ8_0(const float* src, void* dst, int64_t n) { quantize_q8_0_ref(src, dst, n); }
void FromFloatQ8_1(const float* src, void* dst, int64_t n) { quantize_q8_1_ref(src, dst, n); }
void FromFloatQ8_K(const float* src, void* dst, int64_t n) { quantize_q8_k_ref(src, dst, n); }

#endif  // FRUGAL_QUANT_AVX2

}  // namespace frugal::quant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "frugal/quant/simd_kernels.h"

namespace frugal::quant::fast {

HWY_EXPORT(FromFloatQ8_0);
HWY_EXPORT(FromFloatQ8_1);
HWY_EXPORT(FromFloatQ8_K);

void from_float_q8_0(const float* src, void* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(FromFloatQ8_0)(src, dst, n);
}
void from_float_q8_1(const float* src, void* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(FromFloatQ8_1)(src, dst, n);
}
void from_float_q8_k(const float* src, void* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(FromFloatQ8_K)(src, dst, n);
}

}  // namespace frugal::quant::fast
#endif  // HWY_ONCE
