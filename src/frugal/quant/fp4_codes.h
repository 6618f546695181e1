// The small floating-point encodings of the FP4 formats (MXFP4, NVFP4): E2M1 elements and their
// two kinds of block scale, E8M0 (a power of two) and UE4M3 (E4M3 without its sign bit).
// Encodings as in the OCP Microscaling spec v1.0 and NVIDIA's NVFP4 (see
// docs/quantization.md, "FP4 formats").
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace frugal::quant {

// E2M1 magnitudes (codes 0..7; bit 3 is the sign, so code 8 is -0), doubled so that they are
// integers: the value of code c is kE2M1Doubled[c] / 2. The integer dot products use these and
// halve the block scale instead, exactly as ggml's kvalues_mxfp4.
inline constexpr int8_t kE2M1Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

inline float e2m1_to_f32(uint8_t code) {
  const float v = static_cast<float>(kE2M1Doubled[code & 0xF]) * 0.5f;
  return (code & 8) != 0 && v == 0.f ? -0.f : v;
}

// Round to the nearest E2M1 value, ties to the even code (0.25 -> 0, 0.75 -> 1, 1.25 -> 1,
// 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4), saturating at 6: ModelOpt's NVFP4 element cast. The
// sign bit is set for every v < 0, so small negatives become code 8 (-0), as ModelOpt does.
inline uint8_t e2m1_round_even(float v) {
  const float a = std::fabs(v);
  uint8_t m;
  if (a <= 0.25f) {
    m = 0;
  } else if (a < 0.75f) {
    m = 1;
  } else if (a <= 1.25f) {
    m = 2;
  } else if (a < 1.75f) {
    m = 3;
  } else if (a <= 2.5f) {
    m = 4;
  } else if (a < 3.5f) {
    m = 5;
  } else if (a <= 5.f) {
    m = 6;
  } else {
    m = 7;  // above 5, and NaN: saturate to 6
  }
  return static_cast<uint8_t>(m | (v < 0.f ? 8 : 0));
}

inline float f32_from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// E8M0: 2^(e - 127); 255 is NaN (OCP MX v1.0). e = 0 is the subnormal float 2^-127.
inline float e8m0_to_f32(uint8_t e) {
  if (e == 255) return std::numeric_limits<float>::quiet_NaN();
  return e == 0 ? f32_from_bits(0x00400000u) : f32_from_bits(static_cast<uint32_t>(e) << 23);
}

// Half of e8m0_to_f32(e): the factor that goes with kE2M1Doubled (ggml's GGML_E8M0_TO_FP32_HALF).
inline float e8m0_to_f32_half(uint8_t e) {
  if (e == 255) return std::numeric_limits<float>::quiet_NaN();
  return e < 2 ? f32_from_bits(0x00200000u << e) : f32_from_bits(static_cast<uint32_t>(e - 1) << 23);
}

// UE4M3: E4M3 ("fn": bias 7, no infinities) with the sign bit dropped, since block scales are
// positive. Bits 0..2 mantissa, 3..6 exponent; 0x7F is NaN; bit 7 is ignored on read (a file
// that sets it still decodes to the positive value). Largest 448 (0x7E), smallest 2^-9 (0x01).
struct UE4M3Values {
  float v[128];
  constexpr UE4M3Values() : v{} {
    for (int code = 0; code < 127; ++code) {
      const int e = code >> 3;
      const int m = code & 7;
      // Subnormal m/8 * 2^-6 = m * 2^-9; normal (1 + m/8) * 2^(e-7) = (8 + m) * 2^(e-10).
      float p = 1.f / 512.f;
      for (int k = 1; k < e; ++k) p *= 2.f;  // 2^(e-10) = 2^-9 * 2^(e-1); every step exact
      v[code] = e == 0 ? static_cast<float>(m) * (1.f / 512.f) : static_cast<float>(8 + m) * p;
    }
    v[127] = std::numeric_limits<float>::quiet_NaN();
  }
};
inline constexpr UE4M3Values kUE4M3Values{};

inline float ue4m3_to_f32(uint8_t code) { return kUE4M3Values.v[code & 0x7F]; }

// The UE4M3 code nearest v, ties to even mantissa (a cast to float8_e4m3fn), saturating at 448
// and clamped below at 2^-9 (code 1). NaN gives code 1. Used for NVFP4 block scales, which are
// never zero: ModelOpt clamps them to [2^-9, 448] before the cast.
inline uint8_t ue4m3_from_f32_clamped(float v) {
  if (v >= 448.f) return 0x7E;
  if (!(v >= 0x1p-9f)) return 0x01;  // also NaN
  if (v < 0x1p-6f) {
    // Subnormals are multiples of 2^-9: v * 2^9 is exact, nearbyint rounds ties to even.
    return static_cast<uint8_t>(std::nearbyint(v * 512.f));  // 8 is 2^-6, the first normal: same code
  }
  int k;
  const float f = std::frexp(v, &k);  // v = f * 2^k, f in [0.5, 1)
  int e = k - 1 + 7;                  // biased exponent of v = (2f) * 2^(k-1)
  int m = static_cast<int>(std::nearbyint((2.f * f - 1.f) * 8.f));  // exact: 2f - 1 has <= 24 bits
  if (m == 8) {
    m = 0;
    ++e;
  }
  const int code = (e << 3) | m;
  return static_cast<uint8_t>(code > 0x7E ? 0x7E : code);
}

}  // namespace frugal::quant
