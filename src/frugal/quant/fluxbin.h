// FluxBin: decoupled row-column binary decomposition of a weight matrix, with a lookup-table GEMV.
// For a matrix W [rows, cols] cut along cols into groups of G = 128,
//   W[o, gG+j] ~ sum_{k=1,2} B_k[o, gG+j] * r_k[o, g] * c_k[g, j],   B in {-1, +1},
// with row scales r per (row, group, basis) and column scales c per (group, column, basis) shared
// by every row. The fit (fluxbin_fit) starts from the greedy residual binarisation and then
// alternates closed-form least squares for r given c, for c given r, and an exhaustive choice of
// each element's sign pair among the four patterns; no step can increase the error, so the
// error history is non-increasing.
//
// Hybrid variant: in every group the `salient` columns of largest saliency sum_o W[o,j]^2 * h_j
// (h = importance-matrix diagonal, 1 without one) leave the binary part (their c is 0, so the
// binary fit spends nothing on them) and are stored as 4-bit symmetric integers with one f16
// scale per (row, group). Why the values out of the fit rather than an int4 residual on top of a
// fit over all columns: outlier columns inflate the row scales every other column shares; on
// 64 x 256 Gaussian rows with 4 planted N(0,1) columns the squared error was 8.34 pure, 6.87
// with a residual, 5.55 this way (tests/quant/fluxbin_test.cc). Why not a third basis: one bit
// per salient element cannot follow the outliers' spread within a row group. Why not int8:
// 8 columns at int8 cost 0.625 bits per weight, at int4 0.375, which keeps the hybrid at Q2_K's
// size (see bits_per_weight).
//
// Storage (the GGUF layout of type kFLUXBIN, core/dtype.h):
//   weight tensor, per row and group, 36 bytes: signs of basis 1 (16 bytes, bit b of byte i is
//     column 8i+b, 1 = +1), signs of basis 2 (16 bytes), r_1 and r_2 as f16;
//   "<base>.fluxbin_cols" (F16, cols*2 values): c_1 for all columns, then c_2 for all columns;
//   hybrid only: "<base>.fluxbin_sidx" (I8, groups*salient: column within the group, ascending)
//     and "<base>.fluxbin_svals" (I8 bytes, rows * groups * (2 + salient/2): per row and group an
//     f16 scale then salient/2 bytes of codes, low nibble first, value = scale * (code - 8)).
// The column scales are shared by all rows, which a per-row block type cannot hold, hence the
// companion tensors; the row part stays a fixed-size block so GGUF size checks apply unchanged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "frugal/core/status.h"

