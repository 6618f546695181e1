// MXFP4 and NVFP4 against an independent float64 model of their encodings and rounding rules:
// every E2M1 code and every valid E4M3/E8M0 scale value, the reference quantizers on fresh random
// blocks (zero blocks, outliers, negative zero, saturation, exact ties), dequantization, and the
// dot products against Q8_0 activations.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "frugal/core/half.h"
#include "frugal/quant/blocks.h"
#include "frugal/quant/fp4_codes.h"
#include "frugal/quant/reference.h"
#include "frugal/quant/type_traits.h"
#include "quant/quant_test_util.h"

namespace frugal {
namespace {

using quant::BlockMXFP4;
using quant::BlockNVFP4;

// ---- The float64 model: values from the spec, not from the library's tables. ----

// E2M1 magnitude of code c (bits: sign, 2 exponent bits with bias 1, 1 mantissa bit).
double e2m1_value(int c) {
  const int e = (c >> 1) & 3;
  const int m = c & 1;
  const double mag = e == 0 ? 0.5 * m : std::ldexp(1.0 + 0.5 * m, e - 1);
  return (c & 8) ? -mag : mag;
}

// E4M3 value of a positive code (bias 7, subnormals at exponent 0).
double e4m3_value(int c) {
  const int e = (c >> 3) & 15;
  const int m = c & 7;
  return e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
}

// Nearest E4M3 code to v in [2^-9, 448] (clamped), ties to the even code: exhaustive.
int e4m3_nearest(double v) {
  v = std::min(std::max(v, std::ldexp(1.0, -9)), 448.0);
  int best = 1;
  for (int c = 2; c <= 0x7E; ++c) {
    const double d = std::fabs(e4m3_value(c) - v);
    const double b = std::fabs(e4m3_value(best) - v);
    if (d < b || (d == b && c % 2 == 0)) best = c;
  }
  return best;
}

// Nearest E2M1 magnitude code of |v|, saturating at 6; ties to the even code (NVFP4) or to the
// smaller magnitude (MXFP4). The sign bit follows v < 0 (NVFP4) or the chosen value (MXFP4).
int e2m1_nearest_magnitude(double a, bool ties_to_even) {
  int best = 0;
  for (int c = 1; c < 8; ++c) {
    const double d = std::fabs(e2m1_value(c) - a);
    const double b = std::fabs(e2m1_value(best) - a);
    if (d < b || (d == b && ties_to_even && c % 2 == 0)) best = c;
  }
  return best;
}

// MXFP4 block per ggml's rule, in float64 apart from the exponent (floorf(log2f(amax)), as
// specified).
BlockMXFP4 model_mxfp4(const float* x) {
  double amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(static_cast<double>(x[j])));
  BlockMXFP4 b{};
  int e = 0;
  if (amax > 0) {
    e = static_cast<int>(std::floor(std::log2(static_cast<float>(amax)))) - 2 + 127;
    e = std::min(std::max(e, 0), 254);
  }
  b.e = static_cast<uint8_t>(e);
  const double d = std::ldexp(1.0, e - 127);
  auto code = [&](float v) {
    const int m = e2m1_nearest_magnitude(std::fabs(v) / d, false);
    return static_cast<uint8_t>(m == 0 ? 0 : (m | (v < 0 ? 8 : 0)));
  };
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(code(x[j]) | (code(x[j + 16]) << 4));
  return b;
}

// NVFP4 block per ModelOpt's recipe; the quotients are float32 operations as the recipe states,
// every rounding decision is made in float64.
BlockNVFP4 model_nvfp4(const float* x, float g) {
  BlockNVFP4 b{};
  for (int s = 0; s < 4; ++s) {
    double amax = 0;
    for (int j = 0; j < 16; ++j) amax = std::max(amax, std::fabs(static_cast<double>(x[16 * s + j])));
    const int sc = amax == 0 ? 0x38 : e4m3_nearest(static_cast<float>(amax) / (6.f * g));
    b.d[s] = static_cast<uint8_t>(sc);
    const float div = static_cast<float>(e4m3_value(sc)) * g;
    auto code = [&](float v) {
      const float q = v / div;
      return static_cast<uint8_t>(e2m1_nearest_magnitude(std::fabs(static_cast<double>(q)), true) | (q < 0 ? 8 : 0));
    };
    for (int j = 0; j < 8; ++j) {
      b.qs[8 * s + j] = static_cast<uint8_t>(code(x[16 * s + j]) | (code(x[16 * s + j + 8]) << 4));
    }
  }
  return b;
}

// Random blocks of every kind the rules distinguish.
std::vector<float> fp4_test_row(int64_t n, uint32_t seed, double tie_unit) {
  std::vector<float> x = quant_test::random_row(n, seed);
  std::mt19937 rng(seed);
  for (int64_t b = 0; b + 32 <= n; b += 32) {
    float* p = x.data() + b;
    switch (rng() % 6) {
      case 0: std::fill(p, p + 32, 0.f); break;  // all zero
      case 1:                                    // negative zeros and tiny negatives
        for (int j = 0; j < 32; ++j) p[j] = j % 3 == 0 ? -0.f : (j % 3 == 1 ? -1e-6f * j : p[j]);
        break;
      case 2: {  // exact ties of the element grid: midpoints of E2M1 values times tie_unit
        const double mids[] = {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0};
        for (int j = 0; j < 32; ++j) p[j] = static_cast<float>((j % 2 ? -1 : 1) * mids[j % 8] * tie_unit);
        break;
      }
      case 3: p[rng() % 32] *= 1e4f; break;  // one huge outlier: the rest underflow to 0
      default: break;
    }
  }
  return x;
}

TEST(Fp4Encodings, EveryE2M1CodeRoundTrips) {
  for (int c = 0; c < 16; ++c) {
    const float v = quant::e2m1_to_f32(static_cast<uint8_t>(c));
    EXPECT_EQ(static_cast<double>(v), e2m1_value(c)) << c;
    EXPECT_EQ(std::signbit(v), c >= 8) << c;  // code 8 is -0
    EXPECT_EQ(quant::kE2M1Doubled[c] * 0.5, e2m1_value(c)) << c;
    // -0 encodes as +0 (ModelOpt sets the sign only for v < 0): the value still round-trips.
    EXPECT_EQ(quant::e2m1_round_even(v), c == 8 ? 0 : c) << c;
  }
}

TEST(Fp4Encodings, E2M1RoundingTiesToEvenAndSaturates) {
  const float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.f};
  const int want[] = {0, 2, 2, 4, 4, 6, 6};
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(quant::e2m1_round_even(ties[i]), want[i]) << ties[i];
    EXPECT_EQ(quant::e2m1_round_even(-ties[i]), want[i] | 8) << -ties[i];
  }
  EXPECT_EQ(quant::e2m1_round_even(5.0001f), 7);
  EXPECT_EQ(quant::e2m1_round_even(1e30f), 7);
  EXPECT_EQ(quant::e2m1_round_even(-std::numeric_limits<float>::infinity()), 15);
  EXPECT_EQ(quant::e2m1_round_even(-0.1f), 8);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-8.f, 8.f);
  for (int i = 0; i < 20000; ++i) {
    const float v = u(rng);
    const int m = e2m1_nearest_magnitude(std::fabs(static_cast<double>(v)), true);
    EXPECT_EQ(quant::e2m1_round_even(v), m | (v < 0 ? 8 : 0)) << v;
  }
}

