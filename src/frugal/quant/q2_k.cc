// Q2_K: super-blocks of 256 with 16 sub-blocks of 16; 2-bit codes, 4-bit sub-block scales and
// mins with fp16 super-scales: y = d*sc*q - dmin*m.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "frugal/core/half.h"
#include "frugal/quant/blocks.h"
#include "frugal/quant/kquant_search.h"
#include "frugal/quant/ref_util.h"
#include "frugal/quant/reference.h"

namespace frugal::quant {
namespace {

// Element e: bits 2*((e%128)/32) of qs[32*(e/128) + e%32].
void unpack_codes(const BlockQ2_K& b, int* q) {
  for (int e = 0; e < kQK_K; ++e)
    q[e] = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

// Codes against the scales as stored (a sub-block whose scale rounds to zero keeps the codes of
// its search), then packed four to a byte.
void store_codes(const float* x, BlockQ2_K* y, uint8_t* L) {
  const float dq = fp16_to_f32(y->d);
  const float dmq = fp16_to_f32(y->dmin);
  for (int j = 0; j < 16; ++j) {
    const float d = dq * (y->scales[j] & 0xF);
    if (d == 0.f) continue;
    const float dm = dmq * (y->scales[j] >> 4);
    for (int l = 0; l < 16; ++l) {
      L[16 * j + l] = static_cast<uint8_t>(clamp_int(nearest_int((x[16 * j + l] + dm) / d), 0, 3));
    }
  }
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t* s = L + 128 * h + l;
      y->qs[32 * h + l] = static_cast<uint8_t>(s[0] | (s[32] << 2) | (s[64] << 4) | (s[96] << 6));
    }
  }
}

void quantize_block(const float* x, BlockQ2_K* y) {
  uint8_t L[kQK_K];
  float weights[16];
  float scales[16];
  float mins[16];
  float max_scale = 0.f;
  float max_min = 0.f;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
    scales[j] = search_scale_min(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j],
                                 ScaleMinSearch{-0.5f, 0.1f, 15, true});
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  std::memset(y->scales, 0, sizeof(y->scales));
  if (max_scale > 0.f) {
    const float iscale = 15.f / max_scale;
    for (int j = 0; j < 16; ++j)
      y->scales[j] = static_cast<uint8_t>(std::min(15, nearest_int(iscale * scales[j])));
  }
  y->d = f32_to_fp16(max_scale / 15.f);
  if (max_min > 0.f) {
    const float iscale = 15.f / max_min;
    for (int j = 0; j < 16; ++j) {
      y->scales[j] |= static_cast<uint8_t>(std::min(15, nearest_int(iscale * mins[j])) << 4);
    }
  }
  y->dmin = f32_to_fp16(max_min / 15.f);
  store_codes(x, y, L);
}

// With importance qw: weights qw*sqrt(sigma2 + x^2), a finer search per sub-block, and the 4-bit
// sub-scales and sub-mins fitted by a weighted search of their own.
void quantize_block_weighted(const float* x, const float* qw, BlockQ2_K* y) {
  uint8_t L[kQK_K];
  float weights[16];
  float sw[16];
  float scales[16];
  float mins[16];
  float sum_x2 = 0.f;
  for (int l = 0; l < kQK_K; ++l) sum_x2 += x[l] * x[l];
  const float sigma2 = sum_x2 / kQK_K;
  for (int j = 0; j < 16; ++j) {
    const float* xb = x + 16 * j;
    for (int l = 0; l < 16; ++l) weights[l] = qw[16 * j + l] * std::sqrt(sigma2 + xb[l] * xb[l]);
    float sumw = 0.f;
    for (int l = 0; l < 16; ++l) sumw += weights[l];
    sw[j] = sumw;
    scales[j] = search_scale_min(16, 3, xb, weights, L + 16 * j, &mins[j],
                                 ScaleMinSearch{-0.9f, 0.05f, 36, false});
  }
  uint8_t ls[16];
  uint8_t lm[16];
  const float dm = search_positive_scale(16, 15, scales, sw, ls);
  const float mm = search_positive_scale(16, 15, mins, sw, lm);
  y->d = f32_to_fp16(dm);
  y->dmin = f32_to_fp16(mm);
  for (int j = 0; j < 16; ++j) y->scales[j] = static_cast<uint8_t>(ls[j] | (lm[j] << 4));
  store_codes(x, y, L);
}

}  // namespace

void dequantize_q2_k_ref(const void* src, float* dst, int64_t n) {
  const BlockQ2_K* b = static_cast<const BlockQ2_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int q[kQK_K];
    unpack_codes(b[i], q);
    const float d = fp16_to_f32(b[i].d);
    const float dmin = fp16_to_f32(b[i].dmin);
    for (int e = 0; e < kQK_K; ++e) {
      const uint8_t sm = b[i].scales[e / 16];
      dst[i * kQK_K + e] = d * (sm & 0xF) * q[e] - dmin * (sm >> 4);
    }
  }
}

void quantize_q2_k_ref(const float* src, void* dst, int64_t n) {
  BlockQ2_K* b = static_cast<BlockQ2_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i) quantize_block(src + i * kQK_K, &b[i]);
}

void quantize_rows_q2_k(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* importance) {
  BlockQ2_K* b = static_cast<BlockQ2_K*>(dst);
  if (importance == nullptr) return quantize_q2_k_ref(src, dst, nrows * n_per_row);
  for (int64_t r = 0; r < nrows; ++r) {
    for (int64_t i = 0; i < n_per_row / kQK_K; ++i) {
      quantize_block_weighted(src + r * n_per_row + i * kQK_K, importance + i * kQK_K, b++);
    }
  }
}

void vec_dot_q2_k_q8_k_ref(int64_t n, float* s, const void* x, const void* y) {
  const BlockQ2_K* bx = static_cast<const BlockQ2_K*>(x);
  const BlockQ8_K* by = static_cast<const BlockQ8_K*>(y);
  float sum = 0.f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int q[kQK_K];
    unpack_codes(bx[i], q);
    int32_t isum = 0;
    int32_t msum = 0;
    for (int j = 0; j < 16; ++j) {
      int32_t sub = 0;
      for (int l = 0; l < 16; ++l) sub += q[16 * j + l] * by[i].qs[16 * j + l];
      isum += (bx[i].scales[j] & 0xF) * sub;
      msum += (bx[i].scales[j] >> 4) * by[i].bsums[j];
    }
    sum += by[i].d * fp16_to_f32(bx[i].d) * static_cast<float>(isum) -
           by[i].d * fp16_to_f32(bx[i].dmin) * static_cast<float>(msum);
  }
  *s = sum;
}

}  // namespace frugal::quant
