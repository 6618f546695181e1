// What the two decode GEMVs (gemv.cu: float activations, gemv_q8.cu: 8-bit activations) share:
// the end of a warp's rows (lane sums, the split-row partial sums, the stores) and, on the host,
// the blocks of a GemvSet and its profile label. Only their inner loops differ.
#pragma once

#include <cstdint>
#include <string>

#include "frugal/backend/cuda/common.cuh"

namespace frugal::cuda {

// acc[t][r]: this lane's partial dot of row row0 + r for token t. Sums the warp's lanes; with
// KS > 1 the KS warps of a row add their sums in shared memory in a fixed order (deterministic),
// and the first of them stores. Lane r stores row r, so the R stores go out in parallel. Every warp
// of the block must call it (it synchronizes the block when KS > 1).
template <int kWarps, int NT, int R, int KS>
__device__ __forceinline__ void gemv_finish_rows(float (&acc)[NT][R], int part, int64_t row0, int64_t rows, int nt,
                                                 const float* bias, float* y, int accumulate) {
  constexpr int kWarp = 32;
  const int lane = threadIdx.x % kWarp;
#pragma unroll
  for (int t = 0; t < NT; ++t) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float v = acc[t][r];
#pragma unroll
      for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
      acc[t][r] = v;
    }
  }
  if (KS > 1) {
    __shared__ float part_sum[kWarps][NT][R];
    if (lane == 0) {
#pragma unroll
      for (int t = 0; t < NT; ++t) {
#pragma unroll
        for (int r = 0; r < R; ++r) part_sum[threadIdx.x / kWarp][t][r] = acc[t][r];
      }
    }
    __syncthreads();
    if (part != 0) return;
    const int first_warp = threadIdx.x / kWarp;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float v = 0.f;
#pragma unroll
        for (int k = 0; k < KS; ++k) v += part_sum[first_warp + k][t][r];
        acc[t][r] = v;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = row0 + r;
    if (lane != r || row >= rows) continue;
    for (int t = 0; t < nt && t < NT; ++t) {
      float out = acc[t][r] + (bias != nullptr ? bias[row] : 0.f);
      float* dst = y + static_cast<int64_t>(t) * rows + row;
      *dst = accumulate ? *dst + out : out;
    }
  }
}

// Declares w, y, bias and first: the part of GemvSet `set` that block `b` serves (blocks
// [first_i, first_{i+1}) serve weight i: up to three products of one input in one launch). Fields
// are picked by selects, not by a run-time array index (that would go through local memory). A
// macro, not a function: the same selects through inlined helpers returning a reference into the
// kernel's parameters compiled to different register use in every GEMV kernel.
#define FRUGAL_GEMV_SET_PART(set, b)                                                                \
  const int part_index_ = ((set).n > 2 && (b) >= (set).first2) ? 2 : (((set).n > 1 && (b) >= (set).first1) ? 1 : 0); \
  const DevWeight& w = part_index_ == 0 ? (set).w0 : (part_index_ == 1 ? (set).w1 : (set).w2);     \
  float* y = part_index_ == 0 ? (set).y0 : (part_index_ == 1 ? (set).y1 : (set).y2);               \
  const float* bias = part_index_ == 0 ? (set).b0 : (part_index_ == 1 ? (set).b1 : (set).b2);      \
  const int first = part_index_ == 0 ? 0 : (part_index_ == 1 ? (set).first1 : (set).first2)

// Sets g's first blocks of w1 and w2 for `per_block` rows per block and its prefetch; returns the
// grid's block count (0: nothing to launch).
inline int gemv_layout(GemvSet& g, int per_block) {
  const auto blocks = [per_block](const DevWeight& w) { return static_cast<int>((w.rows + per_block - 1) / per_block); };
  g.prefetch = gemv_prefetch_bytes();
  g.first1 = blocks(g.w0);
  g.first2 = g.first1 + (g.n > 1 ? blocks(g.w1) : 0);
  return g.first2 + (g.n > 2 ? blocks(g.w2) : 0);
}

// When profiling: labels the next launch with the set's shape and weight bytes (codes plus the
// Q8_0/Q4_0 scales or the FP4/HBQ block headers).
inline void gemv_profile_label(const char* kernel, const GemvSet& g, int n, int r, int ks) {
  if (!profiling()) return;
  uint64_t bytes = 0;
  int64_t rows = 0;
  const DevWeight* ws[3] = {&g.w0, &g.w1, &g.w2};
  for (int i = 0; i < g.n; ++i) {
    rows += ws[i]->rows;
    const SplitLayout lay = split_layout(ws[i]->type);
    bytes += static_cast<uint64_t>(ws[i]->rows * ws[i]->row_stride) +
             (ws[i]->scales != nullptr ? static_cast<uint64_t>(ws[i]->rows * (ws[i]->cols / 32) * 2) : 0) +
             (lay.block_elems != 0
                  ? static_cast<uint64_t>(ws[i]->rows * (ws[i]->cols / lay.block_elems) * lay.header_device_bytes)
                  : 0);
  }
  profile_label(cat(kernel, " ", std::string(dtype_name(g.w0.type)), " ", rows, "x", g.w0.cols, " n=", n, " R=", r,
                    " KS=", ks),
                bytes);
}

}  // namespace frugal::cuda