TEST(Fp4Encodings, EveryValidE4M3ScaleRoundTrips) {
  EXPECT_EQ(quant::ue4m3_to_f32(0x7E), 448.f);
  EXPECT_EQ(quant::ue4m3_to_f32(0x01), std::ldexp(1.f, -9));
  EXPECT_EQ(quant::ue4m3_to_f32(0x38), 1.f);
  EXPECT_TRUE(std::isnan(quant::ue4m3_to_f32(0x7F)));
  int valid = 0;
  for (int c = 1; c <= 0x7E; ++c) {
    const float v = quant::ue4m3_to_f32(static_cast<uint8_t>(c));
    EXPECT_EQ(static_cast<double>(v), e4m3_value(c)) << c;
    EXPECT_EQ(quant::ue4m3_to_f32(static_cast<uint8_t>(c | 0x80)), v) << c;  // the sign bit is ignored
    EXPECT_EQ(quant::ue4m3_from_f32_clamped(v), c) << c;
    ++valid;
  }
  EXPECT_EQ(valid, 126);
  // Clamping: below 2^-9 (and zero, NaN) to code 1, above 448 to 0x7E.
  EXPECT_EQ(quant::ue4m3_from_f32_clamped(0.f), 1);
  EXPECT_EQ(quant::ue4m3_from_f32_clamped(1e-7f), 1);
  EXPECT_EQ(quant::ue4m3_from_f32_clamped(std::numeric_limits<float>::quiet_NaN()), 1);
  EXPECT_EQ(quant::ue4m3_from_f32_clamped(1e6f), 0x7E);
  EXPECT_EQ(quant::ue4m3_from_f32_clamped(std::numeric_limits<float>::infinity()), 0x7E);
  // Random values, including exact midpoints between neighbouring codes.
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> le(-10.0, 9.0);
  for (int i = 0; i < 20000; ++i) {
    float v = static_cast<float>(std::exp2(le(rng)));
    if (i % 4 == 0) {
      const int c = 1 + static_cast<int>(rng() % 0x7D);
      v = static_cast<float>((e4m3_value(c) + e4m3_value(c + 1)) / 2);  // exact in float
    }
    EXPECT_EQ(quant::ue4m3_from_f32_clamped(v), e4m3_nearest(v)) << v;
  }
}

