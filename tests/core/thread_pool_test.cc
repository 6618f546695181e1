#include "frugal/core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>
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

// Runs body on its own thread; a hang fails the test in seconds with a message (and ends the
// process, since a deadlocked thread cannot be joined) instead of spinning until ctest's timeout.
template <typename F>
void within(std::chrono::seconds limit, const char* what, F body) {
  auto done = std::async(std::launch::async, body);
  if (done.wait_for(limit) != std::future_status::ready) {
    std::fprintf(stderr, "%s did not finish within %lld s: deadlock\n", what,
                 static_cast<long long>(limit.count()));
    std::fflush(stderr);
    std::_Exit(3);
  }
  done.get();
}

// Regression: the engine's loop and a second user dispatched on one pool at once; each reset the
// other's job and both spun forever. A second dispatcher now waits its turn, and every range of
// both is still visited exactly once.
TEST(ThreadPool, TwoThreadsDispatchingAtOnceNeitherHangNorLoseWork) {
  ThreadPool pool(3);
  within(std::chrono::seconds(60), "two concurrent dispatchers", [&] {
    constexpr int kReps = 3000;
    auto user = [&](int salt, int64_t* errors) {
      std::vector<int64_t> a(257);
      for (int rep = 0; rep < kReps; ++rep) {
        pool.parallel_for(257, 5, [&](int64_t b, int64_t e, int) {
          for (int64_t i = b; i < e; ++i) a[i] += i * salt + rep;
        });
      }
      for (int64_t i = 0; i < 257; ++i) {
        const int64_t want = kReps * i * salt + int64_t{kReps} * (kReps - 1) / 2;
        if (a[i] != want) ++*errors;
      }
    };
    int64_t err1 = 0, err2 = 0;
    std::thread t1(user, 1, &err1), t2(user, 7, &err2);
    t1.join();
    t2.join();
    EXPECT_EQ(err1, 0);
    EXPECT_EQ(err2, 0);
  });
  // On two cores the threads overlap often enough to be seen; on any machine the count is a
  // record, not a requirement.
  std::printf("contended dispatches: %llu\n", static_cast<unsigned long long>(pool.contended_dispatches()));
}

// A task that dispatches on its own pool runs the inner range on its thread instead of waiting
// for workers that are busy with (or waiting on) the outer job.
TEST(ThreadPool, NestedDispatchRunsInline) {
  ThreadPool pool(3);
  within(std::chrono::seconds(60), "nested dispatch", [&] {
    std::vector<std::atomic<int>> hits(64 * 32);
    pool.parallel_for(64, 1, [&](int64_t b, int64_t e, int) {
      for (int64_t o = b; o < e; ++o) {
        pool.parallel_for(32, 4, [&](int64_t ib, int64_t ie, int) {
          for (int64_t i = ib; i < ie; ++i) hits[o * 32 + i].fetch_add(1);
        });
      }
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  });
  EXPECT_GT(pool.nested_dispatches(), 0u);
}

}  // namespace
}  // namespace frugal
