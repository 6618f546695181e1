// Shared helpers of the backend tests: seeded random data and backends of several sizes.
#pragma once

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "frugal/backend/backend.h"

namespace frugal::testing {

inline std::vector<float> random_floats(std::mt19937& rng, size_t n, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Thread counts every op is run with (1 = no pool workers; 3 = uneven split).
inline const std::vector<int>& thread_counts() {
  static const std::vector<int> counts = {1, 2, 3, 4};
  return counts;
}

inline std::unique_ptr<Backend> backend_with(int threads) {
  CpuBackendOptions o;
  o.n_threads = threads;
  return make_cpu_backend(o);
}

// Runs fn(backend) on every SIMD target this CPU supports and the kernels were built for: the
// best target with every thread count, the others with 3 threads (an uneven split).
template <class Fn>
void for_each_target_and_threads(Fn fn) {
  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i] == HWY_SSSE3) continue;  // not built into the quant kernels (SSE4 covers it)
    hwy::SetSupportedTargetsForTest(targets[i]);
    for (int threads : thread_counts()) {
      if (i > 0 && threads != 3) continue;
      SCOPED_TRACE(std::string(hwy::TargetName(targets[i])) + ", threads " + std::to_string(threads));
      auto be = backend_with(threads);
      fn(*be);
      if (::testing::Test::HasFatalFailure()) break;
    }
    hwy::SetSupportedTargetsForTest(0);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace frugal::testing
