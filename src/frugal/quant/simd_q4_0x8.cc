// Q4_0 weights repacked in groups of 8 rows (BlockQ4_0x8, simd_kernels.h), for one-token products
// on AVX2: the 8 rows' partial sums live in the 8 lanes of one register, so each activation load
// (4 codes, broadcast) serves 8 rows, the 8 row scales are one fp16 load, and no horizontal sum
// is needed until a group's 8 results are stored together.
//
// Per block of 32 elements and 8 rows: 4 loads of 32 bytes (row r's bytes 4k..4k+3 in lane r);
// the low nibbles are elements 4k..4k+3 and the high nibbles elements 16+4k..16+4k+3, multiplied
// (maddubs: unsigned codes 0..15 x signed activation codes) by the matching 4 activation codes
// broadcast to every lane. The 8 products per lane are summed in 16 bits (|sum| <= 8 x 2 x 15 x
// 128 = 30720, no saturation), widened once, scaled by d_x * d_y; Q4_0's -8 is the group's c term.
#include "frugal/quant/simd_config.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "frugal/quant/simd_q4_0x8.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cstring>
#include <vector>

#include "frugal/core/half.h"
#include "frugal/quant/blocks.h"
#include "frugal/quant/simd_common-inl.h"
#include "frugal/quant/simd_kernels.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace frugal::quant::HWY_NAMESPACE {

using fast::BlockQ4_0x8;
using fast::Q8Group;

#if FRUGAL_QUANT_AVX2

HWY_INLINE __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm256_set1_epi32(v);
}

// Lane r: sum over the block of (row r's code) x (activation code), 8 int32 lanes.
HWY_INLINE __m256i block_sums(const BlockQ4_0x8& x, const int8_t* yq) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256i s = _mm256_setzero_si256();
  for (int k = 0; k < 4; ++k) {
    const __m256i p = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * k));
    const __m256i lo = _mm256_and_si256(p, m4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(p, 4), m4);
    s = _mm256_add_epi16(s, _mm256_maddubs_epi16(lo, bcast4(yq + 4 * k)));
    s = _mm256_add_epi16(s, _mm256_maddubs_epi16(hi, bcast4(yq + 16 + 4 * k)));
  }
  return _mm256_madd_epi16(s, _mm256_set1_epi16(1));
}

HWY_INLINE __m256 block_term(const BlockQ4_0x8& x, const Q8Group& g, int k) {
  const __m256 dx = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.d)));
  const __m256 t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_sums(x, g.qs + 32 * k)), _mm256_set1_ps(g.d[k]),
                                   _mm256_set1_ps(g.c[k]));
  return _mm256_mul_ps(dx, t);
}

void GemvQ4_0x8Impl(int64_t n, const void* vx, int64_t n_groups, const void* vy, float* y) {
  const int64_t nb = n / kQK;
  const auto* g = static_cast<const Q8Group*>(vy);
  for (int64_t gi = 0; gi < n_groups; ++gi) {
    const auto* x = static_cast<const BlockQ4_0x8*>(vx) + gi * nb;
    __m256 acc0 = _mm256_setzero_ps();
    __m256 acc1 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
      acc0 = _mm256_add_ps(acc0, block_term(x[b], g[b / 8], static_cast<int>(b % 8)));
      acc1 = _mm256_add_ps(acc1, block_term(x[b + 1], g[(b + 1) / 8], static_cast<int>((b + 1) % 8)));
    }
    if (b < nb) acc0 = _mm256_add_ps(acc0, block_term(x[b], g[b / 8], static_cast<int>(b % 8)));
    _mm256_storeu_ps(y + 8 * gi, _mm256_add_ps(acc0, acc1));
  }
}

// Rows of one group to floats: per block and step k, lane r's 4 bytes give row r's elements
// 4k..4k+3 (low nibbles) and 16+4k..16+4k+3 (high nibbles); two rows per 256-bit register.
void ToFloatQ4_0x8Impl(const void* vx, int64_t n, float* dst, int64_t ld) {
  const int64_t nb = n / kQK;
  const auto* x = static_cast<const BlockQ4_0x8*>(vx);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    const __m256 dx = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].d)));
    alignas(32) float d[8];
    _mm256_store_ps(d, dx);
    for (int k = 0; k < 4; ++k) {
      const __m256i p = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs + 32 * k));
      for (int half = 0; half < 2; ++half) {
        const __m256i codes = half == 0 ? _mm256_and_si256(p, m4) : _mm256_and_si256(_mm256_srli_epi16(p, 4), m4);
        const int64_t col = b * kQK + 16 * half + 4 * k;
        for (int pair = 0; pair < 4; ++pair) {
          // Bytes of rows 2*pair and 2*pair+1: 8 codes.
          const __m128i q = pair < 2 ? _mm256_castsi256_si128(codes) : _mm256_extracti128_si256(codes, 1);
          const __m128i q8 = (pair % 2 == 0) ? q : _mm_srli_si128(q, 8);
          const __m256 v = _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q8)), _mm256_set1_ps(8.f));
          const __m256 s = _mm256_setr_m128(_mm_set1_ps(d[2 * pair]), _mm_set1_ps(d[2 * pair + 1]));
          const __m256 w = _mm256_mul_ps(v, s);
          _mm_storeu_ps(dst + (2 * pair) * ld + col, _mm256_castps256_ps128(w));
          _mm_storeu_ps(dst + (2 * pair + 1) * ld + col, _mm256_extractf128_ps(w, 1));
        }
      }
    }
  }
}

