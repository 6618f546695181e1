// 64-bit mixing for hashes that must be the same on every machine and every run (prefix hashes of
// KV pages, seeds derived from other seeds), and the one splitmix64 generator step every seeded
// component starts from (sampling, random eviction, task generators, synthetic weights).
// std::hash and <random>'s distributions are neither specified nor stable.
#pragma once

#include <cstdint>

namespace frugal {

// splitmix64's output function (Steele, Lea, Flood 2014): a bijection on 64-bit values whose
// output bits each depend on every input bit.
constexpr uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// One step of the splitmix64 generator: returns mix64 of the state, then advances it by the
// golden-ratio increment (from state 0: 0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, ...).
constexpr uint64_t splitmix64_next(uint64_t& state) {
  const uint64_t out = mix64(state);
  state += 0x9e3779b97f4a7c15ull;
  return out;
}

// Folds `value` into `seed`; order matters, so a sequence of values gives a chained hash.
constexpr uint64_t hash_combine(uint64_t seed, uint64_t value) { return mix64(seed ^ mix64(value)); }

}  // namespace frugal
