// Device decoding of the FP4 formats' small encodings (MXFP4, NVFP4; HBQ's in hbq.cuh): E2M1
// element codes and the E8M0 / UE4M3 block scales. The values are those of quant/fp4_codes.h,
// which the tests use as the oracle; here they are computed from bits instead of tables, so that
// no decoder reads memory besides the weights.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace frugal::cuda {

// Half of the E8M0 scale 2^(e - 127) (the factor that goes with doubled E2M1 values): 2^(e - 128)
// as float bits; e < 2 gives the subnormals 2^-128 and 2^-127, e = 255 is NaN.
__device__ __forceinline__ float e8m0_half_to_float(uint32_t e) {
  if (e == 255u) return __uint_as_float(0x7FC00000u);
  return __uint_as_float(e < 2u ? (0x00200000u << e) : ((e - 1u) << 23));
}

// UE4M3 (E4M3 without its sign bit; bit 7 ignored): subnormal m * 2^-9, normal (1 + m/8) * 2^(e-7),
// 0x7F NaN. A normal value's float bits are the exponent rebiased (e - 7 + 127) and m on top of
// the mantissa.
__device__ __forceinline__ float ue4m3_to_float(uint32_t code) {
  code &= 0x7Fu;
  const uint32_t e = code >> 3, m = code & 7u;
  if (code == 0x7Fu) return __uint_as_float(0x7FC00000u);
  if (e == 0) return static_cast<float>(m) * (1.f / 512.f);
  return __uint_as_float(((e + 120u) << 23) | (m << 20));
}

// The doubled E2M1 values (quant::kE2M1Doubled: 0 1 2 3 4 6 8 12, bit 3 the sign) of the eight
// nibbles of q as signed bytes: .x holds the low nibbles of q's four bytes (byte i of q -> byte i),
// .y the high nibbles. A byte-permute lookup: the low three bits of a nibble pick among the four
// positive and four negative table bytes of its half, bit 3 then picks positive or negative
// (byte_perm reads only the low three bits of each selector nibble).
__device__ __forceinline__ int2 e2m1x8_doubled(uint32_t q) {
  constexpr uint32_t kPos01 = 0x03020100u, kPos23 = 0x0C080604u;  // 0 1 2 3 | 4 6 8 12
  constexpr uint32_t kNeg01 = 0xFDFEFF00u, kNeg23 = 0xF4F8FAFCu;  // 0 -1 -2 -3 | -4 -6 -8 -12
  uint32_t half[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t s = q >> (16 * h);  // nibbles 4h .. 4h + 3 in the selector's four nibbles
    const uint32_t pos = __byte_perm(kPos01, kPos23, s);
    const uint32_t neg = __byte_perm(kNeg01, kNeg23, s);
    // Selector nibble n: byte n of pos (n) or of neg (4 + n), by the sign bit of nibble 4h + n.
    half[h] = __byte_perm(pos, neg, 0x3210u | ((s & 0x8888u) >> 1));
  }
  // half[0] = values of nibbles 0..3 = (byte 0 low, byte 0 high, byte 1 low, byte 1 high),
  // half[1] likewise for bytes 2 and 3: gather the lows and the highs.
  return make_int2(static_cast<int>(__byte_perm(half[0], half[1], 0x6420u)),
                   static_cast<int>(__byte_perm(half[0], half[1], 0x7531u)));
}

// Byte b of w as a signed integer, as float (through the unsigned mantissa trick: no I2F).
__device__ __forceinline__ float sbyte_to_float(uint32_t w, int b) {
  const uint32_t u = ((w >> (8 * b)) & 0xFFu) ^ 0x80u;
  return (__uint_as_float(0x4B000000u | u) - 8388608.f) - 128.f;
}

}  // namespace frugal::cuda
