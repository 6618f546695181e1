// The task RNG against published sequences: splitmix64 from state 0, xoshiro256** from state
// {1, 2, 3, 4} (the reference C code's outputs), FNV-1a test vectors.
#include <gtest/gtest.h>

#include <vector>

#include "frugal/eval/rng.h"

namespace frugal::eval {
namespace {

TEST(TaskRng, Splitmix64MatchesPublishedSequence) {
  uint64_t state = 0;
  EXPECT_EQ(splitmix64_next(state), 0xE220A8397B1DCDAFULL);
  EXPECT_EQ(splitmix64_next(state), 0x6E789E6AA1B965F4ULL);
  EXPECT_EQ(splitmix64_next(state), 0x06C45D188009454FULL);
}

TEST(TaskRng, Xoshiro256StarStarMatchesReference) {
  TaskRng r = TaskRng::from_state(1, 2, 3, 4);
  EXPECT_EQ(r.next_u64(), 11520ULL);
  EXPECT_EQ(r.next_u64(), 0ULL);
  EXPECT_EQ(r.next_u64(), 1509978240ULL);
  EXPECT_EQ(r.next_u64(), 1215971899390074240ULL);
}

TEST(TaskRng, Fnv1aTestVectors) {
  EXPECT_EQ(fnv1a64(""), 0xCBF29CE484222325ULL);
  EXPECT_EQ(fnv1a64("a"), 0xAF63DC4C8601EC8CULL);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171F73967E8ULL);
}

TEST(TaskRng, StreamsAndSeedsDiffer) {
  TaskRng a(42, 1), b(42, 2), c(43, 1), a2(42, 1);
  const uint64_t va = a.next_u64();
  EXPECT_NE(va, b.next_u64());
  EXPECT_NE(va, c.next_u64());
  EXPECT_EQ(va, a2.next_u64());
}

TEST(TaskRng, BelowAndRangeStayInBoundsAndCoverEveryValue) {
  TaskRng r(7, 0);
  for (uint64_t n : {1ULL, 2ULL, 3ULL, 7ULL, 10ULL, 1000ULL}) {
    std::vector<int> seen(n, 0);
    for (int i = 0; i < 20000; ++i) {
      const uint64_t x = r.below(n);
      ASSERT_LT(x, n);
      ++seen[x];
    }
    for (uint64_t v = 0; v < n && n <= 10; ++v) {
      // Each bucket near 20000/n; a 30% band is many standard deviations wide.
      EXPECT_NEAR(seen[v], 20000.0 / static_cast<double>(n), 0.3 * 20000.0 / static_cast<double>(n));
    }
  }
  for (int i = 0; i < 10000; ++i) {
    const int64_t x = r.range(-3, 5);
    ASSERT_GE(x, -3);
    ASSERT_LE(x, 5);
  }
  EXPECT_EQ(r.range(4, 4), 4);
}

TEST(TaskRng, UnitIsInHalfOpenInterval) {
  TaskRng r(9, 0);
  double sum = 0;
  for (int i = 0; i < 100000; ++i) {
    const double u = r.unit();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 100000.0, 0.5, 0.01);
}

TEST(TaskRng, ShuffleIsAPermutation) {
  TaskRng r(11, 0);
  std::vector<int> v(50);
  for (int i = 0; i < 50; ++i) v[i] = i;
  r.shuffle(v);
  std::vector<int> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 50; ++i) EXPECT_EQ(sorted[i], i);
  bool moved = false;
  for (int i = 0; i < 50; ++i) moved |= v[i] != i;
  EXPECT_TRUE(moved);
}

}  // namespace
}  // namespace frugal::eval
