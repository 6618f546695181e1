// MXFP4 (OCP Microscaling FP4): blocks of 32 E2M1 codes sharing one E8M0 scale,
// x = 2^(e-127) * E2M1[q]. The scale rule is ggml's (quantize_row_mxfp4_ref): e = floor(log2 amax)
// - 2 + 127, so amax maps into [4, 8) of the E2M1 range and values above 6 saturate; each element
// then takes the nearest representable value, ties to the smaller magnitude (the first index of
// an ascending search wins). Unlike ggml the exponent is clamped to [0, 254], so denormal or
// infinite inputs give a defined byte instead of an out-of-range float-to-integer conversion.
#include <algorithm>
#include <cmath>

#include "frugal/core/half.h"
#include "frugal/quant/blocks.h"
#include "frugal/quant/fp4_codes.h"
#include "frugal/quant/reference.h"

namespace frugal::quant {
namespace {

// Nearest of kE2M1Doubled[i] * d_half to x; ties keep the lower index (smaller magnitude).
uint8_t best_index(float x, float d_half) {
  int best = 0;
  float best_err = std::fabs(static_cast<float>(kE2M1Doubled[0]) * d_half - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(static_cast<float>(kE2M1Doubled[i]) * d_half - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best);
}

void quantize_block(const float* x, BlockMXFP4* y) {
  float amax = 0.f;
  for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
  uint8_t e = 0;
  if (amax > 0.f) {
    const float biased = std::floor(std::log2(amax)) - 2.f + 127.f;
    e = static_cast<uint8_t>(std::clamp(biased, 0.f, 254.f));
  }
  const float d_half = e8m0_to_f32_half(e);
  y->e = e;
  for (int j = 0; j < kQK / 2; ++j) {
    y->qs[j] = static_cast<uint8_t>(best_index(x[j], d_half) | (best_index(x[j + kQK / 2], d_half) << 4));
  }
}

}  // namespace

void dequantize_mxfp4_ref(const void* src, float* dst, int64_t n) {
  const BlockMXFP4* b = static_cast<const BlockMXFP4*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d_half = e8m0_to_f32_half(b[i].e);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[i * kQK + j] = d_half * static_cast<float>(kE2M1Doubled[b[i].qs[j] & 0xF]);
      dst[i * kQK + j + kQK / 2] = d_half * static_cast<float>(kE2M1Doubled[b[i].qs[j] >> 4]);
    }
  }
}

void quantize_mxfp4_ref(const float* src, void* dst, int64_t n) {
  BlockMXFP4* b = static_cast<BlockMXFP4*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) quantize_block(src + i * kQK, &b[i]);
}

// Integer sums of doubled E2M1 values times Q8_0 codes, one float multiply-add per block:
// exact up to the float rounding of the per-block product and of the running sum.
void vec_dot_mxfp4_q8_0_ref(int64_t n, float* s, const void* x, const void* y) {
  const BlockMXFP4* bx = static_cast<const BlockMXFP4*>(x);
  const BlockQ8_0* by = static_cast<const BlockQ8_0*>(y);
  float sum = 0.f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int32_t sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += kE2M1Doubled[bx[i].qs[j] & 0xF] * by[i].qs[j];
      sumi += kE2M1Doubled[bx[i].qs[j] >> 4] * by[i].qs[j + kQK / 2];
    }
    sum += (e8m0_to_f32_half(bx[i].e) * fp16_to_f32(by[i].d)) * static_cast<float>(sumi);
  }
  *s = sum;
}

}  // namespace frugal::quant
