// Small, fast random numbers for synthetic weights. No <random> distributions: their output is
// implementation-defined, and a seed must give the same model with every standard library.
#pragma once

#include <cstdint>
#include <string_view>

#include "frugal/core/hash.h"  // splitmix64_next

namespace frugal::synth {

// Mixes several values into one seed.
inline uint64_t mix_seed(uint64_t a, uint64_t b) {
  uint64_t s = a ^ (b * 0xD1B54A32D192ED03ull);
  return splitmix64_next(s);
}

inline uint64_t hash_name(std::string_view s) {  // FNV-1a
  uint64_t h = 0xCBF29CE484222325ull;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ull;
  return h;
}

// xoshiro256** seeded through splitmix64.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& w : s_) w = splitmix64_next(seed);
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Approximately standard normal: the Irwin-Hall sum of four 16-bit uniforms, centred and
  // scaled to unit variance (range +-3.46). Exact integer arithmetic up to one multiply, so the
  // values do not depend on the math library, and several times faster than Box-Muller.
  float normal() {
    const uint64_t r = next();
    const uint32_t sum = static_cast<uint32_t>((r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48));
    // The sum has mean 131070 and variance 4 * (65536^2 - 1) / 12, about (65536 / sqrt(3))^2.
    constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(3) / 65536
    return (static_cast<float>(static_cast<int32_t>(sum) - 131070) * kScale);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace frugal::synth
