// Reference quantize -> dequantize error for every registered type, on two kinds of rows:
// plain Gaussian rows (error relative to the row's RMS) and rows whose scale changes from one
// 32-element block to the next with outliers (error relative to each block's value range).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>

#include "quant/quant_test_util.h"

namespace frugal {
namespace {

using quant_test::dequantize;
using quant_test::quantize;
using quant_test::random_row;

struct ErrorBound {
  double gaussian_rel_rmse;  // RMSE / RMS(x) on N(0,1) rows
  double range_rel_rmse;     // max over blocks of RMSE / (max - min) on varied rows
};

// Measured on these generators (seeds 1-3), noted beside each bound and printed by the test;
// bounds leave ~25% headroom. K-quant blocks are 256 wide, so their range-relative error is
// that of the block's loudest sub-blocks. For orientation, a uniform quantizer with step s has
// RMSE s/sqrt(12), i.e. 0.29/(2^bits - 1) of the range.
const std::map<DType, ErrorBound>& bounds() {
  static const std::map<DType, ErrorBound> b = {
      {DType::kF32, {0.0, 0.0}},        {DType::kF16, {3e-4, 2e-4}},  // measured 0.00022, 0.00015
      {DType::kBF16, {2.5e-3, 1.6e-3}},                               // 0.00179, 0.00122
      {DType::kQ8_0, {0.0072, 0.0035}},                               // 0.00568, 0.00272
      {DType::kQ8_1, {0.0072, 0.0035}},                               // 0.00568, 0.00272
      {DType::kQ8_K, {0.009, 0.0025}},                                // 0.00710, 0.00180
      {DType::kQ4_0, {0.11, 0.061}},                                  // 0.0875, 0.0486
      {DType::kQ4_1, {0.105, 0.028}},                                 // 0.0844, 0.0220
      {DType::kQ5_0, {0.055, 0.028}},                                 // 0.0438, 0.0224
      {DType::kQ5_1, {0.05, 0.0125}},                                 // 0.0392, 0.0098
      {DType::kQ2_K, {0.38, 0.043}},                                  // 0.306, 0.0337
      {DType::kQ3_K, {0.195, 0.026}},                                 // 0.155, 0.0203
      {DType::kQ4_K, {0.09, 0.0115}},                                 // 0.0723, 0.0091
      {DType::kQ5_K, {0.045, 0.0056}},                                // 0.0362, 0.0045
      {DType::kQ6_K, {0.023, 0.0032}},                                // 0.0181, 0.0025
      {DType::kIQ4_NL, {0.10, 0.055}},                                // 0.0806, 0.0439
      {DType::kMXFP4, {0.155, 0.088}},                                // 0.1245, 0.0705
      {DType::kNVFP4, {0.13, 0.043}},   // 0.1029, 0.0339 (global scale 1: block scales alone)
      {DType::kHBQ_A, {0.10, 0.028}},   // 0.0799, 0.0218
      {DType::kHBQ_E, {0.12, 0.029}},   // 0.0944, 0.0228
  };
  return b;
}

double rms(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return std::sqrt(s / n);
}

double rms_diff(const float* x, const float* y, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i)
    s += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
  return std::sqrt(s / n);
}

TEST(QuantRoundTrip, ErrorWithinBoundForEveryType) {
  for (const TypeTraits* t : all_type_traits()) {
    SCOPED_TRACE(std::string(dtype_name(t->type)));
    ASSERT_TRUE(bounds().count(t->type)) << "no error bound registered";
    const ErrorBound bound = bounds().at(t->type);
    const int64_t bs = std::max<int64_t>(32, quant_test::block_size(t->type));
    double worst_gauss = 0;
    double worst_range = 0;
    for (uint32_t seed = 1; seed <= 3; ++seed) {
      const int64_t n = bs * (2 * seed + 1);  // odd numbers of blocks
      std::mt19937 rng(seed * 7919);
      std::normal_distribution<float> normal(0.f, 1.f);
      std::vector<float> g(static_cast<size_t>(n));
      for (float& v : g) v = normal(rng);
      const auto gq = dequantize(t->to_float_ref, quantize(t->type, t->from_float_ref, g), n);
      worst_gauss = std::max(worst_gauss, rms_diff(g.data(), gq.data(), n) / rms(g.data(), n));

      const std::vector<float> x = random_row(n, seed);
      const auto xq = dequantize(t->to_float_ref, quantize(t->type, t->from_float_ref, x), n);
      for (int64_t b = 0; b < n; b += bs) {
        const auto [lo, hi] = std::minmax_element(x.begin() + b, x.begin() + b + bs);
        const double range = static_cast<double>(*hi) - *lo;
        worst_range = std::max(worst_range, rms_diff(x.data() + b, xq.data() + b, bs) / range);
      }
    }
    std::printf("  %-7s RMSE/RMS (Gaussian) %.5f   max RMSE/range (varied blocks) %.5f\n",
                std::string(dtype_name(t->type)).c_str(), worst_gauss, worst_range);
    EXPECT_LE(worst_gauss, bound.gaussian_rel_rmse);
    EXPECT_LE(worst_range, bound.range_rel_rmse);
  }
}

// Constant, zero and sign-flipped blocks must survive without NaNs and keep their sign.
TEST(QuantRoundTrip, DegenerateBlocks) {
  for (const TypeTraits* t : all_type_traits()) {
    SCOPED_TRACE(std::string(dtype_name(t->type)));
    const int64_t n = std::max<int64_t>(32, quant_test::block_size(t->type)) * 3;
    std::vector<float> x(static_cast<size_t>(n), 0.f);
    for (int64_t i = n / 3; i < 2 * n / 3; ++i) x[static_cast<size_t>(i)] = 0.75f;
    for (int64_t i = 2 * n / 3; i < n; ++i) {
      x[static_cast<size_t>(i)] = (i % 2 ? -1.f : 1.f) * 0.01f * (i % 7);
    }
    const auto y = dequantize(t->to_float_ref, quantize(t->type, t->from_float_ref, x), n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(std::isfinite(y[static_cast<size_t>(i)])) << "element " << i;
      if (i < n / 3) {
        EXPECT_EQ(y[static_cast<size_t>(i)], 0.f) << "element " << i;
      } else if (i < 2 * n / 3) {
        EXPECT_NEAR(y[static_cast<size_t>(i)], 0.75f, 0.75f * 0.1f) << "element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace frugal
