// Fast kernels, dispatched at run time to the best SIMD target of the CPU (Highway). Each
// function has the signature of its slot in TypeTraits; the table in type_traits.cc wires them.
//
// gemm kernels accept any shape (nrx, nry). On AVX2 they decode a panel of weight rows once per
// call (simd_panel-inl.h) and stream every activation row past it, so the preferred tile is a
// full panel of rows by many activation rows: the decoding cost is shared by all of them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace frugal::quant::fast {

#define FRUGAL_FAST_TO_FLOAT(name) void to_float_##name(const void* src, float* dst, int64_t n)
#define FRUGAL_FAST_FROM_FLOAT(name) void from_float_##name(const float* src, void* dst, int64_t n)
#define FRUGAL_FAST_VEC_DOT(name) \
  void vec_dot_##name(int64_t n, float* s, const void* x, const void* y)
#define FRUGAL_FAST_GEMM(name)                                                         \
  void gemm_##name(int64_t n, float* s, size_t ldc, const void* x, size_t bx, int nrx, \
                   const void* y, size_t by, int nry)

// simd_float.cc
FRUGAL_FAST_TO_FLOAT(f16);
FRUGAL_FAST_TO_FLOAT(bf16);
FRUGAL_FAST_FROM_FLOAT(f16);
FRUGAL_FAST_FROM_FLOAT(bf16);
FRUGAL_FAST_VEC_DOT(f32);
FRUGAL_FAST_VEC_DOT(f16);
FRUGAL_FAST_VEC_DOT(bf16);
FRUGAL_FAST_GEMM(f32);
FRUGAL_FAST_GEMM(f16);
FRUGAL_FAST_GEMM(bf16);
// s[c * ls] = vec_dot_NAME(n, x, y_c) for c < nry, where y + c * ly holds activation row c as
// floats already rounded to NAME (from_float, then to_float): bitwise equal to vec_dot_NAME one
// row at a time (same accumulators and order), with the weight row x converted once for all rows.
// Products that must match a one-token pass exactly (speculative verification), for much less
// than nry one-row passes.
#define FRUGAL_FAST_VEC_DOT_ROWS(name) \
  void vec_dot_rows_##name(int64_t n, float* s, size_t ls, const void* x, const float* y, size_t ly, int nry)
FRUGAL_FAST_VEC_DOT_ROWS(f32);
FRUGAL_FAST_VEC_DOT_ROWS(f16);
FRUGAL_FAST_VEC_DOT_ROWS(bf16);
inline constexpr int kFloatTileRows = 16;
inline constexpr int kFloatTileCols = 64;

// simd_q8.cc: activation quantizers.
FRUGAL_FAST_FROM_FLOAT(q8_0);
FRUGAL_FAST_FROM_FLOAT(q8_1);
FRUGAL_FAST_FROM_FLOAT(q8_k);

// simd_block32.cc: the 32-element formats.
FRUGAL_FAST_VEC_DOT(q8_0);
FRUGAL_FAST_GEMM(q8_0);
FRUGAL_FAST_VEC_DOT(q4_0);
FRUGAL_FAST_VEC_DOT(q4_1);
FRUGAL_FAST_VEC_DOT(q5_0);
FRUGAL_FAST_VEC_DOT(q5_1);
FRUGAL_FAST_VEC_DOT(iq4_nl);
FRUGAL_FAST_GEMM(q4_0);
FRUGAL_FAST_GEMM(q4_1);
FRUGAL_FAST_GEMM(q5_0);
FRUGAL_FAST_GEMM(q5_1);
FRUGAL_FAST_GEMM(iq4_nl);
FRUGAL_FAST_TO_FLOAT(q8_0);
FRUGAL_FAST_TO_FLOAT(q8_1);
FRUGAL_FAST_TO_FLOAT(q4_0);
FRUGAL_FAST_TO_FLOAT(q4_1);
FRUGAL_FAST_TO_FLOAT(q5_0);
FRUGAL_FAST_TO_FLOAT(q5_1);
FRUGAL_FAST_TO_FLOAT(iq4_nl);
inline constexpr int kBlockTileRows = 8;
inline constexpr int kBlockTileCols = 64;

