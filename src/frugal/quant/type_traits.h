// The type table: for every tensor element type, its scalar reference conversions (the oracle
// for tests) and its fast SIMD kernels. A format is one file in quant/ plus one row here; tests
// loop over the table, so registering a format is what gets it tested.
//
// Conventions (ggml's): a weight row x of n elements is dotted with an activation row y that has
// first been converted to `vec_dot_type` (Q8_0 for Q4_0/Q5_0/Q8_0/IQ4_NL/MXFP4/NVFP4/HBQ, Q8_1 for
// Q4_1/Q5_1, Q8_K for the K-quants, F16 for F16, BF16 for BF16, F32 for F32). n is a multiple of
// the block size of both types. NVFP4's conversions and dots leave out its per-tensor global
// scale, which the caller applies (WeightTensor::scale).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "frugal/core/dtype.h"

namespace frugal {

using ToFloatFn = void (*)(const void* src, float* dst, int64_t n);
using FromFloatFn = void (*)(const float* src, void* dst, int64_t n);
// Rows of a weight matrix for a model file (see quant/reference.h): importance is nullptr or
// n_per_row column weights.
using QuantizeRowsFn = void (*)(const float* src, void* dst, int64_t nrows, int64_t n_per_row,
                                const float* importance);
// *s = dot(x[0..n), y[0..n)).
using VecDotFn = void (*)(int64_t n, float* s, const void* x, const void* y);
// A tile of a matrix product: for r < nrx, c < nry:
//   s[c * ldc + r] = dot(x + r * bx bytes, y + c * by bytes) over n elements.
// Rows of x are weight rows; rows of y are activation rows already in vec_dot_type.
using GemmTileFn = void (*)(int64_t n, float* s, size_t ldc, const void* x, size_t bx, int nrx,
                            const void* y, size_t by, int nry);

struct TypeTraits {
  DType type;
  DType vec_dot_type;
  bool quantized;  // block format (not plain float)

  // Scalar reference implementations: plain C++, bit-compatible with ggml's reference code.
  ToFloatFn to_float_ref;
  FromFloatFn from_float_ref;  // reference quantizer (defines bit-exact files); may be slow
  // How `frugal quantize` writes weights of this type (llama-quantize's bytes, with or without an
  // importance matrix); nullptr for activation-only types (Q8_1, Q8_K).
  QuantizeRowsFn quantize_rows = nullptr;
  VecDotFn vec_dot_ref;        // x in `type`, y in `vec_dot_type`

  // Fast kernels (SIMD, dispatched at run time to the best target of this CPU).
  ToFloatFn to_float;
  FromFloatFn from_float;  // for activations into vec_dot_type; may differ in rounding from ref
  VecDotFn vec_dot;
  GemmTileFn gemm_tile;    // nullptr: callers loop over vec_dot
  int tile_rows = 1;       // preferred nrx for gemm_tile
  int tile_cols = 1;       // preferred nry for gemm_tile
};

// nullptr for types without kernels (e.g. I32).
const TypeTraits* type_traits(DType type);
// Every registered type, for tests and `frugal info`.
const std::vector<const TypeTraits*>& all_type_traits();

// Name of the SIMD target chosen at run time ("AVX2", "AVX3", "SSE4", "EMU128"...).
const char* simd_target_name();

}  // namespace frugal
