// Q5_0: Q4_0 with a fifth bit per element in qh (bit e of a LE u32); y = d*(q - 16), d = max/-16.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "frugal/core/half.h"
#include "frugal/quant/blocks.h"
#include "frugal/quant/ref_util.h"
#include "frugal/quant/kquant_search.h"
#include "frugal/quant/reference.h"

namespace frugal::quant {
void dequantize_q5_0_ref(const void* src, float* dst, int64_t n) {
  const BlockQ5_0* b = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    int q[kQK];
    unpack_codes_q5(b[i].qs, b[i].qh, q);
    const float d = fp16_to_f32(b[i].d);
    for (int j = 0; j < kQK; ++j) dst[i * kQK + j] = d * (q[j] - 16);
  }
}

void quantize_q5_0_ref(const float* src, void* dst, int64_t n) {
  BlockQ5_0* b = static_cast<BlockQ5_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    const float d = signed_absmax(x, kQK) / -16.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    b[i].d = f32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f)));
      const int hi = std::min(31, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 16.5f)));
      b[i].qs[j] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      qh |= static_cast<uint32_t>(lo >> 4) << j;
      qh |= static_cast<uint32_t>(hi >> 4) << (j + 16);
    }
    std::memcpy(b[i].qh, &qh, 4);
  }
}

// With an importance matrix: as Q4_0's weighted path, 5-bit codes.
void quantize_rows_q5_0(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* importance) {
  if (importance == nullptr) return quantize_q5_0_ref(src, dst, nrows * n_per_row);
  BlockQ5_0* b = static_cast<BlockQ5_0*>(dst);
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
      b->d = f32_to_fp16(search_symmetric_scale(kQK, 16, xb, w, L));
      uint32_t qh = 0;
      for (int j = 0; j < kQK / 2; ++j) {
        b->qs[j] = static_cast<uint8_t>((L[j] & 0xF) | ((L[j + 16] & 0xF) << 4));
        qh |= static_cast<uint32_t>((L[j] >> 4) & 1) << j;
        qh |= static_cast<uint32_t>((L[j + 16] >> 4) & 1) << (j + 16);
      }
      std::memcpy(b->qh, &qh, 4);
    }
  }
}

void vec_dot_q5_0_q8_0_ref(int64_t n, float* s, const void* x, const void* y) {
  const BlockQ5_0* bx = static_cast<const BlockQ5_0*>(x);
  const BlockQ8_0* by = static_cast<const BlockQ8_0*>(y);
  float sum = 0.f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int q[kQK];
    unpack_codes_q5(bx[i].qs, bx[i].qh, q);
    int32_t sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += (q[j] - 16) * by[i].qs[j];
    sum += static_cast<float>(sumi) * (fp16_to_f32(bx[i].d) * fp16_to_f32(by[i].d));
  }
  *s = sum;
}

}  // namespace frugal::quant
