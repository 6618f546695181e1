// Q8_0: blocks of 32 int8 codes with one fp16 scale d = amax/127; y = d*q.
#include <cmath>

#include "frugal/core/half.h"
#include "frugal/quant/blocks.h"
#include "frugal/quant/reference.h"

namespace frugal::quant {

void dequantize_q8_0_ref(const void* src, float* dst, int64_t n) {
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_f32(b[i].d);
    for (int j = 0; j < kQK; ++j) dst[i * kQK + j] = d * b[i].qs[j];
  }
}

void quantize_q8_0_ref(const float* src, void* dst, int64_t n) {
  BlockQ8_0* b = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    float amax = 0.f;
    for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    b[i].d = f32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) b[i].qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
  }
}

void vec_dot_q8_0_q8_0_ref(int64_t n, float* s, const void* x, const void* y) {
  const BlockQ8_0* bx = static_cast<const BlockQ8_0*>(x);
  const BlockQ8_0* by = static_cast<const BlockQ8_0*>(y);
  float sum = 0.f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int32_t sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += bx[i].qs[j] * by[i].qs[j];
    sum += static_cast<float>(sumi) * (fp16_to_f32(bx[i].d) * fp16_to_f32(by[i].d));
  }
  *s = sum;
}

}  // namespace frugal::quant
