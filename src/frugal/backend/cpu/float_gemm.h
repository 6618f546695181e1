// An F32 matrix product for batches (prefill): y[c][r] = sum_k A[r][k] * B[c][k] (+ bias[r]).
//
// A (weight rows, expanded to F32) stays row-major; B (activation rows) is repacked once per call
// into panels of panel_cols() rows interleaved per k ([k][panel_cols]). The kernel keeps a tile of
// several weight rows x panel_cols() activations in registers and per k broadcasts one element of
// each weight row against two vectors of the panel: a chain of rank-1 updates with no horizontal
// sums, A streaming from L2 and the B panel staying close.
#pragma once

#include <cstddef>
#include <cstdint>

namespace frugal::cpu {

// Activation rows per B panel for the SIMD target in use (two or four vectors of floats).
int float_gemm_panel_cols();

// Packs activation rows [c0, c0 + nc) of x ([..][k] floats, row stride k), nc <= panel_cols(), into
// one B panel of k * panel_cols() floats; missing rows are zero.
void float_gemm_pack_b(const float* x, int64_t k, int64_t c0, int64_t nc, float* panel);

struct FloatGemmBlock {
  const float* a = nullptr;  // rows [r0, r1) of A, row-major, `lda` floats apart
  int64_t lda = 0;
  const float* b = nullptr;  // every B panel of the batch, k * panel_cols() floats each
  int64_t k = 0;
  int64_t r0 = 0, r1 = 0;    // weight rows of this block (index into y and bias)
  int64_t n = 0;             // activation rows
  float* y = nullptr;        // y[c * ldy + r]
  int64_t ldy = 0;
  const float* bias = nullptr;  // [ldy] or nullptr
};
void float_gemm_block(const FloatGemmBlock& blk);

}  // namespace frugal::cpu
