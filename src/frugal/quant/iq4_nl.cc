// IQ4_NL: blocks of 32 4-bit indices into a fixed non-linear grid, one fp16 scale:
// y = d*kIQ4NLValues[q]. The scale is a weighted least-squares fit over 15 candidate scales that
// map the largest-magnitude element near the grid's negative end; weights are x^2, or with an
// importance matrix qw*sqrt(sigma2 + x^2). This is the search llama-quantize runs (ggml's
// quantize_iq4_nl); ggml's own row reference tries no candidates, so files follow the former.
#include <cmath>

#include "frugal/core/half.h"
#include "frugal/quant/blocks.h"
#include "frugal/quant/kquant_search.h"
#include "frugal/quant/ref_util.h"
#include "frugal/quant/reference.h"

namespace frugal::quant {
namespace {

constexpr int kTries = 7;  // candidates on each side of the end-point scale

void quantize_block(const float* x, const float* qw, BlockIQ4_NL* y) {
  float sigma2 = 0.f;
  for (int j = 0; j < kQK; ++j) sigma2 += x[j] * x[j];
  sigma2 *= 2.f / kQK;
  float w[kQK];
  for (int j = 0; j < kQK; ++j) w[j] = qw ? qw[j] * std::sqrt(sigma2 + x[j] * x[j]) : x[j] * x[j];
  const float max = signed_absmax(x, kQK);
  float d = 0.f;
  if (std::fabs(max) >= 1e-15f) {
    const int grid_end = kIQ4NLValues[0];  // -127: the largest magnitude maps near this end
    auto fit = [&](float id, float* sumqx, float* sumq2) {
      *sumqx = 0.f;
      *sumq2 = 0.f;
      for (int j = 0; j < kQK; ++j) {
        const float q = kIQ4NLValues[nearest_table_index(kIQ4NLValues, 16, id * x[j])];
        *sumqx += w[j] * q * x[j];
        *sumq2 += w[j] * q * q;
      }
    };
    float sumqx;
    float sumq2;
    fit(1.f / (-max / static_cast<float>(grid_end)), &sumqx, &sumq2);
    d = sumqx / sumq2;
    float best = d * sumqx;
    for (int t = -kTries; t <= kTries; ++t) {
      fit(static_cast<float>(t + grid_end) / max, &sumqx, &sumq2);
      if (sumq2 > 0.f && sumqx * sumqx > best * sumq2) {
        d = sumqx / sumq2;
        best = d * sumqx;
      }
    }
  }
  y->d = f32_to_fp16(d);
  // Indices against the unrounded scale; an all-zero block gets the index nearest zero.
  const float id = d != 0.f ? 1.f / d : 0.f;
  uint8_t L[kQK];
  for (int j = 0; j < kQK; ++j) L[j] = static_cast<uint8_t>(nearest_table_index(kIQ4NLValues, 16, id * x[j]));
  for (int j = 0; j < kQK / 2; ++j) y->qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
}

}  // namespace

void dequantize_iq4_nl_ref(const void* src, float* dst, int64_t n) {
  const BlockIQ4_NL* b = static_cast<const BlockIQ4_NL*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_f32(b[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[i * kQK + j] = d * kIQ4NLValues[b[i].qs[j] & 0xF];
      dst[i * kQK + j + 16] = d * kIQ4NLValues[b[i].qs[j] >> 4];
    }
  }
}

void quantize_iq4_nl_ref(const float* src, void* dst, int64_t n) {
  BlockIQ4_NL* b = static_cast<BlockIQ4_NL*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) quantize_block(src + i * kQK, nullptr, &b[i]);
}

void quantize_rows_iq4_nl(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* importance) {
  BlockIQ4_NL* b = static_cast<BlockIQ4_NL*>(dst);
  for (int64_t r = 0; r < nrows; ++r) {
    for (int64_t i = 0; i < n_per_row / kQK; ++i) {
      quantize_block(src + r * n_per_row + i * kQK, importance ? importance + i * kQK : nullptr, b++);
    }
  }
}

void vec_dot_iq4_nl_q8_0_ref(int64_t n, float* s, const void* x, const void* y) {
  const BlockIQ4_NL* bx = static_cast<const BlockIQ4_NL*>(x);
  const BlockQ8_0* by = static_cast<const BlockQ8_0*>(y);
  float sum = 0.f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int32_t sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += kIQ4NLValues[bx[i].qs[j] & 0xF] * by[i].qs[j];
      sumi += kIQ4NLValues[bx[i].qs[j] >> 4] * by[i].qs[j + 16];
    }
    sum += (fp16_to_f32(bx[i].d) * fp16_to_f32(by[i].d)) * static_cast<float>(sumi);
  }
  *s = sum;
}

}  // namespace frugal::quant
