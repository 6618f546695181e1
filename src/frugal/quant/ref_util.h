// Small helpers shared by the reference quantizers.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace frugal::quant {

// Round half to even through the 1.5*2^23 trick (exact for |v| < 2^22), the rounding ggml's
// K-quant quantizers use; C's roundf (ties away from zero) is used by the 32-element formats.
inline int nearest_int(float v) {
  const float shifted = v + 12582912.f;
  int32_t bits;
  std::memcpy(&bits, &shifted, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

// The element of largest magnitude, with its sign; the first one wins ties.
inline float signed_absmax(const float* x, int n) {
  float amax = 0.f;
  float max = 0.f;
  for (int i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (a > amax) {
      amax = a;
      max = x[i];
    }
  }
  return max;
}

inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// The 5-bit codes (element order) of a Q5_0/Q5_1 block: nibbles plus bit e of the LE u32 qh.
inline void unpack_codes_q5(const uint8_t* qs, const uint8_t* qh_bytes, int* q) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 16; ++j) {
    q[j] = (qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1) << 4);
    q[j + 16] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
  }
}

}  // namespace frugal::quant
