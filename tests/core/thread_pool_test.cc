#include "frugal/core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <vector>

namespace frugal {
namespace {

TEST(ThreadPool, SizeCountsCaller) {
  EXPECT_EQ(ThreadPool(1).size(), 1);
  EXPECT_EQ(ThreadPool(3).size(), 3);
  EXPECT_GE(ThreadPool(0).size(), 1);
}

// Every index must be visited exactly once, by a thread id in range, with chunk bounds respected.
TEST(ThreadPool, VisitsEveryIndexOnce) {
  std::mt19937 rng(1234);
  for (int threads = 1; threads <= 4; ++threads) {
    ThreadPool pool(threads);
    for (int rep = 0; rep < 50; ++rep) {
      const int64_t n = std::uniform_int_distribution<int64_t>(0, 3000)(rng);
      const int64_t chunk = std::uniform_int_distribution<int64_t>(1, 300)(rng);
      std::vector<std::atomic<int>> hits(n);
      std::atomic<bool> bad{false};
      pool.parallel_for(n, chunk, [&](int64_t b, int64_t e, int t) {
        if (t < 0 || t >= threads || b < 0 || e > n || e <= b || e - b > chunk || b % chunk != 0) {
          bad = true;
        }
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      ASSERT_FALSE(bad) << "threads " << threads << " n " << n << " chunk " << chunk;
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i;
    }
  }
}

// Many tiny back-to-back dispatches (the decode pattern) must neither lose nor repeat work, and
// results of one dispatch must be visible to the next.
TEST(ThreadPool, ManySmallDispatches) {
  ThreadPool pool(4);
  std::vector<int64_t> a(64, 0);
  for (int rep = 0; rep < 20000; ++rep) {
    pool.parallel_for(64, 3, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) a[i] += i + rep;
    });
  }
  for (int64_t i = 0; i < 64; ++i) {
    EXPECT_EQ(a[i], 20000 * i + int64_t{20000} * 19999 / 2) << i;
  }
}

// Work spreads to more than one thread when chunks are slow enough to overlap.
TEST(ThreadPool, UsesWorkers) {
  ThreadPool pool(2);
  std::atomic<int> seen_mask{0};
  for (int rep = 0; rep < 200 && seen_mask.load() != 3; ++rep) {
    pool.parallel_for(64, 1, [&](int64_t, int64_t, int t) {
      seen_mask.fetch_or(1 << t);
      volatile double x = 0;
      for (int i = 0; i < 20000; ++i) x = x + i;
    });
  }
  EXPECT_EQ(seen_mask.load(), 3);
}

// Workers that fell asleep between dispatches wake up for the next one.
TEST(ThreadPool, WakesAfterIdle) {
  ThreadPool pool(3);
  for (int rep = 0; rep < 3; ++rep) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::atomic<int64_t> sum{0};
    pool.parallel_for(1000, 7, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) sum += i;
    });
    EXPECT_EQ(sum.load(), 999 * 1000 / 2);
  }
}

}  // namespace
}  // namespace frugal
