#include "frugal/core/greedy_token.h"

#include <limits>

namespace frugal {

int32_t greedy_token(std::span<const float> logits) {
  const auto clean = [](float x) {
    // NaN never wins; +inf ties with the largest finite value (the sampler's sanitize()).
    if (x != x) return -std::numeric_limits<float>::infinity();
    return x < std::numeric_limits<float>::max() ? x : std::numeric_limits<float>::max();
  };
  int32_t best = 0;
  float best_v = logits.empty() ? -std::numeric_limits<float>::infinity() : clean(logits[0]);
  for (size_t i = 1; i < logits.size(); ++i) {
    const float v = clean(logits[i]);
    if (v > best_v) {  // strict: ties stay with the lower id
      best_v = v;
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

}  // namespace frugal
