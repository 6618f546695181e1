// HBQ, hierarchical block quantization with significand scaling (arXiv 2609.00450): E2M1 codes
// under a two-level scale, a UE5M3 scale per 128 elements and a 2-bit multiplier per micro-block
// of 8 (HBQ-A) or 32 (HBQ-E). Block layouts in blocks.h; docs/quantization.md, "HBQ".
//
// The multiplier sets are all stored in eighths so that the dot products stay integer within a
// 32-element group (E2M1 doubled times Q8 codes times the multiplier) and take one float multiply
// per group. The significand sets are the paper's: SIG_x = {1 + c / 2^x : c = 0..3}. Weights
// choose SIG_2 or SIG_3 per block; the power-of-two and integer sets exist so that the paper's
// comparison (second-level PoT and INT scales at the same block sizes) runs through the same
// quantizer, kernels and file format, with only the set changed.
#pragma once

#include <cstdint>

namespace frugal::quant {

enum class HbqAlphaSet : uint8_t {
  kSig2 = 0,  // {1, 1.25, 1.5, 1.75}
  kSig3 = 1,  // {1, 1.125, 1.25, 1.375}
  kPow2 = 2,  // {1, 2, 4, 8}
  kInt = 3,   // {1, 2, 3, 4}
  kSig1 = 4,  // {1, 1.5, 2, 2.5}: the paper's set for activations and the KV cache
};
inline constexpr int kHbqAlphaSets = 5;

// Multiplier c of each set, times 8. A set byte beyond the table reads as set 0 (the dequantizers
// mask it), so no file can index out of bounds.
inline constexpr int32_t kHbqAlphaEighths[kHbqAlphaSets][4] = {
    {8, 10, 12, 14}, {8, 9, 10, 11}, {8, 16, 32, 64}, {8, 16, 24, 32}, {8, 12, 16, 20}};

inline int hbq_set_index(uint8_t set) { return set < kHbqAlphaSets ? set : 0; }

// Which sets the quantizer may choose from, per block (the selector byte records the choice).
enum class HbqScaleStrategy : uint8_t {
  kSig,   // SIG_2 or SIG_3, whichever gives the block less weighted squared error (the paper's)
  kPow2,  // always the power-of-two set
  kInt,   // always the integer set
};

// UE5M3: 5 exponent bits (bias 15, as E5M2), 3 mantissa bits, no sign, no infinities or NaN.
// Code 0 is 0 (all-zero blocks), codes 1..7 are subnormal m * 2^-17, the largest (0xFF) is
// 1.875 * 2^16. The range needs no per-tensor scale: weights and activations both fit.
struct UE5M3Values {
  float v[256];
  constexpr UE5M3Values() : v{} {
    for (int code = 0; code < 256; ++code) {
      const int e = code >> 3;
      const int m = code & 7;
      float p = 1.f / 131072.f;              // 2^-17
      for (int k = 1; k < e; ++k) p *= 2.f;  // 2^(e-18), every step exact
      // Subnormal m * 2^-17; normal (8 + m) * 2^(e-18) = (1 + m/8) * 2^(e-15).
      v[code] = e == 0 ? static_cast<float>(m) * (1.f / 131072.f) : static_cast<float>(8 + m) * p;
    }
  }
};
inline constexpr UE5M3Values kUE5M3Values{};

inline float ue5m3_to_f32(uint8_t code) { return kUE5M3Values.v[code]; }

// The smallest nonzero code whose value is >= v (v > 0): a scale that lets nothing clip. Values
// above the largest saturate to 0xFF.
uint8_t ue5m3_ceil(float v);

// Rows of an HBQ tensor (type kHBQ_A or kHBQ_E) from floats; n_per_row a multiple of 128.
// importance: n_per_row column weights for the squared error, or nullptr (all weights 1).
void quantize_rows_hbq_a(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* importance,
                         HbqScaleStrategy strategy);
void quantize_rows_hbq_e(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* importance,
                         HbqScaleStrategy strategy);

// The type table's entries (type_traits.h signatures): SIG strategy, no importance.
void quantize_hbq_a_ref(const float* src, void* dst, int64_t n);
void quantize_hbq_e_ref(const float* src, void* dst, int64_t n);
void quantize_rows_hbq_a_sig(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* importance);
void quantize_rows_hbq_e_sig(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* importance);
void dequantize_hbq_a_ref(const void* src, float* dst, int64_t n);
void dequantize_hbq_e_ref(const void* src, float* dst, int64_t n);
// Against Q8_0 activations: integer sums per 32-element group, one float multiply-add each.
void vec_dot_hbq_a_q8_0_ref(int64_t n, float* s, const void* x, const void* y);
void vec_dot_hbq_e_q8_0_ref(int64_t n, float* s, const void* x, const void* y);

}  // namespace frugal::quant
