// TileMix's INT8 scores. Every row (a query row of a tile: one token and one query head; or one
// key) is quantized symmetrically on its own: scale = max|x| / 127, code = x x (127 / max|x|)
// rounded to nearest (ties to even), in [-127, 127]; a row of zeros has scale 0 and codes 0.
// A score is the exact integer dot of the two rows' codes times the two scales:
//   score = float(sum_e cq[e] * ck[e]) * scale_q * scale_k,
// so for rows q and k the error |q·k - score| is at most
//   scale_k / 2 * |q|_1 + scale_q / 2 * |k̂|_1  (k̂ = the dequantized key, |k̂|_1 <= |k|_1 + dim scale_k / 2)
// plus the float rounding of the two multiplies (quant_error_bound).
//
// In the fused kernel the query rows of a tile are laid across SIMD lanes, as the float kernel
// lays them: QueryCodes. The codes are made unsigned (+128) so that one multiply-add of unsigned
// by signed bytes (vpdpbusd on AVX-512 VNNI) sums four dimensions per 32-bit lane; the +128 is
// taken back out with each key's code sum (128 x sum_e ck[e]).
#pragma once

#include <cstdint>

namespace frugal::tilemix {

inline constexpr int kCodeMax = 127;
// Head sizes the INT8 path takes: a multiple of 4 (four codes per word), at most 512 (every
// integer dot is then exact as a float: 512 x 127 x 127 < 2^24).
inline constexpr int kMaxHeadDim = 512;
inline bool int8_head_dim_ok(int head_dim) { return head_dim > 0 && head_dim % 4 == 0 && head_dim <= kMaxHeadDim; }

// Quantizes one row of n floats to codes; returns its scale.
float quantize_row(const float* x, int n, int8_t* codes);

// A KV head's keys as int8 codes, one scale per key, and each key's code sum.
struct KeyCodes {
  const int8_t* codes = nullptr;  // [n_keys][head_dim]
  const float* scales = nullptr;  // [n_keys]
  const int32_t* sums = nullptr;  // [n_keys]
};
// Quantizes keys [0, n_k) of k ([n_k][head_dim] floats) row by row.
void quantize_keys(const float* k, int32_t n_k, int head_dim, int8_t* codes, float* scales, int32_t* sums);

// A tile's query rows in the kernel's lane layout: word g of row r, at words[g * rp + r], holds
// the codes of dimensions 4g..4g+3 of row r, each plus 128, as bytes (lowest dimension in the
// low byte); scales[r] is the row's scale. rp is the tile's padded row count.
struct QueryCodes {
  const uint32_t* words = nullptr;  // [head_dim / 4][rp]
  const float* scales = nullptr;    // [rp]
  int rp = 0;
  int head_dim = 0;
};

// Scalar reference: s[j * rows + r] = score of query row r (codes q_codes[r * dim ..], scale
// q_scales[r]) with key k0 + j, for j < nk.
void scores_reference(const int8_t* q_codes, const float* q_scales, int rows, const KeyCodes& k, int32_t k0, int nk,
                      int dim, float* s);

// The bound on |q·k - score| above for float rows q and k quantized with scales q_scale and
// k_scale, including the float rounding of the score.
double quant_error_bound(const float* q, float q_scale, const float* k, float k_scale, int dim);

// SIMD kernels (simd_int8.cc), dispatched at run time to the best target of this CPU.
// Quantizes the rows of a tile given transposed, qt[e * rp + r] (e < dim, r < rp, rp a multiple
// of the float vector length), into the lane layout: words [dim / 4][rp], scales [rp]. The codes
// and scales equal quantize_row's on each row.
void quantize_query_lanes(const float* qt, int rp, int dim, uint32_t* words, float* scales);
// s[j * q.rp + r] = score of row r with key k0 + j, for j < nk and every r < q.rp; the same
// values as scores_reference.
void block_scores(const QueryCodes& q, const KeyCodes& k, int32_t k0, int nk, float* s);
// "vnni" where block_scores runs one vpdpbusd per four dimensions, else "widened" (bytes
// widened to 32-bit lanes and multiplied).
const char* int8_dot_path();

}  // namespace frugal::tilemix
