// Scalar reference conversions and dot products, one .cc per format. They are the oracle for
// the SIMD kernels and define the bytes we write: every format quantizes exactly as ggml's code
// (the reference row quantizers, and for model files the importance-aware searches
// llama-quantize runs), so `frugal quantize` writes llama-quantize's bytes.
#pragma once

#include <cstdint>

namespace frugal::quant {

// Signatures follow type_traits.h: to_float(src, dst, n), from_float(src, dst, n),
// vec_dot(n, s, x, y). n is a multiple of the block size.
#define FRUGAL_QUANT_DECLARE_REF(name)                                  \
  void dequantize_##name##_ref(const void* src, float* dst, int64_t n); \
  void quantize_##name##_ref(const float* src, void* dst, int64_t n)

FRUGAL_QUANT_DECLARE_REF(f32);
FRUGAL_QUANT_DECLARE_REF(f16);
FRUGAL_QUANT_DECLARE_REF(bf16);
FRUGAL_QUANT_DECLARE_REF(q8_0);
FRUGAL_QUANT_DECLARE_REF(q8_1);
FRUGAL_QUANT_DECLARE_REF(q8_k);
FRUGAL_QUANT_DECLARE_REF(q4_0);
FRUGAL_QUANT_DECLARE_REF(q4_1);
FRUGAL_QUANT_DECLARE_REF(q5_0);
FRUGAL_QUANT_DECLARE_REF(q5_1);
FRUGAL_QUANT_DECLARE_REF(q2_k);
FRUGAL_QUANT_DECLARE_REF(q3_k);
FRUGAL_QUANT_DECLARE_REF(q4_k);
FRUGAL_QUANT_DECLARE_REF(q5_k);
FRUGAL_QUANT_DECLARE_REF(q6_k);
FRUGAL_QUANT_DECLARE_REF(iq4_nl);
FRUGAL_QUANT_DECLARE_REF(mxfp4);
// NVFP4's row reference quantizes with a global scale of 1 (block scales alone); model files
// use quantize_rows_nvfp4_scaled with the tensor's global scale.
FRUGAL_QUANT_DECLARE_REF(nvfp4);

#undef FRUGAL_QUANT_DECLARE_REF

// Rows of a weight matrix quantized as llama-quantize writes them (ggml_quantize_chunk):
// `importance` holds n_per_row column weights (a row of an importance matrix) or is nullptr.
// Without it most formats use their reference above; IQ4_NL always runs its weighted search.
// Formats without an importance-aware search (floats, Q8_0) have none here.
#define FRUGAL_QUANT_DECLARE_ROWS(name)                                                     \
  void quantize_rows_##name(const float* src, void* dst, int64_t nrows, int64_t n_per_row, \
                            const float* importance)

FRUGAL_QUANT_DECLARE_ROWS(q4_0);
FRUGAL_QUANT_DECLARE_ROWS(q4_1);
FRUGAL_QUANT_DECLARE_ROWS(q5_0);
FRUGAL_QUANT_DECLARE_ROWS(q5_1);
FRUGAL_QUANT_DECLARE_ROWS(q2_k);
FRUGAL_QUANT_DECLARE_ROWS(q3_k);
FRUGAL_QUANT_DECLARE_ROWS(q4_k);
FRUGAL_QUANT_DECLARE_ROWS(q5_k);
FRUGAL_QUANT_DECLARE_ROWS(q6_k);
FRUGAL_QUANT_DECLARE_ROWS(iq4_nl);

#undef FRUGAL_QUANT_DECLARE_ROWS

void vec_dot_f32_ref(int64_t n, float* s, const void* x, const void* y);
void vec_dot_f16_ref(int64_t n, float* s, const void* x, const void* y);
void vec_dot_bf16_ref(int64_t n, float* s, const void* x, const void* y);
void vec_dot_q8_0_q8_0_ref(int64_t n, float* s, const void* x, const void* y);
void vec_dot_q4_0_q8_0_ref(int64_t n, float* s, const void* x, const void* y);
void vec_dot_q4_1_q8_1_ref(int64_t n, float* s, const void* x, const void* y);
void vec_dot_q5_0_q8_0_ref(int64_t n, float* s, const void* x, const void* y);
void vec_dot_q5_1_q8_1_ref(int64_t n, float* s, const void* x, const void* y);
void vec_dot_iq4_nl_q8_0_ref(int64_t n, float* s, const void* x, const void* y);
void vec_dot_mxfp4_q8_0_ref(int64_t n, float* s, const void* x, const void* y);
// Without the global scale: the caller multiplies by it (WeightTensor::scale).
void vec_dot_nvfp4_q8_0_ref(int64_t n, float* s, const void* x, const void* y);
void vec_dot_q2_k_q8_k_ref(int64_t n, float* s, const void* x, const void* y);
void vec_dot_q3_k_q8_k_ref(int64_t n, float* s, const void* x, const void* y);
void vec_dot_q4_k_q8_k_ref(int64_t n, float* s, const void* x, const void* y);
void vec_dot_q5_k_q8_k_ref(int64_t n, float* s, const void* x, const void* y);
void vec_dot_q6_k_q8_k_ref(int64_t n, float* s, const void* x, const void* y);

// NVFP4's per-tensor global scale (ModelOpt's weight_scale_2): amax(|w|) / (6 * 448), so the
// largest block scale lands on E4M3's largest value; 1 for an all-zero tensor.
float nvfp4_global_scale(float amax);
// Rows quantized as ModelOpt does for a tensor whose global scale is `global_scale`; dequantized
// values are the to_float values times global_scale.
void quantize_rows_nvfp4_scaled(const float* src, void* dst, int64_t nrows, int64_t n_per_row, float global_scale);
// The two steps of one 16-element sub-block, shared with the scale search of nvfp4_hscale.h:
// RTN's UE4M3 scale code (amax / (6 * g), 1.0 for an all-zero sub-block), and the eight code
// bytes of the sub-block at a given scale code (element j low nibble, j + 8 high).
uint8_t nvfp4_rtn_scale_code(const float* x, float global_scale);
void nvfp4_encode_subblock(const float* x, uint8_t scale_code, float global_scale, uint8_t* qs);

}  // namespace frugal::quant
