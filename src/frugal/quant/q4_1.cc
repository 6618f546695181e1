// Q4_1: blocks of 32 4-bit codes with fp16 scale and offset; y = d*q + m, m = block minimum.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "frugal/core/half.h"
#include "frugal/quant/blocks.h"
#include "frugal/quant/kquant_search.h"
#include "frugal/quant/ref_util.h"
#include "frugal/quant/reference.h"

namespace frugal::quant {

void dequantize_q4_1_ref(const void* src, float* dst, int64_t n) {
  const BlockQ4_1* b = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_f32(b[i].d);
    const float m = fp16_to_f32(b[i].m);
    float* y = dst + i * kQK;
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * (b[i].qs[j] & 0xF) + m;
      y[j + 16] = d * (b[i].qs[j] >> 4) + m;
    }
  }
}

void quantize_q4_1_ref(const float* src, void* dst, int64_t n) {
  BlockQ4_1* b = static_cast<BlockQ4_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    float min = FLT_MAX;
    float max = -FLT_MAX;
    for (int j = 0; j < kQK; ++j) {
      min = std::min(min, x[j]);
      max = std::max(max, x[j]);
    }
    const float d = (max - min) / 15.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    b[i].d = f32_to_fp16(d);
    b[i].m = f32_to_fp16(min);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - min) * id + 0.5f)));
      const int hi =
          std::min(15, static_cast<int>(static_cast<int8_t>((x[j + 16] - min) * id + 0.5f)));
      b[i].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

// With an importance matrix: per row, weights qw*sqrt(sigma2 + x^2) and a weighted scale-and-min
// search per block; the codes are the search's.
void quantize_rows_q4_1(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* importance) {
  if (importance == nullptr) return quantize_q4_1_ref(src, dst, nrows * n_per_row);
  BlockQ4_1* b = static_cast<BlockQ4_1*>(dst);
  for (int64_t r = 0; r < nrows; ++r) {
    const float* x = src + r * n_per_row;
  float sum_x2 = 0.f;
  for (int64_t j = 0; j < n_per_row; ++j) sum_x2 += x[j] * x[j];
  const float sigma2 = sum_x2 / n_per_row;
    for (int64_t i = 0; i < n_per_row / kQK; ++i, ++b) {
      const float* xb = x + i * kQK;
      float w[kQK];
      for (int j = 0; j < kQK; ++j) w[j] = importance[i * kQK + j] * std::sqrt(sigma2 + xb[j] * xb[j]);
      uint8_t L[kQK];
      float min = 0.f;
      const float d = search_scale_min(kQK, 15, xb, w, L, &min, ScaleMinSearch{-0.9f, 0.05f, 36, false});
      b->d = f32_to_fp16(d);
      b->m = f32_to_fp16(-min);
      for (int j = 0; j < kQK / 2; ++j) b->qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
    }
  }
}

void vec_dot_q4_1_q8_1_ref(int64_t n, float* s, const void* x, const void* y) {
  const BlockQ4_1* bx = static_cast<const BlockQ4_1*>(x);
  const BlockQ8_1* by = static_cast<const BlockQ8_1*>(y);
  float sum = 0.f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int32_t sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += (bx[i].qs[j] & 0xF) * by[i].qs[j];
      sumi += (bx[i].qs[j] >> 4) * by[i].qs[j + 16];
    }
    sum += (fp16_to_f32(bx[i].d) * fp16_to_f32(by[i].d)) * static_cast<float>(sumi) +
           fp16_to_f32(bx[i].m) * fp16_to_f32(by[i].s);
  }
  *s = sum;
}

}  // namespace frugal::quant
