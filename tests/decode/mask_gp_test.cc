// The Gaussian process of SWIFT's skip-set search (mask_gp.h): it interpolates what it measured,
// is unsure away from it, and expected improvement finds the best set of a synthetic objective in
// far fewer measurements than there are sets.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "frugal/decode/speculative/mask_gp.h"
#include "frugal/decode/speculative/skip_set.h"
#include "frugal/model/model.h"

namespace frugal::speculative {
namespace {

// Every set of 4 skipped sublayers among 8 (the default model's middle layers: 70 sets).
std::vector<std::vector<uint8_t>> all_sets() {
  std::vector<std::vector<uint8_t>> out;
  for (unsigned bits = 0; bits < 256; ++bits) {
    if (__builtin_popcount(bits) != 4) continue;
    std::vector<uint8_t> skip(6, 0);
    for (int u = 0; u < 8; ++u) {
      if (bits & (1u << u)) skip[static_cast<size_t>(1 + u / 2)] |= u % 2 == 0 ? Batch::kSkipAttention : Batch::kSkipMlp;
    }
    out.push_back(skip);
  }
  return out;
}

TEST(MaskGp, DistanceCountsSkippedSublayersApart) {
  EXPECT_EQ(MaskGp::distance({0, 3, 0}, {0, 3, 0}), 0);
  EXPECT_EQ(MaskGp::distance({0, 3, 0}, {0, 1, 0}), 1);
  EXPECT_EQ(MaskGp::distance({0, 1, 0}, {0, 2, 0}), 2);
  EXPECT_EQ(MaskGp::distance({0, 3, 3}, {0, 0, 0}), 4);
}

TEST(MaskGp, InterpolatesWhatItMeasuredAndIsUnsureElsewhere) {
  MaskGp gp(2.0, 0.01);
  const std::vector<uint8_t> a = {0, 3, 3, 0, 0, 0}, b = {0, 0, 0, 3, 3, 0}, c = {0, 3, 0, 3, 0, 0};
  gp.add(a, 0.9);
  gp.add(b, 0.2);
  const MaskGp::Prediction pa = gp.predict(a), pb = gp.predict(b), pc = gp.predict(c);
  EXPECT_NEAR(pa.mean, 0.9, 0.02);
  EXPECT_NEAR(pb.mean, 0.2, 0.02);
  // c is 4 sublayers from each: between the two, and far less certain than a measured set.
  EXPECT_GT(pc.mean, 0.2);
  EXPECT_LT(pc.mean, 0.9);
  EXPECT_GT(pc.variance, 10 * pa.variance);
  // Improvement is expected where it is unsure, not at the set known to be worse.
  EXPECT_GT(gp.expected_improvement(c, 0.9), gp.expected_improvement(b, 0.9));
}

TEST(MaskGp, ExpectedImprovementFindsTheBestSetOfASmoothObjective) {
  // Score: the share of sublayers a set shares with a hidden best set, plus a little noise. Ten
  // expected-improvement picks after three random measurements must find the best of the 70
  // sets, which 13 distinct random measurements contain with probability 13/70 ~ 0.19.
  const auto sets = all_sets();
  int found = 0;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    std::mt19937_64 rng(seed);
    const std::vector<uint8_t> hidden = sets[rng() % sets.size()];
    std::normal_distribution<double> noise(0.0, 0.02);
    const auto score = [&](const std::vector<uint8_t>& s) {
      return 1.0 - MaskGp::distance(s, hidden) / 8.0 + noise(rng);
    };
    MaskGp gp(2.0, 0.1);
    std::vector<std::vector<uint8_t>> measured;
    double best = -1;
    for (int i = 0; i < 3; ++i) {
      measured.push_back(sets[rng() % sets.size()]);
      const double y = score(measured.back());
      gp.add(measured.back(), y);
      best = std::max(best, y);
    }
    for (int step = 0; step < 10; ++step) {
      const std::vector<uint8_t>* pick = nullptr;
      double pick_ei = -1;
      for (const auto& s : sets) {
        if (std::find(measured.begin(), measured.end(), s) != measured.end()) continue;
        const double ei = gp.expected_improvement(s, best);
        if (ei > pick_ei) {
          pick_ei = ei;
          pick = &s;
        }
      }
      ASSERT_NE(pick, nullptr);
      measured.push_back(*pick);
      const double y = score(*pick);
      gp.add(*pick, y);
      best = std::max(best, y);
    }
    found += std::find(measured.begin(), measured.end(), hidden) != measured.end() ? 1 : 0;
  }
  std::printf("expected improvement found the best set in %d of 20 searches\n", found);
  EXPECT_GE(found, 15);
}

TEST(SkipSet, TextRoundTripsAndBadTextIsRefused) {
  const std::vector<uint8_t> s = {0, Batch::kSkipLayer, Batch::kSkipAttention, 0, Batch::kSkipMlp, 0};
  EXPECT_EQ(format_skip_set(s), "-xa-m-");
  auto back = parse_skip_set("-xa-m-", 6);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, s);
  EXPECT_EQ(skipped_sublayers(s), 4);
  auto short_set = parse_skip_set("-x-", 6);
  ASSERT_FALSE(short_set.ok());
  EXPECT_EQ(short_set.status().message(), "skip set '-x-' has 3 letters for a model of 6 layers");
  auto bad = parse_skip_set("-xb-m-", 6);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("letter 2 is 'b'"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace frugal::speculative
