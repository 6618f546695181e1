// Q6_K: super-blocks of 256 with 16 sub-blocks of 16; 6-bit codes (low nibble in ql, high two
// bits in qh) and int8 sub-block scales: y = d*scale_j*(q - 32).
#include <cmath>
#include <cstring>

#include "frugal/core/half.h"
#include "frugal/quant/blocks.h"
#include "frugal/quant/kquant_search.h"
#include "frugal/quant/ref_util.h"
#include "frugal/quant/reference.h"

namespace frugal::quant {
namespace {

// h = e/128, k = (e%128)/32, l = e%32: low nibble from ql[64h + 32*(k&1) + l] (high nibble
// when k >= 2), high bits 2k..2k+1 of qh[32h + l].
void unpack_codes(const BlockQ6_K& b, int* q) {
  for (int e = 0; e < kQK_K; ++e) {
    const int h = e / 128;
    const int k = (e % 128) / 32;
    const int l = e % 32;
    const uint8_t lbyte = b.ql[64 * h + 32 * (k & 1) + l];
    const int lo = k >= 2 ? (lbyte >> 4) : (lbyte & 0xF);
    const int hi = (b.qh[32 * h + l] >> (2 * k)) & 3;
    q[e] = (lo | (hi << 4)) - 32;
  }
}

// qw: importance (the raw column weights, unlike the other K-quants) or nullptr (weights x^2).
void quantize_block(const float* x, const float* qw, BlockQ6_K* y) {
  int8_t L[kQK_K];
  float scales[16];
  float max_scale = 0.f;
  float amax = 0.f;
  for (int j = 0; j < 16; ++j) {
    scales[j] = search_symmetric_scale(16, 32, x + 16 * j, qw ? qw + 16 * j : nullptr, L + 16 * j);
    if (std::fabs(scales[j]) > amax) {
      amax = std::fabs(scales[j]);
      max_scale = scales[j];
    }
  }
  if (amax < 1e-15f) {
    std::memset(y, 0, sizeof(*y));
    return;
  }
  const float iscale = -128.f / max_scale;
  y->d = f32_to_fp16(1.f / iscale);
  for (int j = 0; j < 16; ++j) {
    y->scales[j] = static_cast<int8_t>(clamp_int(nearest_int(iscale * scales[j]), -128, 127));
  }
  const float dq = fp16_to_f32(y->d);
  for (int j = 0; j < 16; ++j) {
    const float d = dq * y->scales[j];
    if (d == 0.f) continue;
    for (int l = 0; l < 16; ++l) {
      L[16 * j + l] = static_cast<int8_t>(clamp_int(nearest_int(x[16 * j + l] / d), -32, 31) + 32);
    }
  }
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const int8_t* s = L + 128 * h + l;
      y->ql[64 * h + l] = static_cast<uint8_t>((s[0] & 0xF) | ((s[64] & 0xF) << 4));
      y->ql[64 * h + 32 + l] = static_cast<uint8_t>((s[32] & 0xF) | ((s[96] & 0xF) << 4));
      y->qh[32 * h + l] = static_cast<uint8_t>((s[0] >> 4) | ((s[32] >> 4) << 2) |
                                               ((s[64] >> 4) << 4) | ((s[96] >> 4) << 6));
    }
  }
}

}  // namespace

void dequantize_q6_k_ref(const void* src, float* dst, int64_t n) {
  const BlockQ6_K* b = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int q[kQK_K];
    unpack_codes(b[i], q);
    const float d = fp16_to_f32(b[i].d);
    for (int e = 0; e < kQK_K; ++e) dst[i * kQK_K + e] = d * b[i].scales[e / 16] * q[e];
  }
}

void quantize_q6_k_ref(const float* src, void* dst, int64_t n) {
  BlockQ6_K* b = static_cast<BlockQ6_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i) quantize_block(src + i * kQK_K, nullptr, &b[i]);
}

void quantize_rows_q6_k(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* importance) {
  BlockQ6_K* b = static_cast<BlockQ6_K*>(dst);
  for (int64_t r = 0; r < nrows; ++r) {
    for (int64_t i = 0; i < n_per_row / kQK_K; ++i) {
      quantize_block(src + r * n_per_row + i * kQK_K, importance ? importance + i * kQK_K : nullptr, b++);
    }
  }
}

void vec_dot_q6_k_q8_k_ref(int64_t n, float* s, const void* x, const void* y) {
  const BlockQ6_K* bx = static_cast<const BlockQ6_K*>(x);
  const BlockQ8_K* by = static_cast<const BlockQ8_K*>(y);
  float sum = 0.f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int q[kQK_K];
    unpack_codes(bx[i], q);
    int32_t isum = 0;
    for (int j = 0; j < 16; ++j) {
      int32_t sub = 0;
      for (int l = 0; l < 16; ++l) sub += q[16 * j + l] * by[i].qs[16 * j + l];
      isum += bx[i].scales[j] * sub;
    }
    sum += fp16_to_f32(bx[i].d) * by[i].d * static_cast<float>(isum);
  }
  *s = sum;
}

}  // namespace frugal::quant
