// The task generators' random numbers. Every draw is specified here bit for bit (splitmix64 to
// seed, xoshiro256** to draw, rejection sampling for ranges), so an example depends only on its
// seed: never on the C++ library, compiler or platform, as <random> distributions would.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "frugal/core/hash.h"  // splitmix64_next

namespace frugal::eval {

// FNV-1a, 64-bit: turns a family name into a seed component.
uint64_t fnv1a64(std::string_view text);

class TaskRng {
 public:
  // Independent streams from one seed: the state is four splitmix64 outputs started from
  // seed ^ (0x9E3779B97F4A7C15 * (stream + 1)).
  TaskRng(uint64_t seed, uint64_t stream);
  // A generator with exactly this xoshiro256** state (for checks against published sequences).
  static TaskRng from_state(uint64_t s0, uint64_t s1, uint64_t s2, uint64_t s3);

  uint64_t next_u64();  // xoshiro256** (Blackman, Vigna 2018)
  // Uniform in [0, n), n >= 1: draw x until x >= 2^64 mod n, return x mod n (unbiased).
  uint64_t below(uint64_t n);
  // Uniform integer in [lo, hi] (inclusive), lo <= hi.
  int64_t range(int64_t lo, int64_t hi);
  // Uniform in [0, 1): the top 53 bits of one draw times 2^-53.
  double unit();
  // Fisher-Yates from the last element down, j = below(i + 1).
  template <typename T>
  void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) {
      size_t j = static_cast<size_t>(below(i));
      std::swap(v[i - 1], v[j]);
    }
  }

 private:
  TaskRng() = default;
  uint64_t s_[4] = {0, 0, 0, 0};
};

}  // namespace frugal::eval