TEST(Fp4Encodings, EveryE8M0ScaleDecodes) {
  for (int e = 0; e < 255; ++e) {
    EXPECT_EQ(static_cast<double>(quant::e8m0_to_f32(static_cast<uint8_t>(e))), std::ldexp(1.0, e - 127)) << e;
    EXPECT_EQ(static_cast<double>(quant::e8m0_to_f32_half(static_cast<uint8_t>(e))), std::ldexp(1.0, e - 128)) << e;
  }
  EXPECT_TRUE(std::isnan(quant::e8m0_to_f32(255)));
  EXPECT_TRUE(std::isnan(quant::e8m0_to_f32_half(255)));
  // The MXFP4 quantizer picks every scale from 2^-127 to 2^125 for blocks whose amax is 4 * 2^k
  // (4 * 2^126 is past float's range).
  for (int e = 0; e <= 252; ++e) {
    std::vector<float> x(32, 0.f);
    x[7] = -static_cast<float>(std::ldexp(4.0, e - 127));
    BlockMXFP4 b{};
    quant::quantize_mxfp4_ref(x.data(), &b, 32);
    EXPECT_EQ(b.e, e) << e;
    std::vector<float> y(32);
    quant::dequantize_mxfp4_ref(&b, y.data(), 32);
    EXPECT_EQ(y[7], x[7]) << e;
  }
  // Out of range inputs get a defined, clamped exponent (ggml's conversion would overflow).
  std::vector<float> x(32, 0.f);
  x[0] = std::numeric_limits<float>::infinity();
  BlockMXFP4 b{};
  quant::quantize_mxfp4_ref(x.data(), &b, 32);
  EXPECT_EQ(b.e, 254);
  x[0] = std::numeric_limits<float>::denorm_min();
  quant::quantize_mxfp4_ref(x.data(), &b, 32);
  EXPECT_EQ(b.e, 0);
}

TEST(Mxfp4Reference, QuantizeMatchesFloat64Model) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const int64_t n = 32 * (8 + seed);
    const std::vector<float> x = fp4_test_row(n, seed * 31 + 1, std::ldexp(1.0, static_cast<int>(seed % 7) - 3));
    std::vector<BlockMXFP4> got(static_cast<size_t>(n / 32));
    quant::quantize_mxfp4_ref(x.data(), got.data(), n);
    std::vector<float> y(static_cast<size_t>(n));
    quant::dequantize_mxfp4_ref(got.data(), y.data(), n);
    for (int64_t b = 0; b < n / 32; ++b) {
      const BlockMXFP4 want = model_mxfp4(x.data() + b * 32);
      ASSERT_EQ(got[b].e, want.e) << "seed " << seed << " block " << b;
      ASSERT_EQ(std::memcmp(got[b].qs, want.qs, 16), 0) << "seed " << seed << " block " << b;
      for (int j = 0; j < 32; ++j) {
        const int c = j < 16 ? want.qs[j] & 0xF : want.qs[j - 16] >> 4;
        ASSERT_EQ(static_cast<double>(y[b * 32 + j]), e2m1_value(c) * std::ldexp(1.0, want.e - 127));
      }
    }
  }
}

