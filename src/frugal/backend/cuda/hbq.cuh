// Device decoding of HBQ's block headers (quant/hbq.h, blocks.h): the UE5M3 scale and the 2-bit
// multiplier codes of the micro-blocks, for the decoders in gemv.cu and gemv_q8.cu. HBQ's
// elements are E2M1 codes (fp4.cuh).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace frugal::cuda {

// UE5M3 (bias 15, no sign, no NaN): code 0 is 0, subnormal m * 2^-17, normal (1 + m/8) * 2^(e-15).
__device__ __forceinline__ float ue5m3_to_float(uint32_t code) {
  const uint32_t e = (code >> 3) & 31u, m = code & 7u;
  if (e == 0) return static_cast<float>(m) * (1.f / 131072.f);
  return __uint_as_float(((e + 112u) << 23) | (m << 20));
}

// The four multipliers of set `set` in eighths (quant::kHbqAlphaEighths), one per byte: code c is
// byte c. A set byte beyond the table reads as set 0, as on the CPU. Selects, not an array index:
// an indexed table would go through local or constant memory per element.
__device__ __forceinline__ uint32_t hbq_alpha_set(uint32_t set) {
  return set == 1u ? 0x0B0A0908u      // SIG_3 {8, 9, 10, 11}
       : set == 2u ? 0x40201008u      // powers of two {8, 16, 32, 64}
       : set == 3u ? 0x20181008u      // integers {8, 16, 24, 32}
       : set == 4u ? 0x14100C08u      // SIG_1 {8, 12, 16, 20}
                   : 0x0E0C0A08u;     // SIG_2 {8, 10, 12, 14} (set 0 and anything unknown)
}

// Multiplier (in eighths) of 2-bit code c from a packed set.
__device__ __forceinline__ int hbq_alpha(uint32_t alphas, uint32_t c) {
  return static_cast<int>((alphas >> (8 * (c & 3u))) & 0xFFu);
}

}  // namespace frugal::cuda
