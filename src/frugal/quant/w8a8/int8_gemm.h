// Two INT8 GEMM kernels behind one interface, differing only where real kernels differ: after the
// exact int32 accumulator (w8a8.h), in the float epilogue that applies the two scales and the bias.
//
//   scale_product    (as Triton INT8 matmuls write it: acc.to(f32) * (a_scale[:, None] *
//                    b_scale[None, :]) + bias): the two scales are multiplied first, one float
//                    product per output, then the accumulator times that product, then the bias
//                    added: fl(fl(acc * fl(sa * sw)) + b). Loop: token, row, k (one dot per output).
//   sequential_fma   (as CUTLASS's epilogue visitor trees compose it: the per-token scale as a
//                    column broadcast multiply, the per-channel scale and bias as one fused
//                    multiply-add): fma(fl(acc * sa), sw, b), or fl(fl(acc * sa) * sw) without a
//                    bias. Loop: tiles of 4 tokens x 4 rows, K in blocks of 64 with an int32
//                    partial per block (the accumulation order differs from scale_product's; the
//                    sum does not, being exact).
//
// Both round once to the output type. With arbitrary float scales the two epilogues round at
// different points, so their floats can differ in the last bit, and after rounding to bf16 by at
// most one bf16 spacing (when the two floats straddle a rounding boundary). With power-of-two
// weight scales (methods/pow2_scales.h) they are equal.
//
// The files compile with -ffp-contract=off: an epilogue is exactly the operations written, not
// whatever the compiler fuses.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "frugal/quant/w8a8/w8a8.h"

namespace frugal {
class ThreadPool;
}

namespace frugal::quant::w8a8 {

struct GemmArgs {
  const Int8Activations* a = nullptr;  // [n][K]
  const Int8Weights* w = nullptr;      // [rows][K], same K; K <= kMaxExactK (checked by the caller)
  const float* bias = nullptr;         // [rows] or null
  OutputType out = OutputType::kBF16;
  float* y = nullptr;                  // [n][rows], values of the output type
  int32_t* acc = nullptr;              // [n][rows] or null: the int32 accumulators, for checks
  ThreadPool* pool = nullptr;          // null: the calling thread alone; results never depend on it
};

class Int8GemmKernel {
 public:
  virtual ~Int8GemmKernel() = default;
  virtual std::string_view name() const = 0;
  virtual std::string_view epilogue() const = 0;  // the formula, for reports
  virtual void gemm(const GemmArgs& args) const = 0;
};

// The registry: names are frozen (they appear in reports and command lines).
std::vector<std::string> int8_kernel_names();
const Int8GemmKernel* find_int8_kernel(std::string_view name);

// One line per kernel file.
const Int8GemmKernel& scale_product_kernel();
const Int8GemmKernel& sequential_fma_kernel();

}  // namespace frugal::quant::w8a8
