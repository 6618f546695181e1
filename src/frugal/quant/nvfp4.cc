// NVFP4: E2M1 codes with a UE4M3 scale per 16 elements and an FP32 scale per tensor,
// x = E2M1[q] * ue4m3(d) * g. Quantization follows NVIDIA Model-Optimizer (nvfp4_tensor.py):
//   g = amax(|W|) / (6 * 448)                            (the tensor's global scale)
//   d = e4m3(amax_block / (6 * g)), clamped to [2^-9, 448]; all-zero blocks get d = 1
//   q = E2M1 round-to-nearest-even(w / (float(d) * g)), saturating at 6.
// The block (36 bytes, 64 elements) is the GGUF layout of blocks.h; the global scale is not in
// it: model files carry it as a companion F32 tensor `<name>.scale` (docs/quantization.md) and
// products are multiplied by it, so to_float and vec_dot here are without it.
#include <algorithm>
#include <cmath>

#include "frugal/core/half.h"
#include "frugal/quant/blocks.h"
#include "frugal/quant/fp4_codes.h"
#include "frugal/quant/reference.h"

namespace frugal::quant {
namespace {

constexpr int kSubBlocks = kQK_NVFP4 / kQK_NVFP4_SUB;
constexpr float kE2M1Max = 6.f;
constexpr float kE4M3Max = 448.f;

void quantize_block(const float* x, float g, BlockNVFP4* y) {
  for (int s = 0; s < kSubBlocks; ++s) {
    const float* xs = x + s * kQK_NVFP4_SUB;
    y->d[s] = nvfp4_rtn_scale_code(xs, g);
    nvfp4_encode_subblock(xs, y->d[s], g, y->qs + s * (kQK_NVFP4_SUB / 2));
  }
}

}  // namespace

uint8_t nvfp4_rtn_scale_code(const float* x, float global_scale) {
  float amax = 0.f;
  for (int j = 0; j < kQK_NVFP4_SUB; ++j) amax = std::max(amax, std::fabs(x[j]));
  return amax == 0.f ? uint8_t{0x38} : ue4m3_from_f32_clamped(amax / (kE2M1Max * global_scale));  // 0x38: 1.0
}

void nvfp4_encode_subblock(const float* x, uint8_t scale_code, float global_scale, uint8_t* qs) {
  const float div = ue4m3_to_f32(scale_code) * global_scale;
  for (int j = 0; j < kQK_NVFP4_SUB / 2; ++j) {
    const uint8_t lo = e2m1_round_even(x[j] / div);
    const uint8_t hi = e2m1_round_even(x[j + kQK_NVFP4_SUB / 2] / div);
    qs[j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

float nvfp4_global_scale(float amax) {
  const float g = amax / (kE2M1Max * kE4M3Max);
  // An all-zero (or denormal-only) tensor: any scale works, 1 keeps the blocks' defaults exact.
  return g > 0.f && std::isfinite(g) ? g : 1.f;
}

void dequantize_nvfp4_ref(const void* src, float* dst, int64_t n) {
  const BlockNVFP4* b = static_cast<const BlockNVFP4*>(src);
  for (int64_t i = 0; i < n / kQK_NVFP4; ++i) {
    for (int s = 0; s < kSubBlocks; ++s) {
      const float d_half = ue4m3_to_f32(b[i].d[s]) * 0.5f;
      const uint8_t* qs = b[i].qs + s * (kQK_NVFP4_SUB / 2);
      float* out = dst + i * kQK_NVFP4 + s * kQK_NVFP4_SUB;
      for (int j = 0; j < kQK_NVFP4_SUB / 2; ++j) {
        out[j] = d_half * static_cast<float>(kE2M1Doubled[qs[j] & 0xF]);
        out[j + kQK_NVFP4_SUB / 2] = d_half * static_cast<float>(kE2M1Doubled[qs[j] >> 4]);
      }
    }
  }
}

void quantize_nvfp4_ref(const float* src, void* dst, int64_t n) { quantize_rows_nvfp4_scaled(src, dst, 1, n, 1.f); }

void quantize_rows_nvfp4_scaled(const float* src, void* dst, int64_t nrows, int64_t n_per_row, float global_scale) {
  BlockNVFP4* b = static_cast<BlockNVFP4*>(dst);
  const int64_t n = nrows * n_per_row;
  for (int64_t i = 0; i < n / kQK_NVFP4; ++i) quantize_block(src + i * kQK_NVFP4, global_scale, &b[i]);
}

// Each Q8_0 block of 32 covers two NVFP4 sub-blocks: integer sums per sub-block, one float
// multiply-add each.
void vec_dot_nvfp4_q8_0_ref(int64_t n, float* s, const void* x, const void* y) {
  const BlockNVFP4* bx = static_cast<const BlockNVFP4*>(x);
  const BlockQ8_0* by = static_cast<const BlockQ8_0*>(y);
  float sum = 0.f;
  for (int64_t i = 0; i < n / kQK_NVFP4; ++i) {
    for (int s = 0; s < kSubBlocks; ++s) {
      const BlockQ8_0& q8 = by[i * 2 + s / 2];
      const int8_t* ys = q8.qs + (s % 2) * kQK_NVFP4_SUB;
      const uint8_t* qs = bx[i].qs + s * (kQK_NVFP4_SUB / 2);
      int32_t sumi = 0;
      for (int j = 0; j < kQK_NVFP4_SUB / 2; ++j) {
        sumi += kE2M1Doubled[qs[j] & 0xF] * ys[j];
        sumi += kE2M1Doubled[qs[j] >> 4] * ys[j + kQK_NVFP4_SUB / 2];
      }
      sum += (ue4m3_to_f32(bx[i].d[s]) * 0.5f * fp16_to_f32(q8.d)) * static_cast<float>(sumi);
    }
  }
  *s = sum;
}

}  // namespace frugal::quant