TEST(Mxfp4Reference, TiesGoToTheSmallerMagnitude) {
  // amax 6 -> e = floor(log2 6) - 2 + 127 = 127: the grid is the E2M1 values themselves.
  std::vector<float> x = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.f, 6.f};
  for (int i = 0; i < 8; ++i) x.push_back(-x[static_cast<size_t>(i)]);
  x.resize(32, 0.f);
  BlockMXFP4 b{};
  quant::quantize_mxfp4_ref(x.data(), &b, 32);
  EXPECT_EQ(b.e, 127);
  std::vector<float> y(32);
  quant::dequantize_mxfp4_ref(&b, y.data(), 32);
  const float want[] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(y[static_cast<size_t>(i)], want[i]) << x[static_cast<size_t>(i)];
    EXPECT_EQ(y[static_cast<size_t>(i + 8)], -want[i]) << x[static_cast<size_t>(i + 8)];
  }
}

TEST(Nvfp4Reference, QuantizeMatchesFloat64Model) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const int64_t n = 64 * (4 + seed);
    const std::vector<float> x = fp4_test_row(n, seed * 17 + 3, std::ldexp(1.0, static_cast<int>(seed % 5) - 2));
    // The row reference (global scale 1) and the model-file path with the row's global scale.
    float amax = 0.f;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    for (const float g : {1.f, quant::nvfp4_global_scale(amax)}) {
      std::vector<BlockNVFP4> got(static_cast<size_t>(n / 64));
      if (g == 1.f) {
        quant::quantize_nvfp4_ref(x.data(), got.data(), n);
      } else {
        const int64_t nrows = (n / 64) % 2 == 0 ? 2 : 1;
        quant::quantize_rows_nvfp4_scaled(x.data(), got.data(), nrows, n / nrows, g);
      }
      std::vector<float> y(static_cast<size_t>(n));
      quant::dequantize_nvfp4_ref(got.data(), y.data(), n);
      for (int64_t b = 0; b < n / 64; ++b) {
        const BlockNVFP4 want = model_nvfp4(x.data() + b * 64, g);
        ASSERT_EQ(std::memcmp(got[b].d, want.d, 4), 0) << "seed " << seed << " block " << b << " g " << g;
        ASSERT_EQ(std::memcmp(got[b].qs, want.qs, 32), 0) << "seed " << seed << " block " << b << " g " << g;
        for (int j = 0; j < 64; ++j) {
          const int s = j / 16;
          const int k = j % 16;
          const uint8_t byte = want.qs[8 * s + k % 8];
          const int c = k < 8 ? byte & 0xF : byte >> 4;
          ASSERT_EQ(static_cast<double>(y[b * 64 + j]), e2m1_value(c) * e4m3_value(want.d[s])) << j;
        }
      }
    }
  }
}

TEST(Nvfp4Reference, GlobalScaleMapsTheTensorMaximumToTheTopOfBothScales) {
  EXPECT_EQ(quant::nvfp4_global_scale(0.f), 1.f);
  EXPECT_EQ(quant::nvfp4_global_scale(2688.f), 1.f);  // 6 * 448
  // The largest element: block scale 448, code 6 (saturation), the value itself back.
  std::vector<float> x(64, 0.f);
  x[3] = -0.7f;
  x[40] = 0.01f;
  const float g = quant::nvfp4_global_scale(0.7f);
  BlockNVFP4 b{};
  quant::quantize_rows_nvfp4_scaled(x.data(), &b, 1, 64, g);
  EXPECT_EQ(b.d[0], 0x7E);
  EXPECT_EQ(b.qs[3] & 0xF, 15);  // -6
  std::vector<float> y(64);
  quant::dequantize_nvfp4_ref(&b, y.data(), 64);
  EXPECT_NEAR(y[3] * g, -0.7f, 1e-6f);
  EXPECT_EQ(b.d[1], 0x38);  // the all-zero sub-block gets scale 1
  EXPECT_EQ(y[20], 0.f);
}

