// NVFP4 activations for emulating W4A4 on the CPU: a row of activations is replaced by the values
// an NVFP4 W4A4 kernel would multiply with, i.e. quantized to E2M1 in 16-element groups with a
// UE4M3 scale each and dequantized again ("fake quantization"), before an ordinary float product.
//
// The recipe is NVIDIA Model-Optimizer's (docs/quantization.md, "FP4 formats"), with the global
// scale taken per row (per token) at run time: g = amax(row) / (6 * 448), then per group
// d = e4m3(amax_group / (6 g)) clamped to [2^-9, 448], q = E2M1 round-to-nearest-even(x / (d g))
// saturating at 6, x' = E2M1[q] * d * g. A per-token global scale needs no calibration and is the
// most favourable choice of global scale; the groups' own E4M3 scales, which OCG acts on, are as
// a static-scale kernel would have them.
#pragma once

#include <cstdint>

namespace frugal::quant::methods {

inline constexpr int kNvfp4ActGroup = 16;

// y[0..n) = the NVFP4 round trip of x[0..n); n a multiple of 16. In place allowed. A row of zeros
// stays zeros; non-finite inputs are not expected (activations of a finite model).
void nvfp4_fake_quantize_row(const float* x, float* y, int64_t n);

}  // namespace frugal::quant::methods
