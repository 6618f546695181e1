#include "frugal/eval/rng.h"

namespace frugal::eval {

namespace {
inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

uint64_t fnv1a64(std::string_view text) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001B3ULL;
  }
  return h;
}

TaskRng::TaskRng(uint64_t seed, uint64_t stream) {
  uint64_t sm = seed ^ (0x9E3779B97F4A7C15ULL * (stream + 1));
  for (uint64_t& s : s_) s = splitmix64_next(sm);
}

TaskRng TaskRng::from_state(uint64_t s0, uint64_t s1, uint64_t s2, uint64_t s3) {
  TaskRng r;
  r.s_[0] = s0;
  r.s_[1] = s1;
  r.s_[2] = s2;
  r.s_[3] = s3;
  return r;
}

uint64_t TaskRng::next_u64() {
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

uint64_t TaskRng::below(uint64_t n) {
  if (n <= 1) return 0;
  const uint64_t threshold = (0 - n) % n;  // 2^64 mod n
  for (;;) {
    uint64_t x = next_u64();
    if (x >= threshold) return x % n;
  }
}

int64_t TaskRng::range(int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1;
  return static_cast<int64_t>(static_cast<uint64_t>(lo) + below(span));
}

double TaskRng::unit() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

}  // namespace frugal::eval
