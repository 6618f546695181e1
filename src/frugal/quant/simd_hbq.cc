// Dequantization and dot products (against Q8_0 activations) of HBQ-A and HBQ-E. Each 32-element
// group of a block lines up with one Q8_0 block: the E2M1 codes become signed bytes by a shuffle
// of the doubled-value table (as MXFP4, simd_fp4.cc) and the integer dot gives 8 int32 lanes of 4
// elements each. HBQ-A's micro-blocks of 8 are lane pairs: the multipliers (a variable shift picks
// each pair's 2-bit code, a lane permute its value) replace the ones of the final int16 -> int32
// multiply-add, so they cost nothing and the sums stay integer, as in the reference. HBQ-E's single multiplier per group goes into the float
// factor instead. The dots sum in a different order from the scalar references (lanes, FMA);
// dequantization is one exact multiply per element, equal to the references bit for bit.
#include "frugal/quant/simd_config.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "frugal/quant/simd_hbq.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "frugal/quant/blocks.h"
#include "frugal/quant/fp4_codes.h"
#include "frugal/quant/hbq.h"
#include "frugal/quant/simd_common-inl.h"
#include "frugal/quant/simd_kernels.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace frugal::quant::HWY_NAMESPACE {

#if FRUGAL_QUANT_AVX2

HWY_INLINE __m256i hbq_grid() {
  const __m128i g = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kE2M1Doubled));
  return _mm256_set_m128i(g, g);
}

// The block's four multipliers twice, each in both int16 halves of its int32 lane, so that a lane
// permute by a 2-bit code picks one for both halves.
HWY_INLINE __m256i hbq_alphas(uint8_t set) {
  const int32_t* a = kHbqAlphaEighths[hbq_set_index(set)];
  const auto both = [](int32_t v) { return v | (v << 16); };
  return _mm256_setr_epi32(both(a[0]), both(a[1]), both(a[2]), both(a[3]), both(a[0]), both(a[1]), both(a[2]),
                           both(a[3]));
}

// Multiplier of each int32 lane of a 32-element group of HBQ-A: lanes 2k and 2k+1 hold
// micro-block k of the group, whose code is bits 2k..2k+1 of the group's code byte.
HWY_INLINE __m256i hbq_a_lane_alphas(__m256i alphas, uint8_t code_byte) {
  const __m256i shifts = _mm256_setr_epi32(0, 0, 2, 2, 4, 4, 6, 6);
  const __m256i idx =
      _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(code_byte), shifts), _mm256_set1_epi32(3));
  return _mm256_permutevar8x32_epi32(alphas, idx);
}

float dot_hbq_a(int64_t n, const void* vx, const void* vy) {
  const auto* x = static_cast<const BlockHBQ_A*>(vx);
  const auto* y = static_cast<const BlockQ8_0*>(vy);
  const __m256i grid = hbq_grid();
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_HBQ; ++i) {
    const __m256i alphas = hbq_alphas(x[i].set);
    const float sv = ue5m3_to_f32(x[i].s) * 0.0625f;
    for (int g = 0; g < kQK_HBQ / kQK; ++g) {
      const BlockQ8_0& q8 = y[4 * i + g];
      const __m256i c = _mm256_shuffle_epi8(grid, nibbles_32(x[i].qs + 16 * g));
      // dot_i8_i8 with the multipliers in place of its madd's ones: each int32 lane is
      // alpha * (sum of two adjacent int16 pair sums), all four of its elements in one micro-block.
      // Pair sums are at most 2 * 12 * 127 and alpha at most 64: no overflow.
      const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(c, c), _mm256_sign_epi8(loadu_256(q8.qs), c));
      const __m256i scaled = _mm256_madd_epi16(pairs, hbq_a_lane_alphas(alphas, x[i].c[g]));
      acc = _mm256_fmadd_ps(_mm256_set1_ps(sv * half_to_float(q8.d)), _mm256_cvtepi32_ps(scaled), acc);
    }
  }
  return hsum_ps(acc);
}

float dot_hbq_e(int64_t n, const void* vx, const void* vy) {
  const auto* x = static_cast<const BlockHBQ_E*>(vx);
  const auto* y = static_cast<const BlockQ8_0*>(vy);
  const __m256i grid = hbq_grid();
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_HBQ; ++i) {
    const int32_t* alpha = kHbqAlphaEighths[hbq_set_index(x[i].set)];
    const float sv = ue5m3_to_f32(x[i].s) * 0.0625f;
    for (int g = 0; g < kQK_HBQ / kQK; ++g) {
      const BlockQ8_0& q8 = y[4 * i + g];
      const __m256i c = _mm256_shuffle_epi8(grid, nibbles_32(x[i].qs + 16 * g));
      const __m256i sums = dot_i8_i8(c, loadu_256(q8.qs));
      const float a = static_cast<float>(alpha[(x[i].c >> (2 * g)) & 3]);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(sv * a * half_to_float(q8.d)), _mm256_cvtepi32_ps(sums), acc);
    }
  }
  return hsum_ps(acc);
}

