#include "frugal/decode/speculative/draft_length.h"

#include <cmath>

namespace frugal::speculative {

int32_t DraftLength::next() const {
  const double a = acceptance();
  int32_t best = 1;
  double best_gain = 0;
  for (int32_t k = 1; k <= k_max_; ++k) {
    const double tokens = a >= 1.0 ? k + 1.0 : (1.0 - std::pow(a, k + 1)) / (1.0 - a);
    const double gain = tokens / (1.0 + k * cost_);
    // Strictly better only: among equal gains the shorter draft wastes less on a rejection.
    if (gain > best_gain * (1.0 + 1e-9)) {
      best = k;
      best_gain = gain;
    }
  }
  return best;
}

void DraftLength::update(int32_t drafted, int32_t accepted) {
  if (drafted <= 0) return;
  kept_ = kept_ * kDecay + accepted;
  rejected_ = rejected_ * kDecay + (accepted < drafted ? 1.0 : 0.0);
}

}  // namespace frugal::speculative
