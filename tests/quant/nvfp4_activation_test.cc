// NVFP4 activations for W4A4 emulation (quant/methods/nvfp4_activation.h): each value equals an
// independent float64 model of the recipe (per-row global scale, per-16 E4M3 scale by nearest
// search, nearest E2M1 value by search), the round-trip error stays within the bound the formats
// give, and, on rows whose channels have the spread real activations have, OCG's reordering
// (quant/methods/ocg_grouping.h) lowers the round-trip error of fresh rows.
#include "frugal/quant/methods/nvfp4_activation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "frugal/quant/methods/ocg_grouping.h"

namespace frugal {
namespace {

namespace qm = quant::methods;

double e2m1_magnitude(int c) {
  const int e = (c >> 1) & 3;
  const int m = c & 1;
  return e == 0 ? 0.5 * m : std::ldexp(1.0 + 0.5 * m, e - 1);
}

double e4m3_value(int c) {
  const int e = (c >> 3) & 15;
  const int m = c & 7;
  return e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
}

// Nearest E2M1 magnitude (ties to the even code), saturating at 6; signed like v.
double e2m1_nearest(double v) {
  const double a = std::fabs(v);
  int best = 0;
  for (int c = 1; c < 8; ++c) {
    const double d = std::fabs(e2m1_magnitude(c) - a);
    const double b = std::fabs(e2m1_magnitude(best) - a);
    if (d < b || (d == b && c % 2 == 0)) best = c;
  }
  return v < 0 ? -e2m1_magnitude(best) : e2m1_magnitude(best);
}

// Nearest valid E4M3 scale (codes 1..0x7E, ties to even) to v clamped to [2^-9, 448].
double e4m3_scale(double v) {
  v = std::min(std::max(v, std::ldexp(1.0, -9)), 448.0);
  int best = 1;
  for (int c = 2; c <= 0x7E; ++c) {
    const double d = std::fabs(e4m3_value(c) - v);
    const double b = std::fabs(e4m3_value(best) - v);
    if (d < b || (d == b && c % 2 == 0)) best = c;
  }
  return e4m3_value(best);
}

// The recipe as the format documents define it, the float operations where the recipe has them.
std::vector<float> model_round_trip(const std::vector<float>& x) {
  float amax = 0.f;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float g = amax > 0.f ? amax / (6.f * 448.f) : 1.f;
  std::vector<float> y(x.size());
  for (size_t b = 0; b < x.size(); b += 16) {
    float bmax = 0.f;
    for (size_t j = 0; j < 16; ++j) bmax = std::max(bmax, std::fabs(x[b + j]));
    const double d = bmax == 0.f ? 1.0 : e4m3_scale(static_cast<double>(bmax / (6.f * g)));
    const float div = static_cast<float>(d) * g;
    for (size_t j = 0; j < 16; ++j) {
      y[b + j] = static_cast<float>(e2m1_nearest(static_cast<double>(x[b + j] / div))) * div;
    }
  }
  return y;
}

// Rows with the features that matter: heavy tails, outliers, all-zero and tiny groups.
std::vector<float> random_row(std::mt19937& rng, int n) {
  std::student_t_distribution<float> t(3.f);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = t(rng);
  for (int b = 0; b < n; b += 16) {
    const float r = u(rng);
    for (int j = 0; j < 16; ++j) {
      float& v = x[static_cast<size_t>(b + j)];
      if (r < 0.1f) v = 0.f;              // an all-zero group
      else if (r < 0.2f) v *= 1e-4f;      // far below the row's scale: E4M3's subnormal end
      else if (u(rng) < 0.02f) v *= 50.f;  // an outlier
    }
  }
  return x;
}

TEST(Nvfp4Activation, EqualsTheFloat64Model) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 16 * (1 + trial % 24);
    const std::vector<float> x = random_row(rng, n);
    std::vector<float> y(x.size());
    qm::nvfp4_fake_quantize_row(x.data(), y.data(), n);
    const std::vector<float> ref = model_round_trip(x);
    for (int i = 0; i < n; ++i) ASSERT_EQ(y[static_cast<size_t>(i)], ref[static_cast<size_t>(i)]) << "trial " << trial << " i " << i;
  }
}