// 8 signed byte codes times one factor, stored as 8 floats.
HWY_INLINE void store_8(__m128i q, float d, float* out) {
  _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_set1_ps(d), bytes8_to_ps(q)));
}

void ToFloatHBQ_A(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockHBQ_A*>(src);
  const __m256i grid = hbq_grid();
  for (int64_t i = 0; i < n / kQK_HBQ; ++i) {
    const int32_t* alpha = kHbqAlphaEighths[hbq_set_index(x[i].set)];
    const float sv = ue5m3_to_f32(x[i].s) * 0.0625f;
    for (int g = 0; g < kQK_HBQ / kQK; ++g) {
      const __m256i c = _mm256_shuffle_epi8(grid, nibbles_32(x[i].qs + 16 * g));
      const __m128i lo = _mm256_castsi256_si128(c);
      const __m128i hi = _mm256_extracti128_si256(c, 1);
      const uint8_t cb = x[i].c[g];
      float* out = dst + i * kQK_HBQ + g * kQK;
      // The factor sv * alpha is exact (hbq.cc), so this is the reference's single rounding.
      store_8(lo, sv * static_cast<float>(alpha[cb & 3]), out);
      store_8(_mm_srli_si128(lo, 8), sv * static_cast<float>(alpha[(cb >> 2) & 3]), out + 8);
      store_8(hi, sv * static_cast<float>(alpha[(cb >> 4) & 3]), out + 16);
      store_8(_mm_srli_si128(hi, 8), sv * static_cast<float>(alpha[cb >> 6]), out + 24);
    }
  }
}

void ToFloatHBQ_E(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockHBQ_E*>(src);
  const __m256i grid = hbq_grid();
  for (int64_t i = 0; i < n / kQK_HBQ; ++i) {
    const int32_t* alpha = kHbqAlphaEighths[hbq_set_index(x[i].set)];
    const float sv = ue5m3_to_f32(x[i].s) * 0.0625f;
    for (int g = 0; g < kQK_HBQ / kQK; ++g) {
      const __m256i c = _mm256_shuffle_epi8(grid, nibbles_32(x[i].qs + 16 * g));
      store_32<false>(c, sv * static_cast<float>(alpha[(x[i].c >> (2 * g)) & 3]), 0.f, dst + i * kQK_HBQ + g * kQK);
    }
  }
}

void VecDotHBQ_A(int64_t n, float* s, const void* x, const void* y) { *s = dot_hbq_a(n, x, y); }
void VecDotHBQ_E(int64_t n, float* s, const void* x, const void* y) { *s = dot_hbq_e(n, x, y); }

#else  // generic targets: the scalar references

void VecDotHBQ_A(int64_t n, float* s, const void* x, const void* y) { vec_dot_hbq_a_q8_0_ref(n, s, x, y); }
void VecDotHBQ_E(int64_t n, float* s, const void* x, const void* y) { vec_dot_hbq_e_q8_0_ref(n, s, x, y); }
void ToFloatHBQ_A(const void* src, float* dst, int64_t n) { dequantize_hbq_a_ref(src, dst, n); }
void ToFloatHBQ_E(const void* src, float* dst, int64_t n) { dequantize_hbq_e_ref(src, dst, n); }

#endif  // FRUGAL_QUANT_AVX2

}  // namespace frugal::quant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace frugal::quant::fast {

HWY_EXPORT(VecDotHBQ_A);
HWY_EXPORT(VecDotHBQ_E);
HWY_EXPORT(ToFloatHBQ_A);
HWY_EXPORT(ToFloatHBQ_E);

void vec_dot_hbq_a(int64_t n, float* s, const void* x, const void* y) { HWY_DYNAMIC_DISPATCH(VecDotHBQ_A)(n, s, x, y); }
void vec_dot_hbq_e(int64_t n, float* s, const void* x, const void* y) { HWY_DYNAMIC_DISPATCH(VecDotHBQ_E)(n, s, x, y); }
void to_float_hbq_a(const void* src, float* dst, int64_t n) { HWY_DYNAMIC_DISPATCH(ToFloatHBQ_A)(src, dst, n); }
void to_float_hbq_e(const void* src, float* dst, int64_t n) { HWY_DYNAMIC_DISPATCH(ToFloatHBQ_E)(src, dst, n); }

}  // namespace frugal::quant::fast
#endif  // HWY_ONCE