bool Q4x8IsFast() { return true; }

#else  // the scalar definitions

void GemvQ4_0x8Impl(int64_t n, const void* vx, int64_t n_groups, const void* vy, float* y) {
  const int64_t nb = n / kQK;
  const auto* g = static_cast<const Q8Group*>(vy);
  for (int64_t gi = 0; gi < n_groups; ++gi) {
    const auto* x = static_cast<const BlockQ4_0x8*>(vx) + gi * nb;
    float acc[8] = {};
    for (int64_t b = 0; b < nb; ++b) {
      const Q8Group& gb = g[b / 8];
      const int k = static_cast<int>(b % 8);
      const int8_t* yq = gb.qs + 32 * k;
      for (int r = 0; r < 8; ++r) {
        int32_t s = 0;
        for (int j = 0; j < 16; ++j) {
          const uint8_t byte = x[b].qs[32 * (j / 4) + 4 * r + j % 4];
          s += (byte & 0x0F) * yq[j] + (byte >> 4) * yq[j + 16];
        }
        const float dx = fp16_to_f32(x[b].d[r]);
        acc[r] += dx * (static_cast<float>(s) * gb.d[k] + gb.c[k]);
      }
    }
    for (int r = 0; r < 8; ++r) y[8 * gi + r] = acc[r];
  }
}

void ToFloatQ4_0x8Impl(const void* vx, int64_t n, float* dst, int64_t ld) {
  const auto* x = static_cast<const BlockQ4_0x8*>(vx);
  for (int r = 0; r < 8; ++r) fast::to_float_q4_0x8_row(x, r, n, dst + r * ld);
}

bool Q4x8IsFast() { return false; }

#endif  // FRUGAL_QUANT_AVX2

int64_t Q4x8Target() { return HWY_TARGET; }

}  // namespace frugal::quant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace frugal::quant::fast {

HWY_EXPORT(GemvQ4_0x8Impl);
HWY_EXPORT(ToFloatQ4_0x8Impl);
HWY_EXPORT(Q4x8IsFast);
HWY_EXPORT(Q4x8Target);

void repack_q4_0x8(void* rows8, int64_t n) {
  const int64_t nb = n / kQK;
  const size_t bytes = static_cast<size_t>(8 * nb) * sizeof(BlockQ4_0);
  std::vector<BlockQ4_0> src(static_cast<size_t>(8 * nb));
  std::memcpy(src.data(), rows8, bytes);
  auto* dst = static_cast<BlockQ4_0x8*>(rows8);
  for (int64_t b = 0; b < nb; ++b) {
    BlockQ4_0x8 out;
    for (int r = 0; r < 8; ++r) {
      const BlockQ4_0& in = src[static_cast<size_t>(r * nb + b)];
      out.d[r] = in.d;
      for (int k = 0; k < 4; ++k) std::memcpy(out.qs + 32 * k + 4 * r, in.qs + 4 * k, 4);
    }
    std::memcpy(dst + b, &out, sizeof(out));
  }
}

void unpack_q4_0x8(const void* groups, int64_t n_groups, int64_t n, void* rows) {
  const int64_t nb = n / kQK;
  const auto* src = static_cast<const BlockQ4_0x8*>(groups);
  auto* dst = static_cast<BlockQ4_0*>(rows);
  for (int64_t g = 0; g < n_groups; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ4_0x8& in = src[g * nb + b];
      for (int r = 0; r < 8; ++r) {
        BlockQ4_0& out = dst[(g * 8 + r) * nb + b];
        out.d = in.d[r];
        for (int k = 0; k < 4; ++k) std::memcpy(out.qs + 4 * k, in.qs + 32 * k + 4 * r, 4);
      }
    }
  }
}

void to_float_q4_0x8_row(const void* group, int r, int64_t n, float* dst) {
  const auto* x = static_cast<const BlockQ4_0x8*>(group);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = fp16_to_f32(x[b].d[r]);
    for (int j = 0; j < 16; ++j) {
      const uint8_t byte = x[b].qs[32 * (j / 4) + 4 * r + j % 4];
      dst[b * kQK + j] = static_cast<float>((byte & 0x0F) - 8) * d;
      dst[b * kQK + j + 16] = static_cast<float>((byte >> 4) - 8) * d;
    }
  }
}

void to_float_q4_0x8(const void* group, int64_t n, float* dst, int64_t ld) {
  HWY_DYNAMIC_DISPATCH(ToFloatQ4_0x8Impl)(group, n, dst, ld);
}

void gemv_q4_0x8(int64_t n, const void* groups, int64_t n_groups, const void* act, float* y) {
  HWY_DYNAMIC_DISPATCH(GemvQ4_0x8Impl)(n, groups, n_groups, act, y);
}

bool q4_0x8_is_fast() { return HWY_DYNAMIC_DISPATCH(Q4x8IsFast)(); }

bool q4_0x8_repack_wins() {
  const int64_t t = HWY_DYNAMIC_DISPATCH(Q4x8Target)();
  return t == HWY_AVX2 || t == HWY_AVX3 || t == HWY_AVX3_DL;
}

}  // namespace frugal::quant::fast
#endif  // HWY_ONCE
