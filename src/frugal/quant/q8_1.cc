// Q8_1: Q8_0 plus s = d*sum(q) in fp16, so that the offset term of Q4_1/Q5_1 dots costs one
// multiply per block. Activation side only.
#include <cmath>

#include "frugal/core/half.h"
#include "frugal/quant/blocks.h"
#include "frugal/quant/reference.h"

namespace frugal::quant {

void dequantize_q8_1_ref(const void* src, float* dst, int64_t n) {
  const BlockQ8_1* b = static_cast<const BlockQ8_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_f32(b[i].d);
    for (int j = 0; j < kQK; ++j) dst[i * kQK + j] = d * b[i].qs[j];
  }
}

void quantize_q8_1_ref(const float* src, void* dst, int64_t n) {
  BlockQ8_1* b = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    float amax = 0.f;
    for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    b[i].d = f32_to_fp16(d);
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      b[i].qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
      sum += b[i].qs[j];
    }
    b[i].s = f32_to_fp16(static_cast<float>(sum) * d);
  }
}

}  // namespace frugal::quant
