// kth_largest (radix selection on float bits) against std::nth_element on fresh random inputs:
// scores in random order, heavy ties, both zeros, infinities, subnormals, negative numbers, and
// every k of small sets.
#include "frugal/kv/kth_largest.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace frugal {
namespace {

float reference(std::vector<float> v, int32_t k) {
  std::nth_element(v.begin(), v.begin() + (k - 1), v.end(), std::greater<float>());
  return v[static_cast<size_t>(k - 1)];
}

TEST(KthLargest, EqualsNthElementOnFreshRandomInputs) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const float inf = std::numeric_limits<float>::infinity();
  const float special[] = {0.f, -0.f, inf, -inf, std::numeric_limits<float>::denorm_min(),
                           -std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max(),
                           std::numeric_limits<float>::lowest(), 1.f, -1.f};
  std::vector<uint32_t> scratch;
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % (trial < 2000 ? 40 : 3000));
    std::vector<float> v(static_cast<size_t>(n));
    const int kind = trial % 4;
    for (float& x : v) {
      switch (kind) {
        case 0: x = std::normal_distribution<float>(0.f, 3.f)(rng); break;                       // distinct
        case 1: x = static_cast<float>(static_cast<int>(rng() % 7) - 3); break;                  // many ties
        case 2: x = special[rng() % (sizeof special / sizeof special[0])]; break;                 // edges
        default: x = std::ldexp(std::uniform_real_distribution<float>(-1.f, 1.f)(rng), static_cast<int>(rng() % 80) - 40);
      }
    }
    const std::vector<int32_t> ks = n <= 40 ? std::vector<int32_t>{} : std::vector<int32_t>{1, n / 3, n / 2, n - 1, n};
    for (int32_t k = 1; k <= n; ++k) {
      if (n > 40 && std::find(ks.begin(), ks.end(), k) == ks.end()) continue;
      const float want = reference(v, k);
      const float got = kth_largest(v, k, scratch);
      ASSERT_TRUE(got == want) << "n " << n << " k " << k << " kind " << kind << ": " << got << " vs " << want;
    }
  }
}

}  // namespace
}  // namespace frugal
