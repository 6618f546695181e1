// Q4_0: blocks of 32 4-bit codes with one fp16 scale; y = d*(q - 8). The scale maps the
// signed element of largest magnitude to code 0 (d = max/-8).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "frugal/core/half.h"
#include "frugal/quant/blocks.h"
#include "frugal/quant/ref_util.h"
#include "frugal/quant/kquant_search.h"
#include "frugal/quant/reference.h"

namespace frugal::quant {

void dequantize_q4_0_ref(const void* src, float* dst, int64_t n) {
  const BlockQ4_0* b = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_f32(b[i].d);
    float* y = dst + i * kQK;
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * ((b[i].qs[j] & 0xF) - 8);
      y[j + 16] = d * ((b[i].qs[j] >> 4) - 8);
    }
  }
}

void quantize_q4_0_ref(const float* src, void* dst, int64_t n) {
  BlockQ4_0* b = static_cast<BlockQ4_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    const float d = signed_absmax(x, kQK) / -8.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    b[i].d = f32_to_fp16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      // Truncation after +8.5 is ggml's rounding; codes saturate at 15.
      const int lo = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
      const int hi = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 8.5f)));
      b[i].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

// With an importance matrix: per row, weights qw*sqrt(sigma2 + x^2) (sigma2 the row's mean
// square) and a weighted scale search per block; the codes are the search's (no second rounding).
void quantize_rows_q4_0(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* importance) {
  if (importance == nullptr) return quantize_q4_0_ref(src, dst, nrows * n_per_row);
  BlockQ4_0* b = static_cast<BlockQ4_0*>(dst);
  for (int64_t r = 0; r < nrows; ++r) {
    const float* x = src + r * n_per_row;
  float sum_x2 = 0.f;
  for (int64_t j = 0; j < n_per_row; ++j) sum_x2 += x[j] * x[j];
  const float sigma2 = sum_x2 / n_per_row;
    for (int64_t i = 0; i < n_per_row / kQK; ++i, ++b) {
      const float* xb = x + i * kQK;
      float w[kQK];
      for (int j = 0; j < kQK; ++j) w[j] = importance[i * kQK + j] * std::sqrt(sigma2 + xb[j] * xb[j]);
      int8_t L[kQK];
      b->d = f32_to_fp16(search_symmetric_scale(kQK, 8, xb, w, L));
      for (int j = 0; j < kQK / 2; ++j) b->qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
    }
  }
}

void vec_dot_q4_0_q8_0_ref(int64_t n, float* s, const void* x, const void* y) {
  const BlockQ4_0* bx = static_cast<const BlockQ4_0*>(x);
  const BlockQ8_0* by = static_cast<const BlockQ8_0*>(y);
  float sum = 0.f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int32_t sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += ((bx[i].qs[j] & 0xF) - 8) * by[i].qs[j];
      sumi += ((bx[i].qs[j] >> 4) - 8) * by[i].qs[j + 16];
    }
    sum += static_cast<float>(sumi) * (fp16_to_f32(bx[i].d) * fp16_to_f32(by[i].d));
  }
  *s = sum;
}

}  // namespace frugal::quant
