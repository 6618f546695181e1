// Per-target helpers of the SIMD kernels (Highway's re-inclusion idiom: this header is compiled
// once per target by the kernel files that include it after foreach_target.h).
//
// FRUGAL_QUANT_AVX2 is set for x86 targets with AVX2 (AVX2, AVX3, AVX3_DL): their code uses raw
// 256-bit intrinsics for the int8 dot products Highway 1.0.3 lacks (maddubs/madd). Every
// other target takes the generic path.

#if defined(FRUGAL_QUANT_SIMD_COMMON_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FRUGAL_QUANT_SIMD_COMMON_INL_H_
#undef FRUGAL_QUANT_SIMD_COMMON_INL_H_
#else
#define FRUGAL_QUANT_SIMD_COMMON_INL_H_
#endif

#include <cstdint>
#include <cstring>

#include "frugal/core/half.h"
#include "hwy/highway.h"

#ifndef FRUGAL_QUANT_NOIPA
#if defined(__GNUC__) && !defined(__clang__)
#define FRUGAL_QUANT_NOIPA __attribute__((noipa))
#else
#define FRUGAL_QUANT_NOIPA
#endif
#endif

#undef FRUGAL_QUANT_AVX2
#if HWY_ARCH_X86 && (HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL)
#define FRUGAL_QUANT_AVX2 1
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace frugal::quant::HWY_NAMESPACE {

#if FRUGAL_QUANT_AVX2

HWY_INLINE float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

HWY_INLINE __m256i ones_i16() { return _mm256_set1_epi16(1); }

// Sum over pairs of u8*i8 products, widened to 8 int32 lanes (each lane: 4 products).
HWY_INLINE __m256i dot_u8_i8(__m256i xu, __m256i y) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(xu, y), ones_i16());
}

// The same for two signed operands: move x's sign onto y so maddubs sees |x| unsigned.
// Exact as long as x != -128 (codes here never are).
HWY_INLINE __m256i dot_i8_i8(__m256i x, __m256i y) {
  return dot_u8_i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

// 16 packed bytes -> 32 codes: byte j's low nibble at lane j, its high nibble at lane j+16.
HWY_INLINE __m256i nibbles_32(const uint8_t* qs) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// 32 bits -> 32 bytes, 0xFF where the bit (lane index) is set.
HWY_INLINE __m256i bits_to_bytes(uint32_t bits) {
  const __m256i v = _mm256_set1_epi32(static_cast<int>(bits));
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(v, spread), bit), bit);
}

HWY_INLINE float hsum_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

HWY_INLINE int hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// Four accumulators' horizontal sums as one __m128 {a, b, c, d}.
HWY_INLINE __m128 hsum4_ps(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 ab = _mm256_hadd_ps(a, b);  // a01 a23 b01 b23 | a45 a67 b45 b67
  const __m256 cd = _mm256_hadd_ps(c, d);
  const __m256 abcd = _mm256_hadd_ps(ab, cd);  // a0123 b0123 c0123 d0123 | (upper halves)
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

HWY_INLINE __m256i loadu_256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// The low 8 signed bytes of v as floats.
HWY_INLINE __m256 bytes8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }

// Hides a value from the optimizer so that a following add is not fused with the multiply that
// produced it: GCC contracts mul+add into FMA by default in C++, which would round differently
// from the scalar reference.
HWY_INLINE __m256 rounded(__m256 v) {
  asm("" : "+x"(v));
  return v;
}

// out[j] = d * q[j] for 16 signed byte codes; with kOffset, out[j] = d * q[j] + m, the product
// rounded before the add as in the scalar reference.
template <bool kOffset>
HWY_INLINE void store_16(__m128i q, __m256 d, __m256 m, float* out) {
  __m256 a = _mm256_mul_ps(d, bytes8_to_ps(q));
  __m256 b = _mm256_mul_ps(d, bytes8_to_ps(_mm_srli_si128(q, 8)));
  if constexpr (kOffset) {
    a = _mm256_add_ps(rounded(a), m);
    b = _mm256_add_ps(rounded(b), m);
  }
  _mm256_storeu_ps(out, a);
  _mm256_storeu_ps(out + 8, b);
}

template <bool kOffset>
HWY_INLINE void store_32(__m256i q, float d, float m, float* out) {
  const __m256 vd = _mm256_set1_ps(d);
  const __m256 vm = _mm256_set1_ps(m);
  store_16<kOffset>(_mm256_castsi256_si128(q), vd, vm, out);
  store_16<kOffset>(_mm256_extracti128_si256(q, 1), vd, vm, out + 16);
}

#else

HWY_INLINE float half_to_float(uint16_t h) { return fp16_to_f32(h); }

#endif  // FRUGAL_QUANT_AVX2

}  // namespace frugal::quant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
