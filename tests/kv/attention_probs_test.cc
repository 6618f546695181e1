// The attention weights of an eviction round (kv/attention_probs.h): the blocked kernel equals the
// reference bit for bit on fresh random queries, keys and positions (with and without a window,
// queries that see no key, key counts that are not a multiple of the block), and the reference is
// the softmax of the scaled dot products computed in float64 within float rounding. The seed is
// printed on failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "frugal/kv/attention_probs.h"

namespace frugal {
namespace {

struct Case {
  int m;
  int32_t n;
  int head_dim;
  int32_t window;
};

TEST(AttentionProbs, BlockedEqualsReferenceBitForBitAndReferenceMatchesFloat64) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  const Case cases[] = {{1, 1, 64, 0},   {3, 5, 64, 0},    {7, 9, 128, 0},  {64, 130, 128, 0},
                        {256, 257, 128, 0}, {32, 100, 64, 16}, {5, 3, 32, 1}, {12, 1031, 96, 200}};
  std::vector<float> scratch;
  for (const Case& c : cases) {
    SCOPED_TRACE("m " + std::to_string(c.m) + " n " + std::to_string(c.n) + " head_dim " +
                 std::to_string(c.head_dim) + " window " + std::to_string(c.window));
    std::vector<float> qs(static_cast<size_t>(c.m) * c.head_dim), keys(static_cast<size_t>(c.n) * c.head_dim);
    for (auto& v : qs) v = 2.f * nd(rng);
    for (auto& v : keys) v = nd(rng);
    // Key positions ascending with gaps (an evicted cache); queries anywhere around them, some
    // before every key (a row that sees nothing).
    std::vector<int32_t> kpos(static_cast<size_t>(c.n));
    int32_t p = 0;
    for (auto& k : kpos) {
      p += 1 + static_cast<int32_t>(rng() % 3);
      k = p;
    }
    std::vector<const float*> rows(static_cast<size_t>(c.m));
    std::vector<int32_t> qpos(static_cast<size_t>(c.m));
    for (int j = 0; j < c.m; ++j) {
      rows[static_cast<size_t>(j)] = qs.data() + static_cast<size_t>(j) * c.head_dim;
      qpos[static_cast<size_t>(j)] = j % 5 == 4 ? 0 : static_cast<int32_t>(rng() % static_cast<uint32_t>(p + 3));
    }
    const ProbsQueries q{rows.data(), qpos.data(), c.m};
    const float scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));
    std::vector<float> want(static_cast<size_t>(c.m) * c.n, 0.f), got(want.size(), -1.f);
    attention_probs_reference(q, keys.data(), kpos.data(), c.n, c.head_dim, scale, c.window, want.data());
    attention_probs(q, keys.data(), kpos.data(), c.n, c.head_dim, scale, c.window, got.data(), scratch);
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
    for (int j = 0; j < c.m; ++j) {
      const int32_t qp = qpos[static_cast<size_t>(j)];
      std::vector<double> s(static_cast<size_t>(c.n), 0.0);
      double mx = -INFINITY;
      bool any = false;
      for (int32_t i = 0; i < c.n; ++i) {
        const int32_t kp = kpos[static_cast<size_t>(i)];
        if (kp > qp || (c.window > 0 && kp <= qp - c.window)) continue;
        double d = 0;
        for (int e = 0; e < c.head_dim; ++e) {
          d += static_cast<double>(rows[static_cast<size_t>(j)][e]) * keys[static_cast<size_t>(i) * c.head_dim + e];
        }
        s[static_cast<size_t>(i)] = d * scale;
        mx = std::max(mx, s[static_cast<size_t>(i)]);
        any = true;
      }
      double z = 0;
      for (int32_t i = 0; i < c.n; ++i) {
        const int32_t kp = kpos[static_cast<size_t>(i)];
        const bool vis = kp <= qp && !(c.window > 0 && kp <= qp - c.window);
        s[static_cast<size_t>(i)] = vis ? std::exp(s[static_cast<size_t>(i)] - mx) : 0.0;
        z += s[static_cast<size_t>(i)];
      }
      for (int32_t i = 0; i < c.n; ++i) {
        const double expect = any ? s[static_cast<size_t>(i)] / z : 0.0;
        // Scores of |s| <~ 40 carry float rounding of ~head_dim * 6e-8 * |terms|; through exp that is a
        // relative error of a few 1e-5 at most.
        ASSERT_NEAR(want[static_cast<size_t>(j) * c.n + i], expect, 1e-4 * expect + 1e-7) << "query " << j << " key " << i;
      }
    }
  }
}

}  // namespace
}  // namespace frugal
