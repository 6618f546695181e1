// IQ4_NL: blocks of 32 4-bit indices into a fixed non-linear grid, one fp16 scale:
// y = d*kIQ4NLValues[q]. The scale is a weighted least-squares fit (weights x^2) over a small
// grid of candidate scales that map the largest-magnitude element to either end of the grid.
#include <cmath>
#include <initializer_list>

#include "frugal/core/half.h"
#include "frugal/quant/blocks.h"
#include "frugal/quant/kquant_search.h"
#include "frugal/quant/ref_util.h"
#include "frugal/quant/reference.h"

namespace frugal::quant {
namespace {

constexpr int kTries = 7;  // candidates on each side of the end-point scale

void quantize_block(const float* x, BlockIQ4_NL* y) {
  const float max = signed_absmax(x, kQK);
  uint8_t L[kQK] = {};
  float d = 0.f;
  if (std::fabs(max) >= 1e-15f) {
    float best = 0.f;
    for (const int end : {0, 15}) {
      for (int t = -kTries; t <= kTries; ++t) {
        const float id = (kIQ4NLValues[end] + t) / max;
        float sumqx = 0.f;
        float sumq2 = 0.f;
        for (int j = 0; j < kQK; ++j) {
          const float q = kIQ4NLValues[nearest_table_index(kIQ4NLValues, 16, id * x[j])];
          const float w = x[j] * x[j];
          sumqx += w * q * x[j];
          sumq2 += w * q * q;
        }
        if (sumq2 > 0.f && sumqx * sumqx > best * sumq2) {
          d = sumqx / sumq2;
          best = d * sumqx;
        }
      }
    }
  }
  y->d = f32_to_fp16(d);
  const float dq = fp16_to_f32(y->d);
  if (dq != 0.f) {
    // Indices against the scale as stored: the nearest grid value for each element.
    const float id = 1.f / dq;
    for (int j = 0; j < kQK; ++j)
      L[j] = static_cast<uint8_t>(nearest_table_index(kIQ4NLValues, 16, id * x[j]));
  }
  for (int j = 0; j < kQK / 2; ++j) y->qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
}

}  // namespace

void dequantize_iq4_nl_ref(const void* src, float* dst, int64_t n) {
  const BlockIQ4_NL* b = static_cast<const BlockIQ4_NL*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_f32(b[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[i * kQK + j] = d * kIQ4NLValues[b[i].qs[j] & 0xF];
      dst[i * kQK + j + 16] = d * kIQ4NLValues[b[i].qs[j] >> 4];
    }
  }
}

void quantize_iq4_nl_ref(const float* src, void* dst, int64_t n) {
  BlockIQ4_NL* b = static_cast<BlockIQ4_NL*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) quantize_block(src + i * kQK, &b[i]);
}

void vec_dot_iq4_nl_q8_0_ref(int64_t n, float* s, const void* x, const void* y) {
  const BlockIQ4_NL* bx = static_cast<const BlockIQ4_NL*>(x);
  const BlockQ8_0* by = static_cast<const BlockQ8_0*>(y);
  float sum = 0.f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int32_t sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += kIQ4NLValues[bx[i].qs[j] & 0xF] * by[i].qs[j];
      sumi += kIQ4NLValues[bx[i].qs[j] >> 4] * by[i].qs[j + 16];
    }
    sum += (fp16_to_f32(bx[i].d) * fp16_to_f32(by[i].d)) * static_cast<float>(sumi);
  }
  *s = sum;
}

}  // namespace frugal::quant
