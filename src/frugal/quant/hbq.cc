// HBQ reference: quantizer, dequantizer and dot products against Q8_0 (formats in blocks.h and
// hbq.h). The quantizer, per 128-element block and per allowed multiplier set:
//   s0 = the smallest UE5M3 value >= amax / (6 * alpha_max), the scale at which nothing clips;
//   for each scale code in s0-2 .. s0+1, each micro-block takes the multiplier c whose elements,
//   rounded to E2M1 (nearest, ties to even, saturating at 6) at s * alpha_c, give the least
//   weighted squared error; the block keeps the (scale, set) of least total error.
// Searching a few codes around s0 rather than taking s0 alone: UE5M3 steps by up to 12.5%, and a
// slightly smaller scale that saturates the largest element can lower the error of the other
// 127; s0 is among the candidates, so the search never does worse than round-up on the weighted
// error it minimises. Ties keep the first candidate (smaller scale code, then the first set),
// so the bytes are deterministic.
#include "frugal/quant/hbq.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "frugal/core/half.h"
#include "frugal/quant/blocks.h"
#include "frugal/quant/fp4_codes.h"

namespace frugal::quant {
namespace {

constexpr int kGroups = kQK_HBQ / kQK;  // 32-element groups (one Q8_0 block each) per block
constexpr float kE2M1Max = 6.f;
constexpr int kScaleCodesBelow = 2;
constexpr int kScaleCodesAbove = 1;

const uint8_t* codes_of(const BlockHBQ_A& b) { return b.c; }
uint8_t* codes_of(BlockHBQ_A& b) { return b.c; }
const uint8_t* codes_of(const BlockHBQ_E& b) { return &b.c; }
uint8_t* codes_of(BlockHBQ_E& b) { return &b.c; }

inline int micro_code(const uint8_t* codes, int m) { return (codes[m / 4] >> (2 * (m % 4))) & 3; }

// Weighted squared error of n elements rounded to E2M1 at step d (d > 0).
float micro_error(const float* x, const float* w, int n, float d) {
  float err = 0.f;
  for (int j = 0; j < n; ++j) {
    const float v = d * e2m1_to_f32(e2m1_round_even(x[j] / d));
    const float diff = x[j] - v;
    err += (w != nullptr ? w[j] : 1.f) * diff * diff;
  }
  return err;
}

template <int kMicro, typename Block>
void quantize_block(const float* x, const float* w, HbqScaleStrategy strategy, Block* y) {
  constexpr int kMicros = kQK_HBQ / kMicro;
  float amax = 0.f;
  for (int j = 0; j < kQK_HBQ; ++j) amax = std::max(amax, std::fabs(x[j]));
  uint8_t* codes = codes_of(*y);
  std::fill(codes, codes + (kMicros + 3) / 4, uint8_t{0});
  std::fill(y->qs, y->qs + kQK_HBQ / 2, uint8_t{0});
  HbqAlphaSet sets[2] = {HbqAlphaSet::kSig2, HbqAlphaSet::kSig3};
  int n_sets = 2;
  if (strategy == HbqScaleStrategy::kPow2) {
    sets[0] = HbqAlphaSet::kPow2;
    n_sets = 1;
  } else if (strategy == HbqScaleStrategy::kInt) {
    sets[0] = HbqAlphaSet::kInt;
    n_sets = 1;
  }
  y->set = static_cast<uint8_t>(sets[0]);
  if (!(amax > 0.f)) {  // all zero: scale 0 decodes every element to 0
    y->s = 0;
    return;
  }
  float best_err = std::numeric_limits<float>::infinity();
  uint8_t best_s = 0;
  uint8_t best_c[kMicros] = {};
  for (int si = 0; si < n_sets; ++si) {
    const int32_t* alpha = kHbqAlphaEighths[static_cast<int>(sets[si])];
    const int s0 = ue5m3_ceil(amax / (kE2M1Max * static_cast<float>(alpha[3]) * 0.125f));
    for (int s = std::max(1, s0 - kScaleCodesBelow); s <= std::min(255, s0 + kScaleCodesAbove); ++s) {
      const float sv = ue5m3_to_f32(static_cast<uint8_t>(s));
      float total = 0.f;
      uint8_t c_here[kMicros];
      for (int m = 0; m < kMicros; ++m) {
        float best_m = std::numeric_limits<float>::infinity();
        c_here[m] = 0;
        for (int c = 0; c < 4; ++c) {
          const float d = sv * static_cast<float>(alpha[c]) * 0.125f;
          const float e = micro_error(x + m * kMicro, w != nullptr ? w + m * kMicro : nullptr, kMicro, d);
          if (e < best_m) {
            best_m = e;
            c_here[m] = static_cast<uint8_t>(c);
          }
        }
        total += best_m;
      }
      if (total < best_err || best_s == 0) {
        best_err = total;
        best_s = static_cast<uint8_t>(s);
        y->set = static_cast<uint8_t>(sets[si]);
        std::copy(c_here, c_here + kMicros, best_c);
      }
    }
  }
  y->s = best_s;
  const int32_t* alpha = kHbqAlphaEighths[y->set];
  const float sv = ue5m3_to_f32(best_s);
  uint8_t q[kQK_HBQ];
  for (int m = 0; m < kMicros; ++m) {
    codes[m / 4] = static_cast<uint8_t>(codes[m / 4] | (best_c[m] << (2 * (m % 4))));
    const float d = sv * static_cast<float>(alpha[best_c[m]]) * 0.125f;
    for (int j = 0; j < kMicro; ++j) q[m * kMicro + j] = e2m1_round_even(x[m * kMicro + j] / d);
  }
  for (int g = 0; g < kGroups; ++g) {
    for (int j = 0; j < kQK / 2; ++j) {
      y->qs[g * 16 + j] = static_cast<uint8_t>(q[g * kQK + j] | (q[g * kQK + j + kQK / 2] << 4));
    }
  }
}

template <int kMicro, typename Block>
void quantize_rows(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* importance,
                   HbqScaleStrategy strategy) {
  Block* b = static_cast<Block*>(dst);
  const int64_t per_row = n_per_row / kQK_HBQ;
  for (int64_t r = 0; r < nrows; ++r) {
    for (int64_t i = 0; i < per_row; ++i) {
      quantize_block<kMicro>(src + r * n_per_row + i * kQK_HBQ,
                             importance != nullptr ? importance + i * kQK_HBQ : nullptr, strategy,
                             &b[r * per_row + i]);
    }
  }
}

// Element value = (scale * alpha_eighths / 16) * doubled E2M1: the factor is exact in float (a
// 4-bit significand times a small integer, a power-of-two shift), so this product is the only
// rounding, and the SIMD dequantizer computes the same one.
template <int kMicro, typename Block>
void dequantize(const void* src, float* dst, int64_t n) {
  const Block* b = static_cast<const Block*>(src);
  for (int64_t i = 0; i < n / kQK_HBQ; ++i) {
    const float sv = ue5m3_to_f32(b[i].s) * 0.0625f;
    const int32_t* alpha = kHbqAlphaEighths[hbq_set_index(b[i].set)];
    const uint8_t* codes = codes_of(b[i]);
    float* out = dst + i * kQK_HBQ;
    for (int g = 0; g < kGroups; ++g) {
      for (int j = 0; j < kQK / 2; ++j) {
        const int e0 = g * kQK + j;
        const int e1 = e0 + kQK / 2;
        const uint8_t byte = b[i].qs[g * 16 + j];
        out[e0] = sv * static_cast<float>(alpha[micro_code(codes, e0 / kMicro)]) *
                  static_cast<float>(kE2M1Doubled[byte & 0xF]);
        out[e1] = sv * static_cast<float>(alpha[micro_code(codes, e1 / kMicro)]) *
                  static_cast<float>(kE2M1Doubled[byte >> 4]);
      }
    }
  }
}

// Per 32-element group: integer sum of alpha_eighths * doubled E2M1 * Q8 code (the paper's fixed-
// point accumulation within micro-blocks, then the small multiply), one float multiply-add.
template <int kMicro, typename Block>
void vec_dot(int64_t n, float* s, const void* x, const void* y) {
  const Block* bx = static_cast<const Block*>(x);
  const BlockQ8_0* by = static_cast<const BlockQ8_0*>(y);
  float sum = 0.f;
  for (int64_t i = 0; i < n / kQK_HBQ; ++i) {
    const int32_t* alpha = kHbqAlphaEighths[hbq_set_index(bx[i].set)];
    const uint8_t* codes = codes_of(bx[i]);
    const float sv = ue5m3_to_f32(bx[i].s) * 0.0625f;
    for (int g = 0; g < kGroups; ++g) {
      const BlockQ8_0& q8 = by[i * kGroups + g];
      int32_t sumi = 0;
      for (int j = 0; j < kQK / 2; ++j) {
        const int e0 = g * kQK + j;
        const int e1 = e0 + kQK / 2;
        const uint8_t byte = bx[i].qs[g * 16 + j];
        sumi += alpha[micro_code(codes, e0 / kMicro)] * kE2M1Doubled[byte & 0xF] * q8.qs[j];
        sumi += alpha[micro_code(codes, e1 / kMicro)] * kE2M1Doubled[byte >> 4] * q8.qs[j + kQK / 2];
      }
      sum += (sv * fp16_to_f32(q8.d)) * static_cast<float>(sumi);
    }
  }
  *s = sum;
}

}  // namespace

uint8_t ue5m3_ceil(float v) {
  if (!(v > ue5m3_to_f32(1))) return 1;  // also NaN
  const float* begin = kUE5M3Values.v + 1;
  const float* end = kUE5M3Values.v + 256;
  const float* it = std::lower_bound(begin, end, v);
  return it == end ? uint8_t{255} : static_cast<uint8_t>(it - kUE5M3Values.v);
}

void quantize_rows_hbq_a(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* importance,
                         HbqScaleStrategy strategy) {
  quantize_rows<kQK_HBQ_A_MICRO, BlockHBQ_A>(src, dst, nrows, n_per_row, importance, strategy);
}
void quantize_rows_hbq_e(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* importance,
                         HbqScaleStrategy strategy) {
  quantize_rows<kQK_HBQ_E_MICRO, BlockHBQ_E>(src, dst, nrows, n_per_row, importance, strategy);
}
void quantize_rows_hbq_a_sig(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* importance) {
  quantize_rows_hbq_a(src, dst, nrows, n_per_row, importance, HbqScaleStrategy::kSig);
}
void quantize_rows_hbq_e_sig(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* importance) {
  quantize_rows_hbq_e(src, dst, nrows, n_per_row, importance, HbqScaleStrategy::kSig);
}
void quantize_hbq_a_ref(const float* src, void* dst, int64_t n) { quantize_rows_hbq_a_sig(src, dst, 1, n, nullptr); }
void quantize_hbq_e_ref(const float* src, void* dst, int64_t n) { quantize_rows_hbq_e_sig(src, dst, 1, n, nullptr); }
void dequantize_hbq_a_ref(const void* src, float* dst, int64_t n) {
  dequantize<kQK_HBQ_A_MICRO, BlockHBQ_A>(src, dst, n);
}
void dequantize_hbq_e_ref(const void* src, float* dst, int64_t n) {
  dequantize<kQK_HBQ_E_MICRO, BlockHBQ_E>(src, dst, n);
}
void vec_dot_hbq_a_q8_0_ref(int64_t n, float* s, const void* x, const void* y) {
  vec_dot<kQK_HBQ_A_MICRO, BlockHBQ_A>(n, s, x, y);
}
void vec_dot_hbq_e_q8_0_ref(int64_t n, float* s, const void* x, const void* y) {
  vec_dot<kQK_HBQ_E_MICRO, BlockHBQ_E>(n, s, x, y);
}

}  // namespace frugal::quant
