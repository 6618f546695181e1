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
  kHbq = 4,      // HBQ per token (keys and values alike): E2M1 codes, UE5M3 scale, SIG_1 multiplier per 8
};

inline constexpr int kKvGroup = 32;

Result<KvQuant> parse_kv_quant(const std::string& name);  // "none", "int8", "int4", "hyquant", "hbq"
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

// HBQ rows (kHbq; docs/quantization.md "HBQ", docs/kv-cache.md): each row of head_dim floats, key
// or value, is cut into L1 blocks of kv_hbq_block(head_dim) channels, each with a UE5M3 scale s,
// and micro-blocks of kKvHbqMicro channels, each with a multiplier alpha from SIG_1 = {1, 1.5, 2,
// 2.5}; an element is s * alpha * e for an E2M1 code e (4 bits, packed as int4's codes: channel 2j
// in the low nibble of byte j). Rows are quantized alone, so no token's error depends on another's.
//
// Params of one row (uint16 words), per L1 block: the scale code, then the 2-bit multiplier codes
// of its micro-blocks, eight to a word, lowest bits first.
//
// Error bound (what the tests check): at the scale s0 = the smallest UE5M3 value >= amax / (6 *
// 2.5) and alpha = 2.5 nothing clips and each element is within one E2M1 half-gap (<= 1 step
// d = 2.5 * s0 <= 2.5 * 1.125 * amax / 15) of its value; the quantizer keeps the (scale, multipliers)
// of least squared error among s0 and the code below it, so an L1 block's squared error is at most
// that of this grid, and at most L1 * (0.1875 * amax)^2.
inline constexpr int kKvHbqMicro = 8;
// The L1 block: the whole row up to 128 channels (the paper's 128 where the head is that wide),
// else 128 or 64 where it divides the row; 0 where neither fits (kv-quant hbq refused).
int kv_hbq_block(int head_dim);
// uint16 words of params per row, and per L1 block of l1 channels.
int kv_hbq_param_words(int head_dim);
inline int kv_hbq_block_words(int l1) { return 1 + (l1 / kKvHbqMicro + 7) / 8; }
void kv_hbq_quantize_row(const float* src, int head_dim, uint8_t* codes, uint16_t* params);
void kv_hbq_dequantize_row(const uint8_t* codes, const uint16_t* params, int head_dim, float* out);
// The step of micro-block m (channels [8m, 8m + 8)) of a row, divided by 2 so that it multiplies
// the doubled E2M1 value (kE2M1Doubled): every product is exact in float.
float kv_hbq_half_step(const uint16_t* params, int head_dim, int m);

}  // namespace frugal
