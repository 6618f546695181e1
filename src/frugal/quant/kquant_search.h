// Weighted least-squares searches for a sub-block's scale (and min), shared by the K-quant and
// IQ4_NL quantizers. Each tries a small grid of candidate inverse scales around amax/nmax,
// rounds to codes, solves the weighted least-squares scale (and min) for those codes in closed
// form, and keeps the best candidate.
#pragma once

#include <cstdint>

namespace frugal::quant {

// Symmetric codes: x_i ~ scale*(L_i - nmax), L_i in [0, 2*nmax). Weights w (nullptr: x^2).
// Returns scale (signed: the largest-magnitude element gets code 0).
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
// never above zero). Returns scale; *min_out = min.
float search_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min_out,
                       const ScaleMinSearch& params);

// Index of the value of `table` (sorted ascending, n entries) nearest to v.
int nearest_table_index(const int8_t* table, int n, float v);

}  // namespace frugal::quant