namespace frugal::quant::fluxbin {

inline constexpr int kGroup = 128;
inline constexpr int kBases = 2;
inline constexpr int kSignBytes = kGroup / 8;                           // per basis
inline constexpr int kBlockBytes = kBases * kSignBytes + kBases * 2;    // 36
inline constexpr int kDefaultSalient = 8;

struct FitOptions {
  int max_iterations = 50;
  // Stop once this many consecutive iterations improved the error by a relative <= min_improvement.
  int patience = 3;
  double min_improvement = 1e-6;
  int salient = 0;                    // salient columns per group: 0 (pure) or an even number <= 32
  const float* importance = nullptr;  // cols column weights h_j (imatrix diagonal) or nullptr
};

// A fitted matrix in exactly the bytes the file holds.
struct Matrix {
  int64_t rows = 0;
  int64_t cols = 0;
  int salient = 0;
  std::vector<uint8_t> blocks;      // rows * groups * kBlockBytes
  std::vector<uint16_t> col_scales;  // f16, kBases * cols
  std::vector<uint8_t> salient_idx;  // groups * salient
  std::vector<uint8_t> salient_vals; // rows * groups * salient_row_bytes(salient)
  // Weighted squared error sum_{o,j} h_j (W - W')^2 of the float fit after the initialisation
  // (entry 0) and after each iteration; the stored f16 values differ from it by rounding only.
  std::vector<double> error_history;
};

// Non-owning view of the same bytes (what the engine binds from a mapped file).
struct View {
  int64_t rows = 0;
  int64_t cols = 0;
  int salient = 0;
  const uint8_t* blocks = nullptr;
  const uint16_t* col_scales = nullptr;
  const uint8_t* salient_idx = nullptr;
  const uint8_t* salient_vals = nullptr;
};

// Companion tensor names: "blk.0.attn_q.weight" has "blk.0.attn_q.fluxbin_cols" and, hybrid,
// "blk.0.attn_q.fluxbin_sidx" and "blk.0.attn_q.fluxbin_svals".
inline constexpr const char* kColsPart = "fluxbin_cols";
inline constexpr const char* kSalientIdxPart = "fluxbin_sidx";
inline constexpr const char* kSalientValsPart = "fluxbin_svals";
std::string companion_name(const std::string& weight_name, const char* part);

inline int64_t salient_row_bytes(int salient) { return salient == 0 ? 0 : 2 + salient / 2; }
View view_of(const Matrix& m);

// Bits per weight of the whole representation of a rows x cols matrix: row blocks, column scales,
// salient indices and values.
double bits_per_weight(int64_t rows, int64_t cols, int salient);

// Fits W (row-major rows x cols). cols must be a multiple of kGroup; the error names `name`.
Result<Matrix> fit(const float* w, int64_t rows, int64_t cols, const FitOptions& opt, const char* name = "tensor");

// Row o of the stored matrix as floats (cols values): the plain definition, the reference.
void dequantize_row(const View& v, int64_t o, float* out);

// y[o] = sum_j W'[o, j] x[j] for o in [row_begin, row_end), by dequantize-and-dot (reference).
void gemv_reference(const View& v, const float* x, float* y, int64_t row_begin, int64_t row_end);

// The same product by lookup tables: for each group and basis, u_j = c_k[g, j] * x_j, and for each
// 8-column chunk a 256-entry table of every +-sum of its u; each row then adds one table entry
// per sign byte and multiplies once by r_k. `scratch` is resized as needed (2 * 16 * 256 floats).
void gemv_lut(const View& v, const float* x, float* y, int64_t row_begin, int64_t row_end,
              std::vector<float>& scratch);

// The same product with SIMD (quant/simd_fluxbin.cc, Highway dynamic dispatch), in float: gemv_lut
// stays the scalar reference for it. No tables: with u_k[j] = c_k[g, j] x_j
// and U_k[g] their sum over the group, sum_j B_k[o, j] u_k[j] = 2 sum_{j: bit set} u_k[j] - U_k[g],
// and the sign bits become lane masks. Equal to gemv_lut up to the order of float additions.
// `scratch` is resized as needed (2 * cols + groups * (2 + salient) floats).
void gemv_simd(const View& v, const float* x, float* y, int64_t row_begin, int64_t row_end,
               std::vector<float>& scratch);

// The same product with the u as bytes (quant/simd_fluxbin.cc), what the CPU backend runs: per
// group and basis d = max_j |u_j| / 255 (the maximum floored at 1e-35), q_j = round(|u_j| / d), the signs of u folded into the
// row's bits by XOR, and the masked sums of q by byte sums of absolute differences. The only
// approximation is the bytes: |u_j| - d q_j is within d / 2, so each row and group's basis-k term
// moves by at most |r_k| * kGroup * d / 2 from gemv_lut's (tests/quant/fluxbin_test.cc holds it
// to that and to the exact sum of its own bytes). Targets with fewer than 8 float lanes run
// gemv_simd. `scratch` is resized as needed (cols / 2 + groups * (12 + salient) + 2 floats).
void gemv_bytes(const View& v, const float* x, float* y, int64_t row_begin, int64_t row_end,
                std::vector<float>& scratch);

}  // namespace frugal::quant::fluxbin
