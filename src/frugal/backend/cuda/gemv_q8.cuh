// The 8-bit-activation decode GEMV (gemv_q8.cu): activations quantized once per input as the CPU
// backend quantizes them, weight codes multiplied in integer dot products.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "frugal/backend/cuda/common.cuh"

namespace frugal::cuda {

// Which activation blocks a weight type's integer kernel takes: Q8_0 (32 codes, F16-rounded scale,
// sum of codes) for Q8_0/Q4_0, Q8_K (256 codes, float scale, sums of every 16) for Q4_K/Q6_K;
// kNone: the type has no such kernel (the float-activation GEMV runs it).
enum class QActKind { kNone, kQ8_0, kQ8_K };
QActKind q8_activation_kind(DType weight);

// Quantized activations of n tokens: codes [n][cols], scales d [n][cols/32 or cols/256], sums s
// [n][cols/32] (Q8_0) or [n][cols/16] (Q8_K).
struct QActView {
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const int* s = nullptr;
  int64_t cols = 0;
};
// The view of `scratch` laid out for n tokens of `cols` (what launch_quantize_activations fills).
QActView q8_activation_view(void* scratch, int n, int64_t cols);
// Scratch bytes for n tokens of `cols` (either kind).
size_t q8_activation_bytes(int64_t n, int64_t cols);
// Quantizes x [n][cols] into `scratch` (q8_activation_bytes(n, cols), 16-byte aligned); cols must
// be a multiple of 32 (kQ8_0) or 256 (kQ8_K).
QActView launch_quantize_activations(QActKind kind, const float* x, int n, int64_t cols, void* scratch,
                                     cudaStream_t s);
// y_i[t][r] (+)= dot(W_i[r], x[t]) (+ b_i[r]) for t < n <= 8 and the set's weights: one type (the
// kind q8_activation_kind gives), or Q4_K and Q6_K mixed (both take Q8_K activations).
void launch_gemv_q8_set(const GemvSet& set, const QActView& x, int n, bool accumulate, cudaStream_t s);
// Whether launch_gemv_q8_set takes a set of these `count` (1-3) weight types in one launch.
bool gemv_q8_set_supported(const DType* types, int count);

// Warp-level quantizers shared by the quantize kernels and the producers that quantize their own
// output (rms_norm, swiglu: ops.cu), so that every path writes the same codes as the CPU.
//
// Q8_0: one value per lane for block `blk`. d = amax/127 (kept as its F16 value, which is what the
// dot products use), q = roundf(x/d) through the float reciprocal as the CPU does; s = sum of codes.
__device__ __forceinline__ void warp_quantize_q8_0(float v, int lane, int64_t blk, int8_t* q, float* d, int* s) {
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
  const float dd = amax / 127.f;
  const float id = dd != 0.f ? 1.f / dd : 0.f;
  const int qi = static_cast<int>(roundf(v * id));
  q[blk * 32 + lane] = static_cast<int8_t>(qi);
  int sum = qi;
#pragma unroll
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
  if (lane == 0) {
    d[blk] = __half2float(__float2half_rn(dd));
    s[blk] = sum;
  }
}

// Q8_K: elements 8 lane .. 8 lane + 7 of block `blk` in v. The signed value of largest magnitude
// (first on ties) maps to -127: iscale = -127/max, q = min(nearest-even(iscale x), 127),
// d = 1/iscale; s = sums of every 16 codes.
__device__ __forceinline__ void warp_quantize_q8_k(const float (&v)[8], int lane, int64_t blk, int8_t* q, float* d,
                                                   int* s) {
  float best = 0.f, amax = 0.f;
  int at = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if (fabsf(v[i]) > amax) {
      amax = fabsf(v[i]);
      best = v[i];
      at = lane * 8 + i;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const float ob = __shfl_xor_sync(0xFFFFFFFFu, best, o);
    const float oa = __shfl_xor_sync(0xFFFFFFFFu, amax, o);
    const int oi = __shfl_xor_sync(0xFFFFFFFFu, at, o);
    if (oa > amax || (oa == amax && oi < at)) {
      amax = oa;
      best = ob;
      at = oi;
    }
  }
  uint32_t packed[2] = {0, 0};
  int sum = 0;
  if (amax != 0.f) {
    const float iscale = -127.f / best;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int qi = min(__float2int_rn(iscale * v[i]), 127);
      sum += qi;
      packed[i / 4] |= (static_cast<uint32_t>(qi) & 0xFFu) << (8 * (i % 4));
    }
    if (lane == 0) d[blk] = 1.f / iscale;
  } else if (lane == 0) {
    d[blk] = 0.f;
  }
  *reinterpret_cast<uint2*>(q + blk * 256 + lane * 8) = make_uint2(packed[0], packed[1]);
  sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 1);
  if ((lane & 1) == 0) s[blk * 16 + lane / 2] = sum;
}

// Producers that quantize their own output: y [rows][dim] = x * rsqrt(mean(x^2) + eps) * w, also
// written as `kind` activations into `out` (a q8_activation_view of rows tokens of dim); and
// gate = silu(gate) * up over [rows][dim], likewise. dim a multiple of 256 (kQ8_K) or 32 (kQ8_0).
void launch_rms_norm_q8(const float* x, const float* w, int rows, int dim, float eps, float* y, QActKind kind,
                        const QActView& out, cudaStream_t s);
void launch_swiglu_q8(float* gate, const float* up, int rows, int dim, QActKind kind, const QActView& out,
                      cudaStream_t s);

}  // namespace frugal::cuda
