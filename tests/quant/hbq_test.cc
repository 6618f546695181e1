// HBQ-A and HBQ-E against an independent model of the layout and of the quantizer's rules: UE5M3
// values, the byte layout (decoded here without the library's helpers), each element the nearest
// E2M1 value at its micro-block's step, each micro-block's multiplier the best of its set, the
// searched scale never worse than round-up, the importance weights reaching the search, and the
// SIMD kernels equal to (to_float) or within rounding of (dot) the reference for every multiplier
// set, on fresh random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "frugal/core/half.h"
#include "frugal/quant/blocks.h"
#include "frugal/quant/fp4_codes.h"
#include "frugal/quant/hbq.h"
#include "frugal/quant/reference.h"
#include "frugal/quant/simd_kernels.h"
#include "frugal/quant/type_traits.h"
#include "quant_test_util.h"

namespace frugal {
namespace {

using quant::HbqScaleStrategy;

constexpr double kE2M1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};

double ue5m3_model(int code) {
  const int e = code >> 3;
  const int m = code & 7;
  return e == 0 ? m * std::ldexp(1.0, -17) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 15);
}

double alpha_model(int set, int c) {
  switch (set) {
    case 0: return 1.0 + c / 4.0;
    case 1: return 1.0 + c / 8.0;
    case 2: return std::ldexp(1.0, c);
    case 3: return 1.0 + c;
    default: return 1.0 + c / 2.0;
  }
}

// A block read straight from its bytes: scale code, set, per-element E2M1 code and multiplier code.
struct Decoded {
  int s = 0;
  int set = 0;
  int q[128] = {};
  int c[128] = {};
};

Decoded decode(const uint8_t* bytes, int micro) {
  Decoded d;
  d.s = bytes[0];
  d.set = bytes[1];
  const int code_bytes = 128 / micro / 4;
  const uint8_t* codes = bytes + 2;
  const uint8_t* qs = bytes + 2 + code_bytes;
  for (int e = 0; e < 128; ++e) {
    const int g = e / 32;
    const int j = e % 32;
    const uint8_t b = qs[g * 16 + (j % 16)];
    d.q[e] = j < 16 ? (b & 0xF) : (b >> 4);
    const int m = e / micro;
    d.c[e] = (codes[m / 4] >> (2 * (m % 4))) & 3;
  }
  return d;
}

double value(const Decoded& d, int e) {
  const double mag = kE2M1[d.q[e] & 7];
  return ((d.q[e] & 8) ? -1.0 : 1.0) * ue5m3_model(d.s) * alpha_model(d.set, d.c[e]) * mag;
}

// Weighted squared error of micro-block elements [b, b+micro) rounded to nearest E2M1 at step.
double micro_err(const float* x, const float* w, int b, int micro, double step) {
  double err = 0;
  for (int j = b; j < b + micro; ++j) {
    const double a = std::fabs(x[j]) / step;
    double best = 1e300;
    double v = 0;
    for (double g : kE2M1) {
      if (std::fabs(a - g) < best) {
        best = std::fabs(a - g);
        v = g;
      }
    }
    const double diff = std::fabs(x[j]) - v * step;
    err += (w ? w[j] : 1.0) * diff * diff;
  }
  return err;
}

std::vector<float> random_weights(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> uni(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n));
  for (size_t i = 0; i < x.size(); ++i) {
    // Per-block magnitudes over several decades and a few outliers, as weight rows have.
    const float block_scale = std::pow(10.f, -3.f + 2.f * static_cast<float>((i / 128 * 7919) % 13) / 13.f);
    x[i] = block_scale * normal(rng) * (uni(rng) < 0.01f ? 8.f : 1.f);
  }
  return x;
}

struct Format {
  DType type;
  int micro;
  int bytes;
  void (*rows)(const float*, void*, int64_t, int64_t, const float*, HbqScaleStrategy);
};
const Format kFormats[2] = {{DType::kHBQ_A, 8, 70, quant::quantize_rows_hbq_a},
                            {DType::kHBQ_E, 32, 67, quant::quantize_rows_hbq_e}};

TEST(Hbq, Ue5m3ValuesAndRoundUp) {
  for (int code = 0; code < 256; ++code) {
    EXPECT_EQ(static_cast<double>(quant::ue5m3_to_f32(static_cast<uint8_t>(code))), ue5m3_model(code)) << code;
  }
  EXPECT_EQ(quant::ue5m3_to_f32(0x78), 1.f);
  EXPECT_EQ(quant::ue5m3_to_f32(0xFF), 122880.f);
  EXPECT_EQ(quant::ue5m3_ceil(1.f), 0x78);
  EXPECT_EQ(quant::ue5m3_ceil(1.0001f), 0x79);
  EXPECT_EQ(quant::ue5m3_ceil(1e9f), 0xFF);
  EXPECT_EQ(quant::ue5m3_ceil(0.f), 1);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> expo(-20.f, 17.f);
  for (int i = 0; i < 2000; ++i) {
    const float v = std::exp2(expo(rng));
    const int c = quant::ue5m3_ceil(v);
    if (v <= 122880.f) {
      EXPECT_GE(ue5m3_model(c), v);
      if (c > 1) {
        EXPECT_LT(ue5m3_model(c - 1), v);
      }
    }
  }
}