// simd_fp4.cc: MXFP4 and NVFP4 (NVFP4 without its per-tensor global scale).
FRUGAL_FAST_VEC_DOT(mxfp4);
FRUGAL_FAST_VEC_DOT(nvfp4);
FRUGAL_FAST_TO_FLOAT(mxfp4);
FRUGAL_FAST_TO_FLOAT(nvfp4);

// simd_hbq.cc: HBQ-A and HBQ-E.
FRUGAL_FAST_VEC_DOT(hbq_a);
FRUGAL_FAST_VEC_DOT(hbq_e);
FRUGAL_FAST_TO_FLOAT(hbq_a);
FRUGAL_FAST_TO_FLOAT(hbq_e);

// simd_kquant.cc: the K-quants.
FRUGAL_FAST_VEC_DOT(q2_k);
FRUGAL_FAST_VEC_DOT(q3_k);
FRUGAL_FAST_VEC_DOT(q4_k);
FRUGAL_FAST_VEC_DOT(q5_k);
FRUGAL_FAST_VEC_DOT(q6_k);
FRUGAL_FAST_GEMM(q2_k);
FRUGAL_FAST_GEMM(q3_k);
FRUGAL_FAST_GEMM(q4_k);
FRUGAL_FAST_GEMM(q5_k);
FRUGAL_FAST_GEMM(q6_k);
inline constexpr int kKTileRows = 8;
inline constexpr int kKTileCols = 64;

FRUGAL_FAST_TO_FLOAT(q8_k);
FRUGAL_FAST_TO_FLOAT(q2_k);
FRUGAL_FAST_TO_FLOAT(q3_k);
FRUGAL_FAST_TO_FLOAT(q4_k);
FRUGAL_FAST_TO_FLOAT(q5_k);
FRUGAL_FAST_TO_FLOAT(q6_k);

// simd_q4_0_gemv.cc: Q4_0 rows against activations in the Q8 group layout, for one-token
// products (decode). An activation row of n elements (n a multiple of 32) is ceil(n / 256)
// groups; the last is zero-padded. Codes and d are those of Q8_0 (from_float_q8_0), so a dot
// equals the Q4_0 x Q8_0 reference dot up to float summation order.
inline constexpr int64_t kQ8GroupElems = 256;
struct Q8Group {
  int8_t qs[kQ8GroupElems];  // codes of 8 Q8_0 blocks, in element order
  float d[8];                // block scales (Q8_0's fp16 d, as float)
  float c[8];                // -8 * d * sum(block codes): Q4_0's code offset, applied per block
  int32_t o[8];              // -8 * sum(block codes), the same offset before scaling
};
int64_t q8_group_bytes(int64_t n);
FRUGAL_FAST_FROM_FLOAT(q8_group);
FRUGAL_FAST_VEC_DOT(q4_0_q8_group);
// Whether the dispatched target runs a wide kernel (else a scalar loop: callers should prefer
// the Q8_0 path).
bool q4_0_q8_group_is_wide();

// simd_q4_0_gemm.cc: Q4_0 (and Q8_0) rows against many activation rows in the Q8 group layout (prefill),
// as an int8 product with AVX-512 VNNI. Weight rows are first packed in panels of 16 rows:
// per block, the 16 row scales (float) and the codes (0..15) as 8 steps of 16 rows x 4 bytes,
// so one 512-bit register holds 4 codes of each of 16 rows. Rows past `rows` are zero.
inline constexpr int kQ4PanelRows = 16;
int64_t q4_0_panels_bytes(int64_t rows, int64_t n);
void pack_q4_0_panels(const void* x, size_t bx, int64_t rows, int64_t n, void* dst);
// For r < rows, c < ncols: y[c * ldy + r] = dot(row r of the panels, activation row c), where
// activation row c starts at act + c * act_stride bytes.
void gemm_q4_0_panels(int64_t n, const void* panels, int64_t rows, const void* act,
                      size_t act_stride, int64_t ncols, float* y, size_t ldy);
