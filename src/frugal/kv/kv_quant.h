// KV quantization formats (KIVI layout): keys per channel over groups of kKvGroup consecutive
// tokens, values per token over groups of kKvGroup channels; asymmetric, one FP16 scale and one FP16
// minimum per group, codes of 8 or 4 bits (4-bit codes packed two per byte, low nibble first).
// These are the scalar reference routines; the cache stores exactly what they write.
//
// Error bound (what the tests check): every dequantized element x' of a group whose FP16 step is s
// satisfies |x - x'| <= s/2 (+ float rounding), because the minimum is rounded down and the step up
// to FP16, so the grid [min, min + qmax * s] covers the group.
#pragma once

#include <cstdint>
#include <string>

#include "frugal/core/status.h"

namespace frugal {

enum class KvQuant : int {
  kNone = 0,     // F16/F32 rows (KvCacheOptions::dtype)
  kInt8 = 1,     // 8-bit codes
  kInt4 = 2,     // 4-bit codes
  kHyQuant = 3,  // 4-bit codes, plus FP16 for a recent window and the top attended ("vertical") tokens
};

inline constexpr int kKvGroup = 32;

Result<KvQuant> parse_kv_quant(const std::string& name);  // "none", "int8", "int4", "hyquant"
const char* kv_quant_name(KvQuant q);
int kv_quant_bits(KvQuant q);  // 0 for kNone

// Bytes of one row of codes.
inline int kv_code_bytes(int head_dim, int bits) { return head_dim * bits / 8; }

// Keys: `n` rows (1 <= n <= kKvGroup) of `head_dim` floats, `src_stride` floats apart, become
// codes rows (`code_stride` bytes apart) and params [head_dim][2] = (step, min) as FP16 bits.
void kv_quantize_key_group(const float* src, int64_t src_stride, int n, int head_dim, int bits, uint8_t* codes,
                           int64_t code_stride, uint16_t* params);
// One key row back to floats with its group's params.
void kv_dequantize_key_row(const uint8_t* codes, const uint16_t* params, int head_dim, int bits, float* out);

// Values: one row of `head_dim` floats (a multiple of kKvGroup) becomes codes and params
// [head_dim / kKvGroup][2] = (step, min).
void kv_quantize_value_row(const float* src, int head_dim, int bits, uint8_t* codes, uint16_t* params);
void kv_dequantize_value_row(const uint8_t* codes, const uint16_t* params, int head_dim, int bits, float* out);

}  // namespace frugal
