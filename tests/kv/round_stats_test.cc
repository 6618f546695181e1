// The reductions a scored round hands its policies (kv/round_stats.h): key similarity by the
// sum-of-unit-keys identity against the pairwise definition in float64, and the attention sums
// against their definition, on fresh random inputs.
#include "frugal/kv/round_stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace frugal {
namespace {

TEST(RoundStats, KeySimilarityEqualsThePairwiseMeanOfCosines) {
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> g(0.f, 1.f);
  for (const int hd : {8, 64, 128}) {
    for (const int n : {1, 2, 3, 37, 300}) {
      std::vector<float> k(static_cast<size_t>(n) * hd);
      for (float& x : k) x = g(rng);
      // A shared direction makes the similarities differ from 0; a zero key is similar to nothing.
      for (int i = 0; i < n; ++i) {
        for (int e = 0; e < hd; ++e) k[static_cast<size_t>(i) * hd + e] += (i % 3 == 0 ? 2.f : 0.f) * (e < 4 ? 1.f : 0.f);
      }
      if (n > 2) std::fill(k.begin() + hd, k.begin() + 2 * hd, 0.f);
      std::vector<float> got(static_cast<size_t>(n));
      key_similarity(k.data(), n, hd, got.data());
      for (int i = 0; i < n; ++i) {
        double want = 0;
        const auto norm = [&](int a) {
          double s = 0;
          for (int e = 0; e < hd; ++e) s += static_cast<double>(k[static_cast<size_t>(a) * hd + e]) * k[static_cast<size_t>(a) * hd + e];
          return std::sqrt(s);
        };
        for (int j = 0; j < n && n > 1; ++j) {
          if (j == i || norm(i) == 0 || norm(j) == 0) continue;
          double dot = 0;
          for (int e = 0; e < hd; ++e) dot += static_cast<double>(k[static_cast<size_t>(i) * hd + e]) * k[static_cast<size_t>(j) * hd + e];
          want += dot / (norm(i) * norm(j)) / (n - 1);
        }
        EXPECT_NEAR(got[static_cast<size_t>(i)], want, 1e-6) << "n " << n << " head_dim " << hd << " key " << i;
      }
    }
  }
}

TEST(RoundStats, AttentionSumsFollowTheirDefinition) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> u(0.f, 1.f);
  const int n_rep = 3, nq = 5;
  const int32_t n = 41;
  std::vector<float> p(static_cast<size_t>(n_rep) * nq * n);
  for (float& x : p) x = u(rng);
  const std::vector<int32_t> qpos = {10, 11, 12, 13, 14};
  for (const int32_t fresh_after : {-1, 11, 14}) {
    std::vector<float> att(n), last(n), fresh(n);
    reduce_attention(p.data(), n_rep, nq, n, qpos.data(), fresh_after, att.data(), last.data(), fresh.data());
    for (int32_t i = 0; i < n; ++i) {
      double a = 0, l = 0, f = 0;
      for (int r = 0; r < n_rep; ++r) {
        for (int j = 0; j < nq; ++j) {
          const double x = p[(static_cast<size_t>(r) * nq + j) * n + i];
          a += x;
          if (j == nq - 1) l += x;
          if (qpos[static_cast<size_t>(j)] > fresh_after) f += x;
        }
      }
      EXPECT_NEAR(att[static_cast<size_t>(i)], a, 1e-5);
      EXPECT_NEAR(last[static_cast<size_t>(i)], l, 1e-6);
      EXPECT_NEAR(fresh[static_cast<size_t>(i)], f, 1e-5);
    }
  }
}

}  // namespace
}  // namespace frugal