// Q8_0 rows in the same panels (q4_0_panels_bytes of them), each code stored plus 128.
void pack_q8_0_panels(const void* x, size_t bx, int64_t rows, int64_t n, void* dst);
void gemm_q8_0_panels(int64_t n, const void* panels, int64_t rows, const void* act,
                      size_t act_stride, int64_t ncols, float* y, size_t ldy);
// Whether gemm_q4_0_panels and gemm_q8_0_panels run the VNNI kernel here (else a scalar loop).
bool q4_0_panels_are_fast();

// simd_q4_0x8.cc: Q4_0 rows repacked in groups of 8 for one-token products (AVX2). A group of 8
// rows of n elements (n a multiple of 32) becomes n / 32 BlockQ4_0x8, the same bytes as the 8
// rows: per block, the 8 rows' scales, then 4 steps of 8 rows x 4 code bytes (row r's bytes
// 4k..4k+3 at qs[32k + 4r]), so one 256-bit load holds 8 codes of each of 8 rows.
inline constexpr int kQ4x8Rows = 8;
struct BlockQ4_0x8 {
  uint16_t d[8];    // fp16 scales of rows 0..7
  uint8_t qs[128];  // qs[32k + 4r + i] = row r's qs[4k + i], k in 0..3, i in 0..3
};
static_assert(sizeof(BlockQ4_0x8) == 8 * 18, "a group holds exactly the bytes of its 8 Q4_0 rows");
// In place: 8 consecutive Q4_0 rows of n elements at rows8 become the group layout.
void repack_q4_0x8(void* rows8, int64_t n);
// The inverse: `n_groups` groups of n elements become 8 * n_groups Q4_0 rows at `rows` (n / 32
// blocks each, back to back), the bytes they had before repack_q4_0x8.
void unpack_q4_0x8(const void* groups, int64_t n_groups, int64_t n, void* rows);
// Row r (0..7) of a group as floats (the scalar reference of the layout: equals to_float_q4_0 of
// the row before repacking, exactly).
void to_float_q4_0x8_row(const void* group, int r, int64_t n, float* dst);
// All 8 rows of a group as floats: row r at dst + r * ld.
void to_float_q4_0x8(const void* group, int64_t n, float* dst, int64_t ld);
// y[8g + r] = dot(row r of group g, activation row in the Q8 group layout), g < n_groups; groups
// follow each other (n / 32 blocks apart). Equals the Q4_0 x Q8_0 dot of the row up to float
// summation order.
void gemv_q4_0x8(int64_t n, const void* groups, int64_t n_groups, const void* act, float* y);
// Whether gemv_q4_0x8 runs the AVX2 kernel here (else a scalar loop).
bool q4_0x8_is_fast();
// Whether repacking pays here: the dispatched target is AVX2 or AVX-512 (one-token products
// measured faster than the row kernels of simd_q4_0_gemv.cc on both: 1.55x on an AVX2 EPYC,
// 1.30x on an AVX-512 EPYC, docs/benchmarks.md). Prefill on AVX-512 unpacks each block of groups
// back to rows for its VNNI panels (backend/cpu/matmul.cc).
bool q4_0x8_repack_wins();

#undef FRUGAL_FAST_TO_FLOAT
#undef FRUGAL_FAST_FROM_FLOAT
#undef FRUGAL_FAST_VEC_DOT
#undef FRUGAL_FAST_GEMM

// Name of the target the kernels dispatch to now ("AVX2", "AVX3", "SSE4", "EMU128", ...).
const char* dispatched_target_name();

}  // namespace frugal::quant::fast