// Dot against Q8_0: equal to the float64 dot of both dequantized rows up to float accumulation,
// and within the activation quantization's bound of the dot with the float activations.
TEST(Fp4VecDot, MatchesFloat64DotWithinTheActivationBound) {
  for (DType type : {DType::kMXFP4, DType::kNVFP4}) {
    const TypeTraits* t = type_traits(type);
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(t->vec_dot_type, DType::kQ8_0);
    const TypeTraits* q8 = type_traits(DType::kQ8_0);
    for (uint32_t seed = 1; seed <= 10; ++seed) {
      const int64_t n = 64 * (1 + seed * 3);
      const auto w = quant_test::quantize(type, t->from_float_ref, fp4_test_row(n, seed, 0.5));
      const std::vector<float> a = quant_test::random_row(n, seed + 1000);
      const auto qa = quant_test::quantize(DType::kQ8_0, q8->from_float_ref, a);
      const auto dw = quant_test::dequantize(t->to_float_ref, w, n);
      const auto da = quant_test::dequantize(q8->to_float_ref, qa, n);
      float got = 0.f;
      t->vec_dot_ref(n, &got, w.data(), qa.data());
      float fast = 0.f;
      t->vec_dot(n, &fast, w.data(), qa.data());
      const double exact_q = quant_test::dot_f64(dw, da);
      const double mag = quant_test::abs_dot_f64(dw, da);
      EXPECT_LE(std::fabs(fast - exact_q), 1e-6 * mag + 1e-30) << dtype_name(type) << " n=" << n;  // SIMD order
      EXPECT_LE(std::fabs(got - exact_q), 1e-6 * mag + 1e-30) << dtype_name(type) << " n=" << n;
      // Q8_0 rounds each activation to within d/2 of its block scale d.
      double bound = 0;
      const auto* blocks = reinterpret_cast<const quant::BlockQ8_0*>(qa.data());
      for (int64_t i = 0; i < n; ++i) {
        bound += std::fabs(dw[static_cast<size_t>(i)]) * 0.5 * fp16_to_f32(blocks[i / 32].d) * (1 + 1e-3);
      }
      const double exact = quant_test::dot_f64(dw, a);
      EXPECT_LE(std::fabs(got - exact), bound + 1e-6 * mag + 1e-30) << dtype_name(type) << " n=" << n;
    }
  }
}

// Blocks from a hostile file: any byte is a valid code or scale (NaN scales included), and the
// fast kernels decode them as the references do.
TEST(Fp4Kernels, ArbitraryBytesDecodeAsTheReferences) {
  std::mt19937 rng(77);
  for (DType type : {DType::kMXFP4, DType::kNVFP4}) {
    const TypeTraits* t = type_traits(type);
    const int64_t n = 64 * 40;
    std::vector<uint8_t> w(static_cast<size_t>(row_bytes(type, n)));
    for (uint8_t& b : w) b = static_cast<uint8_t>(rng());
    w[0] = 0xFF;  // the first block's scale: E8M0 255, or UE4M3 0x7F with the ignored bit 7 set
    const auto ref = quant_test::dequantize(t->to_float_ref, w, n);
    const auto fast = quant_test::dequantize(t->to_float, w, n);
    int nan = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float a = ref[static_cast<size_t>(i)];
      const float b = fast[static_cast<size_t>(i)];
      if (std::isnan(a)) ++nan;
      ASSERT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << dtype_name(type) << " " << i << ": " << a << " " << b;
    }
    EXPECT_GE(nan, 16) << dtype_name(type);  // at least the block (or sub-block) of the NaN scale
    std::vector<uint8_t> a(static_cast<size_t>(row_bytes(DType::kQ8_0, n)));
    for (uint8_t& b : a) b = static_cast<uint8_t>(rng() % 64);  // small fp16 scales, any codes
    float s_ref = 0.f;
    float s_fast = 0.f;
    t->vec_dot_ref(n, &s_ref, w.data(), a.data());
    t->vec_dot(n, &s_fast, w.data(), a.data());
    EXPECT_EQ(std::isnan(s_ref), std::isnan(s_fast)) << dtype_name(type);
  }
}

}  // namespace
}  // namespace frugal
