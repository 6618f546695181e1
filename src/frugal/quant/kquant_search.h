// Weighted least-squares searches for a sub-block's scale (and min), shared by the K-quant,
// IQ4_NL and importance-weighted 32-element quantizers. Each tries a small grid of candidate
// inverse scales around amax/nmax, rounds to codes, solves the weighted least-squares scale (and
// min) for those codes in closed form, and keeps the best candidate.
//
// They reproduce ggml's searches operation for operation (same candidates, same float
// expressions in the same order, same tie rules, same codes for all-zero input), because the
// bytes `frugal quantize` writes are meant to equal llama-quantize's; a change here that is
// "better" breaks that identity (tests/quant/llamacpp_identity_test.cc).
#pragma once

#include <cstdint>

namespace frugal::quant {

// Symmetric codes: x_i ~ scale*(L_i - nmax), L_i in [0, 2*nmax). Weights w (nullptr: x^2).
// Returns scale (signed: the largest-magnitude element gets code 0). All-zero input (|x| below
// 1e-15): codes 0 and scale 0.
float search_symmetric_scale(int n, int nmax, const float* x, const float* w, int8_t* L);

// Symmetric codes refined element by element (each code moved to its LS-optimal value while
// the others stay put) as the Q3_K quantizer does; weights x^2. Same contract as above.
float search_symmetric_scale_iterative(int n, int nmax, const float* x, int8_t* L);

struct ScaleMinSearch {
  float rmin;    // first candidate: inverse scale (nmax + rmin)/(max - min)
  float rdelta;  // step between candidates
  int nstep;     // candidates after the first
  bool use_mad;  // score by weighted |error| instead of weighted squared error
};

// Asymmetric codes: x_i ~ scale*L_i - min, L_i in [0, nmax], min >= 0 (the block minimum is
// never above zero). Weights w (nullptr: x^2). Returns scale; *min_out = min.
float search_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min_out,
                       const ScaleMinSearch& params);

// Non-negative codes for non-negative x (a super-block's sub-scales or sub-mins when an
// importance matrix is given): x_i ~ scale*L_i, L_i in [0, nmax], weights w (required): the
// best of 9 candidate scales, then codes refined one at a time. Returns scale (0 for all-zero x).
float search_positive_scale(int n, int nmax, const float* x, const float* w, uint8_t* L);

// Index of the value of `table` (sorted ascending, n entries) nearest to v.
int nearest_table_index(const int8_t* table, int n, float v);

}  // namespace frugal::quant
