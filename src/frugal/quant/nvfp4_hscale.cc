#include "frugal/quant/nvfp4_hscale.h"

#include <algorithm>
#include <limits>

#include "frugal/quant/blocks.h"
#include "frugal/quant/fp4_codes.h"
#include "frugal/quant/reference.h"

namespace frugal::quant {
namespace {

constexpr int kMinCode = 0x01;  // 2^-9; code 0 (a zero scale) is not a valid NVFP4 block scale
constexpr int kMaxCode = 0x7E;  // 448

// The error of nvfp4_subblock_error, given up as soon as its running sum reaches `bound` (the
// terms are non-negative, so such a candidate cannot win): most candidates far from the optimum
// stop after a few elements, which makes the wide windows affordable.
double subblock_error_below(const float* x, const float* h, float global_scale, uint8_t scale_code, double bound) {
  const float div = ue4m3_to_f32(scale_code) * global_scale;  // as nvfp4_encode_subblock divides
  // A 4-bit significand times E2M1's 2-bit one times g's 24 bits: the product is exact in double,
  // so this is the error of the weight the backend multiplies with, not of a rounded copy.
  const double step = static_cast<double>(ue4m3_to_f32(scale_code)) * static_cast<double>(global_scale);
  double err = 0;
  for (int j = 0; j < kQK_NVFP4_SUB && err < bound; ++j) {
    const double wq = static_cast<double>(e2m1_to_f32(e2m1_round_even(x[j] / div))) * step;
    const double d = static_cast<double>(x[j]) - wq;
    err += (h != nullptr ? static_cast<double>(h[j]) : 1.0) * d * d;
  }
  return err;
}

}  // namespace

double nvfp4_subblock_error(const float* x, const float* h, float global_scale, uint8_t scale_code) {
  return subblock_error_below(x, h, global_scale, scale_code, std::numeric_limits<double>::infinity());
}

uint8_t hscale_subblock_code(const float* x, const float* h, float global_scale, int radius) {
  const int rtn = nvfp4_rtn_scale_code(x, global_scale);
  radius = std::clamp(radius, 0, kHScaleMaxRadius);
  int best = rtn;
  double best_err = nvfp4_subblock_error(x, h, global_scale, static_cast<uint8_t>(rtn));
  for (int c = std::max(kMinCode, rtn - radius); c <= std::min(kMaxCode, rtn + radius); ++c) {
    if (c == rtn) continue;
    const double err = subblock_error_below(x, h, global_scale, static_cast<uint8_t>(c), best_err);
    if (err < best_err) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best);
}

void quantize_rows_nvfp4_hscale(const float* src, void* dst, int64_t nrows, int64_t n_per_row, float global_scale,
                                const float* importance, int radius) {
  constexpr int kSubBlocks = kQK_NVFP4 / kQK_NVFP4_SUB;
  BlockNVFP4* b = static_cast<BlockNVFP4*>(dst);
  const int64_t blocks_per_row = n_per_row / kQK_NVFP4;
  for (int64_t r = 0; r < nrows; ++r) {
    for (int64_t i = 0; i < blocks_per_row; ++i) {
      BlockNVFP4& y = b[r * blocks_per_row + i];
      for (int s = 0; s < kSubBlocks; ++s) {
        const int64_t col = i * kQK_NVFP4 + s * kQK_NVFP4_SUB;
        const float* xs = src + r * n_per_row + col;
        const float* hs = importance != nullptr ? importance + col : nullptr;
        y.d[s] = hscale_subblock_code(xs, hs, global_scale, radius);
        nvfp4_encode_subblock(xs, y.d[s], global_scale, y.qs + s * (kQK_NVFP4_SUB / 2));
      }
    }
  }
}

}  // namespace frugal::quant