// Per element |x - x'| <= amax_group * 17/96 + 3 * 2^-9 g. With s = amax_group / (6 g): the E2M1
// grid's half gap is at most one scale unit d g; d is within s/16 of s where E4M3 is normal (3
// mantissa bits), within 2^-10 of it among the subnormals, or the floor 2^-9 above it; a value
// saturating at 6 (d rounded below s) loses 6 g (s - d), at most amax/16 or 6 * 2^-10 g.
TEST(Nvfp4Activation, RoundTripErrorBound) {
  std::mt19937 rng(12);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 16 * (1 + trial % 24);
    const std::vector<float> x = random_row(rng, n);
    std::vector<float> y(x.size());
    qm::nvfp4_fake_quantize_row(x.data(), y.data(), n);
    double amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(static_cast<double>(v)));
    const double g = amax / 2688.0;
    for (int b = 0; b < n; b += 16) {
      double bmax = 0;
      for (int j = 0; j < 16; ++j) bmax = std::max(bmax, std::fabs(static_cast<double>(x[static_cast<size_t>(b + j)])));
      const double bound = bmax * 17.0 / 96.0 + 3.0 * std::ldexp(g, -9);
      for (int j = 0; j < 16; ++j) {
        const size_t i = static_cast<size_t>(b + j);
        ASSERT_LE(std::fabs(static_cast<double>(x[i]) - y[i]), bound) << "trial " << trial << " i " << i;
        // The sign survives (or the value is zero), and the row's largest value keeps its size.
        ASSERT_TRUE(y[i] == 0.f || (y[i] > 0.f) == (x[i] > 0.f));
      }
    }
  }
}

TEST(Nvfp4Activation, ZerosAndInPlace) {
  std::vector<float> z(64, 0.f), out(64, 1.f);
  qm::nvfp4_fake_quantize_row(z.data(), out.data(), 64);
  for (float v : out) EXPECT_EQ(v, 0.f);
  std::mt19937 rng(13);
  std::vector<float> x = random_row(rng, 128);
  std::vector<float> y(x.size());
  qm::nvfp4_fake_quantize_row(x.data(), y.data(), 128);
  qm::nvfp4_fake_quantize_row(x.data(), x.data(), 128);
  EXPECT_EQ(x, y);
}

// Channels with log-normal scales (as activations have: some channels far quieter than others)
// and a few outlier channels. Calibrated on some rows, OCG's order must lower the round-trip error
// of other rows: the outliers no longer coarsen the grid of ordinary channels.
TEST(Nvfp4Activation, OcgOrderLowersTheErrorOfOutlierRows) {
  constexpr int kN = 256;
  std::mt19937 rng(14);
  std::lognormal_distribution<float> scale_dist(0.f, 1.f);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int trial = 0; trial < 10; ++trial) {
    std::vector<float> scale(kN);
    for (float& s : scale) s = scale_dist(rng);
    for (int i = 0; i < 4; ++i) scale[static_cast<size_t>(std::uniform_int_distribution<int>(0, kN - 1)(rng))] = 60.f;
    auto row = [&]() {
      std::vector<float> x(kN);
      for (int j = 0; j < kN; ++j) x[static_cast<size_t>(j)] = scale[static_cast<size_t>(j)] * nd(rng);
      return x;
    };
    std::vector<double> ms(kN, 0.0);
    for (int r = 0; r < 128; ++r) {
      const std::vector<float> x = row();
      for (int j = 0; j < kN; ++j) ms[static_cast<size_t>(j)] += static_cast<double>(x[static_cast<size_t>(j)]) * x[static_cast<size_t>(j)] / 128;
    }
    std::vector<float> rms(kN);
    for (int j = 0; j < kN; ++j) rms[static_cast<size_t>(j)] = static_cast<float>(std::sqrt(ms[static_cast<size_t>(j)]));
    const qm::OcgGrouping g = qm::ocg_grouping(rms);
    ASSERT_GE(g.n_anchors, 1);
    double err_plain = 0, err_ocg = 0;
    for (int r = 0; r < 128; ++r) {
      const std::vector<float> x = row();
      std::vector<float> xp(kN), y(kN), yp(kN);
      for (int j = 0; j < kN; ++j) xp[static_cast<size_t>(j)] = x[static_cast<size_t>(g.order[static_cast<size_t>(j)])];
      qm::nvfp4_fake_quantize_row(x.data(), y.data(), kN);
      qm::nvfp4_fake_quantize_row(xp.data(), yp.data(), kN);
      for (int j = 0; j < kN; ++j) {
        const double a = static_cast<double>(x[static_cast<size_t>(j)]) - y[static_cast<size_t>(j)];
        const double b = static_cast<double>(xp[static_cast<size_t>(j)]) - yp[static_cast<size_t>(j)];
        err_plain += a * a;
        err_ocg += b * b;
      }
    }
    EXPECT_LT(err_ocg, 0.5 * err_plain) << "trial " << trial << ": OCG " << err_ocg << " vs plain " << err_plain;
  }
}

}  // namespace
}  // namespace frugal
