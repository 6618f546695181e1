// Faults injected into an INT8 GEMM epilogue, to ask what a conformance test can see. Each fault
// kernel is the scale_product kernel (int8_gemm.h) with one change of the kind that separates real
// kernels, or one real bug; run beside the unchanged kernel on identical operands, the question is
// which faults a tolerance test ("every output within one bf16 spacing") lets through and which a
// bitwise probe ("every output bit-identical") catches.
//
//   scale_precision        the combined scale sa * sw held in bf16 instead of f32
//   double_rounding        acc * s rounded to the output type, then the bias added and rounded again
//   multiplication_order   fl(fl(acc * sw) * sa) instead of fl(acc * fl(sa * sw))
//   output_truncation      the output rounded toward zero instead of to nearest even
//   fused_ordering         fma(acc, s, b) instead of fl(fl(acc * s) + b) (inert without a bias)
//   accumulator_wrap       a real bug: the dot product accumulated in int16, wrapping on overflow
//
// The file compiles with -ffp-contract=off, as the kernels do: each epilogue is exactly the
// operations written.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "frugal/quant/w8a8/int8_gemm.h"

namespace frugal::quant::w8a8 {

std::vector<std::string> fault_names();
// The kernel with that fault injected, or null for an unknown name.
const Int8GemmKernel* find_fault_kernel(std::string_view name);

}  // namespace frugal::quant::w8a8
