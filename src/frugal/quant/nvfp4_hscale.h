// H-Scale: NVFP4 block scales chosen by a diagonal second-order proxy of the layer's output
// error instead of by rounding amax / 6 (Qwen team, arXiv 2608.28113; the algorithm as in
// NVIDIA Model-Optimizer's nvfp4_fp8_scale_sweep_hessian). For a weight row w and the per-column
// second moments h_j = sum over calibration tokens of x_j^2 (the importance matrix), the output
// error of the row is sum_j h_j (w_j - w'_j)^2 when the inputs are uncorrelated; each 16-element
// sub-block's UE4M3 scale is the valid code that minimises its part of that sum, the elements
// being rounded to the nearest E2M1 value (ties to even, as RTN does) at that scale. The tensor's
// global scale stays RTN's, and the file layout is unchanged: the choice costs nothing at
// inference. Without an importance matrix h_j = 1, a plain squared-error search.
//
// The search is exact over its candidates: RTN's code and the `radius` valid codes on each side
// of it (consecutive codes are consecutive E4M3 values). RTN's code is kept unless another is
// strictly better, so no sub-block's weighted error ever exceeds RTN's.
#pragma once

#include <cstdint>

namespace frugal::quant {

inline constexpr int kHScaleDefaultRadius = 8;
// From any code, 125 codes on each side reach every valid one (0x01..0x7E).
inline constexpr int kHScaleMaxRadius = 125;

// sum_j h_j (x_j - w'_j)^2 over one 16-element sub-block x quantized with UE4M3 scale code
// `scale_code` under global scale g (w' as the file decodes it: E2M1 value * scale * g, exact in
// float64). h: 16 weights, nullptr for all ones.
double nvfp4_subblock_error(const float* x, const float* h, float global_scale, uint8_t scale_code);

// The scale code H-Scale picks for one sub-block: among RTN's code and the valid codes within
// `radius` (0..kHScaleMaxRadius) of it, the one of least nvfp4_subblock_error; RTN's code on a
// tie with it, otherwise the lowest of equals.
uint8_t hscale_subblock_code(const float* x, const float* h, float global_scale, int radius);

// Rows of NVFP4 blocks as quantize_rows_nvfp4_scaled writes them, with every scale chosen by
// hscale_subblock_code. importance: n_per_row column weights (a row of an importance matrix) or
// nullptr. Rows are independent: callers split them over threads.
void quantize_rows_nvfp4_hscale(const float* src, void* dst, int64_t nrows, int64_t n_per_row, float global_scale,
                                const float* importance, int radius);

}  // namespace frugal::quant
