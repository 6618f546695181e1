// random (Random Attention): a uniformly random subset of the candidates, drawn independently per
// layer, KV head and round from the seed the driver derives for this head. The scores are the
// ranks of a uniformly random permutation, so the top-k is a uniform k-subset without replacement
// and no ties can bias it (top-k of i.i.d. uniforms, as the authors draw it, is the same law).
#include <utility>
#include <vector>

#include "frugal/core/hash.h"
#include "frugal/kv/policies/policy.h"

namespace frugal {
namespace {

// Uniform in [0, n) without modulo bias (Lemire's multiply-and-reject).
uint32_t below(uint64_t& state, uint32_t n) {
  uint64_t m = static_cast<uint64_t>(static_cast<uint32_t>(splitmix64_next(state))) * n;
  auto low = static_cast<uint32_t>(m);
  if (low < n) {
    const uint32_t threshold = (0u - n) % n;
    while (low < threshold) {
      m = static_cast<uint64_t>(static_cast<uint32_t>(splitmix64_next(state))) * n;
      low = static_cast<uint32_t>(m);
    }
  }
  return static_cast<uint32_t>(m >> 32);
}

class RandomPolicy final : public KvPolicy {
 public:
  std::string_view name() const override { return "random"; }
  KvPolicyNeeds needs() const override { return {}; }
  void score(const KvHeadView& v, float* scores) const override {
    // Fisher-Yates over ranks 0..n_cand-1 (exact as floats below 2^24 candidates).
    for (int32_t i = 0; i < v.n_cand; ++i) scores[i] = static_cast<float>(i);
    uint64_t state = v.seed;
    for (int32_t i = v.n_cand - 1; i > 0; --i) {
      const uint32_t j = below(state, static_cast<uint32_t>(i) + 1);
      std::swap(scores[i], scores[j]);
    }
  }
};
}  // namespace

std::unique_ptr<KvPolicy> make_random_policy() { return std::make_unique<RandomPolicy>(); }

}  // namespace frugal
