// Q3_K: super-blocks of 256 with 16 sub-blocks of 16; 3-bit signed codes (2 low bits in qs,
// the third in hmask) and signed 6-bit sub-block scales: y = d*s_j*q, q in [-4, 3].
#include <cmath>
#include <cstring>

#include "frugal/core/half.h"
#include "frugal/quant/blocks.h"
#include "frugal/quant/kquant_search.h"
#include "frugal/quant/ref_util.h"
#include "frugal/quant/reference.h"

namespace frugal::quant {
namespace {

void unpack_codes(const BlockQ3_K& b, int* q) {
  for (int e = 0; e < kQK_K; ++e) {
    const int low = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    const bool high = (b.hmask[e % 32] >> (e / 32)) & 1;
    q[e] = low - (high ? 0 : 4);
  }
}

// Codes against the scales as stored (offset +4; a sub-block whose scale is zero keeps the codes
// of its search), the third bit moved to hmask and the low two bits packed four to a byte.
void store_codes(const float* x, BlockQ3_K* y, int8_t* L) {
  int8_t qscales[16];
  unpack_scales_q3_k(y->scales, qscales);
  const float dq = fp16_to_f32(y->d);
  for (int j = 0; j < 16; ++j) {
    const float d = dq * qscales[j];
    if (d == 0.f) continue;
    for (int l = 0; l < 16; ++l) {
      L[16 * j + l] = static_cast<int8_t>(clamp_int(nearest_int(x[16 * j + l] / d), -4, 3) + 4);
    }
  }
  std::memset(y->hmask, 0, sizeof(y->hmask));
  for (int e = 0; e < kQK_K; ++e) {
    if (L[e] > 3) {
      y->hmask[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
      L[e] -= 4;
    }
  }
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const int8_t* s = L + 128 * h + l;
      y->qs[32 * h + l] = static_cast<uint8_t>(s[0] | (s[32] << 2) | (s[64] << 4) | (s[96] << 6));
    }
  }
}

void quantize_block(const float* x, BlockQ3_K* y) {
  int8_t L[kQK_K];
  float scales[16];
  float max_scale = 0.f;
  float amax = 0.f;
  for (int j = 0; j < 16; ++j) {
    scales[j] = search_symmetric_scale_iterative(16, 4, x + 16 * j, L + 16 * j);
    if (std::fabs(scales[j]) > amax) {
      amax = std::fabs(scales[j]);
      max_scale = scales[j];
    }
  }
  if (max_scale != 0.f) {
    const float iscale = -32.f / max_scale;
    int8_t qscales[16];
    for (int j = 0; j < 16; ++j)
      qscales[j] = static_cast<int8_t>(clamp_int(nearest_int(iscale * scales[j]), -32, 31));
    pack_scales_q3_k(qscales, y->scales);
    y->d = f32_to_fp16(1.f / iscale);
  } else {
    // All-zero packed bytes (not the packing of zero scales), as ggml writes an all-zero block.
    std::memset(y->scales, 0, sizeof(y->scales));
    y->d = 0;
  }
  store_codes(x, y, L);
}

// With importance qw: weights qw*sqrt(sigma2 + x^2) in each sub-block's search, and the 6-bit
// sub-scales fitted by a weighted symmetric search whose weights are each sub-block's weight sum
// (one pass in element order, as ggml sums it: the rounding of these sums decides ties).
void quantize_block_weighted(const float* x, const float* qw, BlockQ3_K* y) {
  int8_t L[kQK_K];
  float weights[16];
  float sw[16];
  float scales[16];
  float sum_x2 = 0.f;
  for (int l = 0; l < kQK_K; ++l) sum_x2 += x[l] * x[l];
  const float sigma2 = 2 * sum_x2 / kQK_K;
  for (int j = 0; j < 16; ++j) {
    const float* xb = x + 16 * j;
    for (int l = 0; l < 16; ++l) weights[l] = qw[16 * j + l] * std::sqrt(sigma2 + xb[l] * xb[l]);
    float sumw = 0.f;
    for (int l = 0; l < 16; ++l) sumw += weights[l];
    sw[j] = sumw;
    scales[j] = search_symmetric_scale(16, 4, xb, weights, L + 16 * j);
  }
  int8_t ls[16];
  const float d_block = search_symmetric_scale(16, 32, scales, sw, ls);
  int8_t qscales[16];
  for (int j = 0; j < 16; ++j) qscales[j] = static_cast<int8_t>(ls[j] - 32);
  pack_scales_q3_k(qscales, y->scales);
  y->d = f32_to_fp16(d_block);
  store_codes(x, y, L);
}

}  // namespace

void dequantize_q3_k_ref(const void* src, float* dst, int64_t n) {
  const BlockQ3_K* b = static_cast<const BlockQ3_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int q[kQK_K];
    int8_t sc[16];
    unpack_codes(b[i], q);
    unpack_scales_q3_k(b[i].scales, sc);
    const float d = fp16_to_f32(b[i].d);
    for (int e = 0; e < kQK_K; ++e) dst[i * kQK_K + e] = d * sc[e / 16] * q[e];
  }
}

void quantize_q3_k_ref(const float* src, void* dst, int64_t n) {
  BlockQ3_K* b = static_cast<BlockQ3_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i) quantize_block(src + i * kQK_K, &b[i]);
}

void quantize_rows_q3_k(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* importance) {
  BlockQ3_K* b = static_cast<BlockQ3_K*>(dst);
  if (importance == nullptr) return quantize_q3_k_ref(src, dst, nrows * n_per_row);
  for (int64_t r = 0; r < nrows; ++r) {
    for (int64_t i = 0; i < n_per_row / kQK_K; ++i) {
      quantize_block_weighted(src + r * n_per_row + i * kQK_K, importance + i * kQK_K, b++);
    }
  }
}

void vec_dot_q3_k_q8_k_ref(int64_t n, float* s, const void* x, const void* y) {
  const BlockQ3_K* bx = static_cast<const BlockQ3_K*>(x);
  const BlockQ8_K* by = static_cast<const BlockQ8_K*>(y);
  float sum = 0.f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int q[kQK_K];
    int8_t sc[16];
    unpack_codes(bx[i], q);
    unpack_scales_q3_k(bx[i].scales, sc);
    int32_t isum = 0;
    for (int j = 0; j < 16; ++j) {
      int32_t sub = 0;
      for (int l = 0; l < 16; ++l) sub += q[16 * j + l] * by[i].qs[16 * j + l];
      isum += sc[j] * sub;
    }
    sum += fp16_to_f32(bx[i].d) * by[i].d * static_cast<float>(isum);
  }
  *s = sum;
}

}  // namespace frugal::quant
