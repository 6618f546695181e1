// Outlier-Companion Grouping (quant/methods/ocg_grouping.h) on fresh random channel statistics:
// log-normal RMS values with planted outliers. The order must be a permutation, the packed groups
// whole 16-element groups at the end, each holding one anchor (the loudest channels, loudest first)
// and the quietest remaining channels, the other channels in their original order in front, and the
// anchor count exactly what the published acceptance rule gives (checked by a separate count).
#include "frugal/quant/methods/ocg_grouping.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <vector>

namespace frugal {
namespace {

namespace qm = quant::methods;

std::vector<float> random_rms(std::mt19937& rng, int n, int n_outliers, float outlier_factor) {
  std::lognormal_distribution<float> ln(0.f, 0.6f);
  std::vector<float> r(static_cast<size_t>(n));
  for (float& v : r) v = ln(rng);
  std::uniform_int_distribution<int> pick(0, n - 1);
  for (int i = 0; i < n_outliers; ++i) r[static_cast<size_t>(pick(rng))] *= outlier_factor;
  return r;
}

// Channel indices by RMS: descending (loud) or ascending (quiet), ties by index.
std::vector<int32_t> ranked(const std::vector<float>& r, bool loud) {
  std::vector<int32_t> idx(r.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) {
    return loud ? r[static_cast<size_t>(a)] > r[static_cast<size_t>(b)] : r[static_cast<size_t>(a)] < r[static_cast<size_t>(b)];
  });
  return idx;
}

// The acceptance rule counted directly from its statement: candidate k (1-based) passes when its
// squared RMS exceeds the sum of the 15 smallest squared RMS outside the k loudest channels.
int expected_anchor_count(const std::vector<float>& r) {
  const int n = static_cast<int>(r.size());
  const std::vector<int32_t> loud = ranked(r, true);
  int k = 0;
  for (int cand = 1; cand <= n / 16; ++cand) {
    std::vector<double> rest;
    for (int i = cand; i < n; ++i) {
      const double v = r[static_cast<size_t>(loud[static_cast<size_t>(i)])];
      rest.push_back(v * v);
    }
    if (rest.size() < 15) break;
    std::sort(rest.begin(), rest.end());
    const double energy = std::accumulate(rest.begin(), rest.begin() + 15, 0.0);
    const double a = r[static_cast<size_t>(loud[static_cast<size_t>(cand - 1)])];
    if (!(a * a > energy)) break;
    k = cand;
  }
  return k;
}

void check_grouping(const std::vector<float>& r, const qm::OcgGrouping& g, int expect_anchors) {
  const int n = static_cast<int>(r.size());
  ASSERT_EQ(static_cast<int>(g.order.size()), n);
  std::vector<int32_t> sorted = g.order;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < n; ++i) ASSERT_EQ(sorted[static_cast<size_t>(i)], i) << "not a permutation";
  ASSERT_EQ(g.n_anchors, expect_anchors);
  ASSERT_LE(g.n_anchors * 16, n);
  const int front = n - 16 * g.n_anchors;
  ASSERT_EQ(front % 16, 0);
  // Anchors: the n_anchors loudest. Companions: the quietest channels that are not anchors, handed
  // out 15 at a time in that order.
  const std::vector<int32_t> loud = ranked(r, true);
  const std::set<int32_t> anchors(loud.begin(), loud.begin() + g.n_anchors);
  std::vector<int32_t> companions;
  for (int32_t c : ranked(r, false)) {
    if (anchors.count(c) == 0) companions.push_back(c);
  }
  std::set<int32_t> packed;
  for (int grp = 0; grp < g.n_anchors; ++grp) {
    const size_t at = static_cast<size_t>(front + 16 * grp);
    EXPECT_EQ(g.order[at], loud[static_cast<size_t>(grp)]) << "group " << grp << " does not start with its anchor";
    for (int j = 1; j < 16; ++j) {
      const int32_t c = g.order[at + static_cast<size_t>(j)];
      EXPECT_EQ(c, companions[static_cast<size_t>(15 * grp + j - 1)]) << "group " << grp << " member " << j;
      EXPECT_EQ(anchors.count(c), 0u) << "two anchors share group " << grp;
    }
    for (int j = 0; j < 16; ++j) packed.insert(g.order[at + static_cast<size_t>(j)]);
  }
  // Every channel not packed keeps its original relative order, in front.
  int32_t prev = -1;
  for (int i = 0; i < front; ++i) {
    const int32_t c = g.order[static_cast<size_t>(i)];
    EXPECT_EQ(packed.count(c), 0u);
    EXPECT_GT(c, prev) << "front channels out of their original order at " << i;
    prev = c;
  }
}

TEST(OcgGrouping, PermutationGroupsAndAnchorRuleOnRandomStatistics) {
  std::mt19937 rng(20261204);
  int with_anchors = 0;
  for (int n : {16, 64, 384, 768}) {
    for (int trial = 0; trial < 25; ++trial) {
      std::uniform_int_distribution<int> count(0, std::max(1, n / 32));
      const std::vector<float> r = random_rms(rng, n, count(rng), 30.f);
      const int k = qm::ocg_anchor_count(r);
      ASSERT_EQ(k, expected_anchor_count(r)) << "n " << n << " trial " << trial;
      check_grouping(r, qm::ocg_grouping(r), k);
      with_anchors += k > 0;
      // Any count the caller asks for packs the same way.
      std::uniform_int_distribution<int> any(0, n / 16);
      const int forced = any(rng);
      check_grouping(r, qm::ocg_grouping_with_anchors(r, forced), forced);
    }
  }
  EXPECT_GT(with_anchors, 50);  // the planted outliers do make anchors
}

// Outliers far above the rest become anchors, each in a group of its own kind: no two share one.
TEST(OcgGrouping, PlantedOutliersAreSeparated) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> r = random_rms(rng, 384, 0, 1.f);
    std::set<int32_t> planted;
    std::uniform_int_distribution<int> pick(0, 383);
    while (planted.size() < 5) planted.insert(pick(rng));
    for (int32_t c : planted) r[static_cast<size_t>(c)] = 200.f;
    const qm::OcgGrouping g = qm::ocg_grouping(r);
    ASSERT_GE(g.n_anchors, 5);
    const int front = 384 - 16 * g.n_anchors;
    for (int i = 0; i < front; ++i) EXPECT_EQ(planted.count(g.order[static_cast<size_t>(i)]), 0u);
    for (int grp = 0; grp < g.n_anchors; ++grp) {
      int in_group = 0;
      for (int j = 0; j < 16; ++j) in_group += planted.count(g.order[static_cast<size_t>(front + 16 * grp + j)]) > 0;
      EXPECT_LE(in_group, 1) << "group " << grp;
    }
  }
}

// No channel stands out: nothing to pack, the order is the identity.
TEST(OcgGrouping, FlatStatisticsLeaveTheOrder) {
  for (int n : {16, 256}) {
    for (float level : {0.f, 1.f, 3.5f}) {
      const std::vector<float> r(static_cast<size_t>(n), level);
      const qm::OcgGrouping g = qm::ocg_grouping(r);
      EXPECT_EQ(g.n_anchors, 0);
      for (int i = 0; i < n; ++i) EXPECT_EQ(g.order[static_cast<size_t>(i)], i);
    }
  }
}

}  // namespace
}  // namespace frugal
