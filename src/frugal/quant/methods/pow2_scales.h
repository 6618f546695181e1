// Power-of-two weight scales for W8A8 (w8a8/w8a8.h): every per-channel scale replaced by the power
// of two nearest it (in log2: 2^round(log2 s)), and the weights REQUANTIZED to the new scale.
//
// Why: with sw a power of two, sa * sw is exact and multiplying by sw commutes with rounding
// (barring overflow and subnormals), so fl(fl(acc * sa) * sw) == fl(acc * fl(sa * sw)) and
// fma(fl(acc * sa), sw, b) == fl(fl(acc * fl(sa * sw)) + b): the epilogues of int8_gemm.h give the
// same float, and two INT8 kernels that share operands agree bit for bit.
//
// Requantizing matters. The int8 tensor stands for w' = q * s; at the new scale p the weights are
// q' = clamp(round_half_even(q * s / p), -127, 127), so q' * p ~= q * s again. Rewriting s to p
// and keeping q (rewrite_scales_only) multiplies every weight of the row by p / s, a factor in
// [1/sqrt(2), sqrt(2)]: a different model, not the same one with a constrained scale.
#pragma once

#include <cstdint>

#include "frugal/quant/w8a8/w8a8.h"

namespace frugal::quant::methods {

// 2^round(log2 s) for a positive finite s: the power of two nearest s in log2 (the mantissa of
// s = m * 2^e, m in [0.5, 1), picks 2^e when m >= sqrt(1/2), else 2^(e-1)). Exact.
float nearest_pow2(float s);
bool is_pow2(float s);

struct Pow2Stats {
  int64_t rows = 0;
  int64_t rows_rescaled = 0;  // rows whose scale was not a power of two already
  int64_t clipped = 0;        // weights that hit +-127 at a smaller new scale (|q s / p| > 127.5)
};

// The requantization above, row by row, from the int8 tensor itself (what a pipeline that starts
// from an INT8 checkpoint has). A row whose scale is already a power of two is unchanged.
w8a8::Int8Weights requantize_pow2(const w8a8::Int8Weights& w, Pow2Stats* stats = nullptr);

// The scales rewritten to powers of two with q kept: the weight-scale mismatch, for comparison.
w8a8::Int8Weights rewrite_scales_only(const w8a8::Int8Weights& w);

}  // namespace frugal::quant::methods