// Every block: the set matches the strategy, every element is the nearest E2M1 value at its
// micro-block's step, every micro-block's multiplier has the least error of its set at the
// block's scale, the block error is no more than round-up's (the scale search includes it), and
// the library's dequantizer gives the values this test decodes from the bytes.
TEST(Hbq, QuantizerFollowsItsRules) {
  for (const Format& f : kFormats) {
    SCOPED_TRACE(std::string(dtype_name(f.type)));
    const int64_t n = 128 * 24;
    const std::vector<float> x = random_weights(n, 11);
    for (HbqScaleStrategy st : {HbqScaleStrategy::kSig, HbqScaleStrategy::kPow2, HbqScaleStrategy::kInt}) {
      std::vector<uint8_t> q(static_cast<size_t>(n / 128 * f.bytes));
      f.rows(x.data(), q.data(), 1, n, nullptr, st);
      std::vector<float> y(static_cast<size_t>(n));
      type_traits(f.type)->to_float_ref(q.data(), y.data(), n);
      int sig3_blocks = 0;
      for (int64_t b = 0; b < n / 128; ++b) {
        const Decoded d = decode(q.data() + b * f.bytes, f.micro);
        const float* xb = x.data() + b * 128;
        if (st == HbqScaleStrategy::kSig) {
          ASSERT_TRUE(d.set == 0 || d.set == 1);
          sig3_blocks += d.set;
        } else {
          ASSERT_EQ(d.set, st == HbqScaleStrategy::kPow2 ? 2 : 3);
        }
        double total = 0;
        for (int m = 0; m < 128 / f.micro; ++m) {
          const double chosen = micro_err(xb, nullptr, m * f.micro, f.micro,
                                          ue5m3_model(d.s) * alpha_model(d.set, d.c[m * f.micro]));
          for (int c = 0; c < 4; ++c) {
            const double other =
                micro_err(xb, nullptr, m * f.micro, f.micro, ue5m3_model(d.s) * alpha_model(d.set, c));
            EXPECT_LE(chosen, other * (1 + 1e-5) + 1e-30) << "block " << b << " micro " << m;
          }
          total += chosen;
        }
        // Round-up for the chosen set, with its best multipliers.
        double amax = 0;
        for (int j = 0; j < 128; ++j) amax = std::max(amax, std::fabs(static_cast<double>(xb[j])));
        const int s0 = quant::ue5m3_ceil(static_cast<float>(amax / (6.0 * alpha_model(d.set, 3))));
        double total_s0 = 0;
        for (int m = 0; m < 128 / f.micro; ++m) {
          double best = 1e300;
          for (int c = 0; c < 4; ++c) {
            best = std::min(best, micro_err(xb, nullptr, m * f.micro, f.micro, ue5m3_model(s0) * alpha_model(d.set, c)));
          }
          total_s0 += best;
        }
        EXPECT_LE(total, total_s0 * (1 + 1e-5)) << "block " << b;
        for (int j = 0; j < 128; ++j) {
          const double step = ue5m3_model(d.s) * alpha_model(d.set, d.c[j]);
          const double a = std::fabs(static_cast<double>(xb[j])) / step;
          for (double g : kE2M1) {
            EXPECT_LE(std::fabs(a - kE2M1[d.q[j] & 7]), std::fabs(a - g) + 1e-6) << "block " << b << " element " << j;
          }
          if (xb[j] != 0.f && kE2M1[d.q[j] & 7] != 0) {
            EXPECT_EQ(xb[j] < 0.f, (d.q[j] & 8) != 0);
          }
          EXPECT_EQ(static_cast<double>(y[static_cast<size_t>(b * 128 + j)]), value(d, j))
              << "block " << b << " element " << j;
        }
      }
      if (st == HbqScaleStrategy::kSig) {
        // The per-block selector is used both ways on data this varied.
        EXPECT_GT(sig3_blocks, 0);
        EXPECT_LT(sig3_blocks, n / 128);
      }
    }
  }
}

