// Q4_K: super-blocks of 256 with 8 sub-blocks of 32; 4-bit codes, 6-bit sub-block scales and
// mins under fp16 super-scales: y = d*sc_j*q - dmin*m_j.
#include <algorithm>
#include <cmath>

#include "frugal/core/half.h"
#include "frugal/quant/blocks.h"
#include "frugal/quant/kquant_search.h"
#include "frugal/quant/ref_util.h"
#include "frugal/quant/reference.h"

namespace frugal::quant {
namespace {

// Chunk c = e/64 uses qs[32c..32c+31]: low nibbles for its first 32 elements, high for the rest.
void unpack_codes(const BlockQ4_K& b, int* q) {
  for (int e = 0; e < kQK_K; ++e) {
    const uint8_t byte = b.qs[32 * (e / 64) + e % 32];
    q[e] = (e % 64) < 32 ? (byte & 0xF) : (byte >> 4);
  }
}

// Codes against the scales as stored, then packed: chunk c of 64 elements fills qs[32c..32c+31],
// its first 32 in the low nibbles.
void store_codes(const float* x, BlockQ4_K* y, uint8_t* L) {
  const float dq = fp16_to_f32(y->d);
  const float dmq = fp16_to_f32(y->dmin);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc;
    uint8_t m;
    unpack_scale_min_k4(j, y->scales, &sc, &m);
    const float d = dq * sc;
    if (d == 0.f) continue;
    const float dm = dmq * m;
    for (int l = 0; l < 32; ++l) {
      L[32 * j + l] = static_cast<uint8_t>(clamp_int(nearest_int((x[32 * j + l] + dm) / d), 0, 15));
    }
  }
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      y->qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
  }
}

// Without an importance matrix: each sub-block's weights are its RMS plus |x|, and the 6-bit
// sub-scales are the sub-block scales rounded against the largest one.
void quantize_block(const float* x, BlockQ4_K* y) {
  uint8_t L[kQK_K];
  float weights[32];
  float scales[8];
  float mins[8];
  float max_scale = 0.f;
  float max_min = 0.f;
  for (int j = 0; j < 8; ++j) {
    const float* xb = x + 32 * j;
    float sum_x2 = 0.f;
    for (int l = 0; l < 32; ++l) sum_x2 += xb[l] * xb[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xb[l]);
    scales[j] = search_scale_min(32, 15, xb, weights, L + 32 * j, &mins[j],
                                 ScaleMinSearch{-1.f, 0.1f, 20, false});
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0.f ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0.f ? 63.f / max_min : 0.f;
  uint8_t ls[8];
  uint8_t lm[8];
  for (int j = 0; j < 8; ++j) {
    // Stored through uint8_t before the clamp, as ggml does.
    ls[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
    lm[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
  }
  pack_scale_min_k4(ls, lm, y->scales);
  y->d = f32_to_fp16(max_scale / 63.f);
  y->dmin = f32_to_fp16(max_min / 63.f);
  store_codes(x, y, L);
}

// With importance qw (256 column weights): weights qw*sqrt(sigma2 + x^2), a finer scale search,
// and the sub-scales and sub-mins themselves fitted by a weighted search on their 6-bit codes.
void quantize_block_weighted(const float* x, const float* qw, BlockQ4_K* y) {
  uint8_t L[kQK_K];
  float weights[32];
  float sw[8];
  float scales[8];
  float mins[8];
  float sum_x2 = 0.f;
  for (int l = 0; l < kQK_K; ++l) sum_x2 += x[l] * x[l];
  const float sigma2 = 2 * sum_x2 / kQK_K;
  for (int j = 0; j < 8; ++j) {
    const float* xb = x + 32 * j;
    for (int l = 0; l < 32; ++l) weights[l] = qw[32 * j + l] * std::sqrt(sigma2 + xb[l] * xb[l]);
    float sumw = 0.f;
    for (int l = 0; l < 32; ++l) sumw += weights[l];
    sw[j] = sumw;
    scales[j] = search_scale_min(32, 15, xb, weights, L + 32 * j, &mins[j],
                                 ScaleMinSearch{-0.9f, 0.05f, 36, false});
  }
  uint8_t ls[8];
  uint8_t lm[8];
  const float d_block = search_positive_scale(8, 63, scales, sw, ls);
  const float m_block = search_positive_scale(8, 63, mins, sw, lm);
  pack_scale_min_k4(ls, lm, y->scales);
  y->d = f32_to_fp16(d_block);
  y->dmin = f32_to_fp16(m_block);
  store_codes(x, y, L);
}

}  // namespace

void dequantize_q4_k_ref(const void* src, float* dst, int64_t n) {
  const BlockQ4_K* b = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int q[kQK_K];
    unpack_codes(b[i], q);
    const float d = fp16_to_f32(b[i].d);
    const float dmin = fp16_to_f32(b[i].dmin);
    for (int j = 0; j < 8; ++j) {
      uint8_t sc;
      uint8_t m;
      unpack_scale_min_k4(j, b[i].scales, &sc, &m);
      const float d1 = d * sc;
      const float m1 = dmin * m;
      for (int l = 0; l < 32; ++l) dst[i * kQK_K + 32 * j + l] = d1 * q[32 * j + l] - m1;
    }
  }
}

void quantize_q4_k_ref(const float* src, void* dst, int64_t n) {
  BlockQ4_K* b = static_cast<BlockQ4_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i) quantize_block(src + i * kQK_K, &b[i]);
}

void quantize_rows_q4_k(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* importance) {
  BlockQ4_K* b = static_cast<BlockQ4_K*>(dst);
  if (importance == nullptr) return quantize_q4_k_ref(src, dst, nrows * n_per_row);
  for (int64_t r = 0; r < nrows; ++r) {
    for (int64_t i = 0; i < n_per_row / kQK_K; ++i) {
      quantize_block_weighted(src + r * n_per_row + i * kQK_K, importance + i * kQK_K, b++);
    }
  }
}

void vec_dot_q4_k_q8_k_ref(int64_t n, float* s, const void* x, const void* y) {
  const BlockQ4_K* bx = static_cast<const BlockQ4_K*>(x);
  const BlockQ8_K* by = static_cast<const BlockQ8_K*>(y);
  float sum = 0.f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int q[kQK_K];
    unpack_codes(bx[i], q);
    int32_t isum = 0;
    int32_t msum = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc;
      uint8_t m;
      unpack_scale_min_k4(j, bx[i].scales, &sc, &m);
      int32_t sub = 0;
      for (int l = 0; l < 32; ++l) sub += q[32 * j + l] * by[i].qs[32 * j + l];
      isum += sc * sub;
      msum += m * (by[i].bsums[2 * j] + by[i].bsums[2 * j + 1]);
    }
    sum += fp16_to_f32(bx[i].d) * by[i].d * static_cast<float>(isum) -
           fp16_to_f32(bx[i].dmin) * by[i].d * static_cast<float>(msum);
  }
  *s = sum;
}

}  // namespace frugal::quant
