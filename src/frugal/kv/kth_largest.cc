#include "frugal/kv/kth_largest.h"

#include <array>
#include <cstring>

namespace frugal {
namespace {

// Larger floats get larger keys: flip every bit of a negative number, only the sign of the others.
uint32_t key_of(float x) {
  if (x == 0.f) x = 0.f;  // -0 is +0
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

float float_of(uint32_t key) {
  const uint32_t u = (key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

}  // namespace

float kth_largest(const std::vector<float>& values, int32_t k, std::vector<uint32_t>& scratch) {
  scratch.resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) scratch[i] = key_of(values[i]);
  // Most significant byte first: count the keys of each byte value among those that share the
  // prefix found so far, step into the bucket that holds the k-th largest, and drop the others.
  size_t n = scratch.size();
  uint32_t prefix = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    std::array<uint32_t, 256> count{};
    for (size_t i = 0; i < n; ++i) ++count[(scratch[i] >> shift) & 0xFFu];
    int b = 255;
    while (static_cast<int64_t>(count[static_cast<size_t>(b)]) < k) k -= static_cast<int32_t>(count[static_cast<size_t>(b--)]);
    prefix |= static_cast<uint32_t>(b) << shift;
    if (shift == 0) break;
    // Keep the bucket's keys only (in place, order irrelevant).
    size_t m = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint32_t key = scratch[i];
      scratch[m] = key;
      m += ((key >> shift) & 0xFFu) == static_cast<uint32_t>(b) ? 1 : 0;
    }
    n = m;
  }
  return float_of(prefix);
}

}  // namespace frugal