// The search minimises the importance-weighted error: with the weights it never does worse on
// that error than the same search without them, and is strictly better somewhere.
TEST(Hbq, ImportanceWeightsTheSearch) {
  for (const Format& f : kFormats) {
    SCOPED_TRACE(std::string(dtype_name(f.type)));
    const int64_t cols = 512;
    const int64_t rows = 16;
    const std::vector<float> x = random_weights(rows * cols, 5);
    std::mt19937 rng(9);
    std::lognormal_distribution<float> logn(0.f, 1.5f);
    std::vector<float> w(static_cast<size_t>(cols));
    for (float& v : w) v = logn(rng);
    std::vector<uint8_t> qw(static_cast<size_t>(rows * cols / 128 * f.bytes));
    std::vector<uint8_t> qp(qw.size());
    f.rows(x.data(), qw.data(), rows, cols, w.data(), HbqScaleStrategy::kSig);
    f.rows(x.data(), qp.data(), rows, cols, nullptr, HbqScaleStrategy::kSig);
    std::vector<float> yw(x.size());
    std::vector<float> yp(x.size());
    type_traits(f.type)->to_float_ref(qw.data(), yw.data(), rows * cols);
    type_traits(f.type)->to_float_ref(qp.data(), yp.data(), rows * cols);
    int better = 0;
    for (int64_t b = 0; b < rows * cols / 128; ++b) {
      double ew = 0;
      double ep = 0;
      for (int j = 0; j < 128; ++j) {
        const size_t i = static_cast<size_t>(b * 128 + j);
        const double wj = w[static_cast<size_t>((b * 128 + j) % cols)];
        ew += wj * (static_cast<double>(x[i]) - yw[i]) * (static_cast<double>(x[i]) - yw[i]);
        ep += wj * (static_cast<double>(x[i]) - yp[i]) * (static_cast<double>(x[i]) - yp[i]);
      }
      EXPECT_LE(ew, ep * (1 + 1e-5)) << "block " << b;
      better += ew < ep * (1 - 1e-3);
    }
    EXPECT_GT(better, 0);
  }
}

// An all-zero block is scale 0 and decodes to zeros; a constant block decodes within a step.
TEST(Hbq, ZeroAndConstantBlocks) {
  for (const Format& f : kFormats) {
    std::vector<float> x(256, 0.f);
    for (int j = 128; j < 256; ++j) x[static_cast<size_t>(j)] = -0.3f;
    std::vector<uint8_t> q(static_cast<size_t>(2 * f.bytes));
    f.rows(x.data(), q.data(), 1, 256, nullptr, HbqScaleStrategy::kSig);
    EXPECT_EQ(q[0], 0);
    std::vector<float> y(256);
    type_traits(f.type)->to_float_ref(q.data(), y.data(), 256);
    for (int j = 0; j < 128; ++j) EXPECT_EQ(y[static_cast<size_t>(j)], 0.f);
    for (int j = 128; j < 256; ++j) EXPECT_NEAR(y[static_cast<size_t>(j)], -0.3f, 0.3f * 0.07f);  // UE5M3 has 3 mantissa bits
  }
}

// The fast kernels for blocks of every multiplier set (the type table's reference quantizer only
// writes the SIG sets), and set bytes beyond the table, which read as set 0 in both.
TEST(Hbq, FastKernelsMatchReferenceForEverySet) {
  const TypeTraits* q8 = type_traits(DType::kQ8_0);
  for (const Format& f : kFormats) {
    SCOPED_TRACE(std::string(dtype_name(f.type)));
    const TypeTraits* t = type_traits(f.type);
    for (int64_t blocks : {1, 3, 8}) {
      const int64_t n = 128 * blocks;
      for (uint32_t seed = 1; seed <= 3; ++seed) {
        const std::vector<float> x = random_weights(n, 100 + seed + static_cast<uint32_t>(n));
        const std::vector<float> a = quant_test::random_row(n, 200 + seed + static_cast<uint32_t>(n));
        const auto qy = quant_test::quantize(DType::kQ8_0, q8->from_float_ref, a);
        for (HbqScaleStrategy st : {HbqScaleStrategy::kSig, HbqScaleStrategy::kPow2, HbqScaleStrategy::kInt}) {
          std::vector<uint8_t> qx(static_cast<size_t>(blocks * f.bytes));
          f.rows(x.data(), qx.data(), 1, n, nullptr, st);
          if (st == HbqScaleStrategy::kInt) qx[1] = 200;  // out-of-table set byte in block 0
          const auto want = quant_test::dequantize(t->to_float_ref, qx, n);
          const auto got = quant_test::dequantize(t->to_float, qx, n);
          ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * static_cast<size_t>(n)));
          float ref = 0.f;
          float fast = 0.f;
          t->vec_dot_ref(n, &ref, qx.data(), qy.data());
          t->vec_dot(n, &fast, qx.data(), qy.data());
          const auto dy = quant_test::dequantize(q8->to_float_ref, qy, n);
          double exact = 0;
          double scale = 1e-30;
          for (int64_t i = 0; i < n; ++i) {
            exact += static_cast<double>(want[static_cast<size_t>(i)]) * dy[static_cast<size_t>(i)];
            scale += std::fabs(static_cast<double>(want[static_cast<size_t>(i)]) * dy[static_cast<size_t>(i)]);
          }
          EXPECT_LE(std::fabs(ref - exact) / scale, 2e-5);
          EXPECT_LE(std::fabs(fast - ref) / scale, 4e-7 * std::sqrt(static_cast<double>(n)) + 1e-6)
              << "ref=" << ref << " fast=" << fast;
        }
      }
    }
  }
}

}  // namespace
}  // namespace frugal
