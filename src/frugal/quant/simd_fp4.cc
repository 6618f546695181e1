// Dequantization and dot products (against Q8_0 activations) of the FP4 formats, MXFP4 and
// NVFP4. The E2M1 codes become signed bytes by one byte shuffle of the doubled-value table
// (fp4_codes.h), as IQ4_NL's grid lookup; the integer dot is then the same maddubs/madd as the
// 32-element formats (simd_block32.cc), with the block scale halved. NVFP4 has a scale per 16
// elements: the low four int32 lanes of a 32-element dot belong to one sub-block, the high four
// to the next. The dots sum in a different order from the scalar references (lanes, FMA);
// dequantization is one exact multiply per element, equal to the references bit for bit.
#include "frugal/quant/simd_config.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "frugal/quant/simd_fp4.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "frugal/quant/blocks.h"
#include "frugal/quant/fp4_codes.h"
#include "frugal/quant/reference.h"
#include "frugal/quant/simd_common-inl.h"
#include "frugal/quant/simd_kernels.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace frugal::quant::HWY_NAMESPACE {

#if FRUGAL_QUANT_AVX2

HWY_INLINE __m128i e2m1_grid() { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(kE2M1Doubled)); }

// The 32 codes of an NVFP4 half block (two sub-blocks, 16 bytes of qs) in element order as
// doubled E2M1 values: per sub-block, its 8 low nibbles then its 8 high nibbles.
HWY_INLINE __m256i nvfp4_half_codes(const uint8_t* qs, __m256i grid) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(b, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
  const __m256i idx = _mm256_set_m128i(_mm_unpackhi_epi64(lo, hi), _mm_unpacklo_epi64(lo, hi));
  return _mm256_shuffle_epi8(grid, idx);
}

float dot_mxfp4(int64_t n, const void* vx, const void* vy) {
  const auto* x = static_cast<const BlockMXFP4*>(vx);
  const auto* y = static_cast<const BlockQ8_0*>(vy);
  const __m128i g = e2m1_grid();
  const __m256i grid = _mm256_set_m128i(g, g);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256i c = _mm256_shuffle_epi8(grid, nibbles_32(x[i].qs));
    const __m256i sums = dot_i8_i8(c, loadu_256(y[i].qs));  // |codes| <= 12: no saturation
    const __m256 d = _mm256_set1_ps(e8m0_to_f32_half(x[i].e) * half_to_float(y[i].d));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sums), acc);
  }
  return hsum_ps(acc);
}

float dot_nvfp4(int64_t n, const void* vx, const void* vy) {
  const auto* x = static_cast<const BlockNVFP4*>(vx);
  const auto* y = static_cast<const BlockQ8_0*>(vy);
  const __m128i g = e2m1_grid();
  const __m256i grid = _mm256_set_m128i(g, g);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_NVFP4; ++i) {
    for (int h = 0; h < 2; ++h) {
      const BlockQ8_0& q8 = y[2 * i + h];
      const __m256i sums = dot_i8_i8(nvfp4_half_codes(x[i].qs + 16 * h, grid), loadu_256(q8.qs));
      const float dy = half_to_float(q8.d) * 0.5f;
      const __m256 d = _mm256_set_m128(_mm_set1_ps(ue4m3_to_f32(x[i].d[2 * h + 1]) * dy),
                                       _mm_set1_ps(ue4m3_to_f32(x[i].d[2 * h]) * dy));
      acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sums), acc);
    }
  }
  return hsum_ps(acc);
}

void VecDotMXFP4(int64_t n, float* s, const void* x, const void* y) { *s = dot_mxfp4(n, x, y); }
void VecDotNVFP4(int64_t n, float* s, const void* x, const void* y) { *s = dot_nvfp4(n, x, y); }

void ToFloatMXFP4(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockMXFP4*>(src);
  const __m128i g = e2m1_grid();
  const __m256i grid = _mm256_set_m128i(g, g);
  for (int64_t i = 0; i < n / kQK; ++i) {
    store_32<false>(_mm256_shuffle_epi8(grid, nibbles_32(x[i].qs)), e8m0_to_f32_half(x[i].e), 0.f, dst + i * kQK);
  }
}

void ToFloatNVFP4(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockNVFP4*>(src);
  const __m128i g = e2m1_grid();
  const __m256i grid = _mm256_set_m128i(g, g);
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_NVFP4; ++i) {
    for (int h = 0; h < 2; ++h) {
      const __m256i c = nvfp4_half_codes(x[i].qs + 16 * h, grid);
      float* out = dst + i * kQK_NVFP4 + h * 32;
      store_16<false>(_mm256_castsi256_si128(c), _mm256_set1_ps(ue4m3_to_f32(x[i].d[2 * h]) * 0.5f), zero, out);
      store_16<false>(_mm256_extracti128_si256(c, 1), _mm256_set1_ps(ue4m3_to_f32(x[i].d[2 * h + 1]) * 0.5f), zero,
                      out + 16);
    }
  }
}

#else  // generic targets: the scalar references

void VecDotMXFP4(int64_t n, float* s, const void* x, const void* y) { vec_dot_mxfp4_q8_0_ref(n, s, x, y); }
void VecDotNVFP4(int64_t n, float* s, const void* x, const void* y) { vec_dot_nvfp4_q8_0_ref(n, s, x, y); }
void ToFloatMXFP4(const void* src, float* dst, int64_t n) { dequantize_mxfp4_ref(src, dst, n); }
void ToFloatNVFP4(const void* src, float* dst, int64_t n) { dequantize_nvfp4_ref(src, dst, n); }

#endif  // FRUGAL_QUANT_AVX2

}  // namespace frugal::quant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace frugal::quant::fast {

HWY_EXPORT(VecDotMXFP4);
HWY_EXPORT(VecDotNVFP4);
HWY_EXPORT(ToFloatMXFP4);
HWY_EXPORT(ToFloatNVFP4);

void vec_dot_mxfp4(int64_t n, float* s, const void* x, const void* y) { HWY_DYNAMIC_DISPATCH(VecDotMXFP4)(n, s, x, y); }
void vec_dot_nvfp4(int64_t n, float* s, const void* x, const void* y) { HWY_DYNAMIC_DISPATCH(VecDotNVFP4)(n, s, x, y); }
void to_float_mxfp4(const void* src, float* dst, int64_t n) { HWY_DYNAMIC_DISPATCH(ToFloatMXFP4)(src, dst, n); }
void to_float_nvfp4(const void* src, float* dst, int64_t n) { HWY_DYNAMIC_DISPATCH(ToFloatNVFP4)(src, dst, n); }

}  // namespace frugal::quant::fast
#endif  // HWY_ONCE
