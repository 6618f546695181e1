// How many tokens to draft next for one sequence, from its running acceptance rate. With per-token
// acceptance a, k drafts give (1 - a^(k+1)) / (1 - a) tokens per target pass in expectation and
// cost 1 + k c target passes (c: a draft token's cost relative to a target pass), so the length
// chosen maximises their ratio over [1, k_max]. a is estimated from the rounds seen, each draft
// position being a Bernoulli trial up to the first rejection, with older rounds decaying so the
// length follows a sequence whose predictability changes (copying a passage, then free text).
#pragma once

#include <cstdint>

namespace frugal::speculative {

class DraftLength {
 public:
  DraftLength(int32_t k_max, double cost_ratio) : k_max_(k_max), cost_(cost_ratio) {}
  // The length of the next draft, in [1, k_max].
  int32_t next() const;
  // One verified round: `drafted` tokens proposed, the first `accepted` of them kept.
  void update(int32_t drafted, int32_t accepted);
  // The estimated per-token acceptance rate.
  double acceptance() const { return (kept_ + kPriorKept) / (kept_ + rejected_ + kPriorKept + kPriorRejected); }

 private:
  static constexpr double kDecay = 0.9;  // weight of the past per round
  // The estimate before any round: optimistic (0.75), so a good draft starts at a useful length.
  static constexpr double kPriorKept = 3.0, kPriorRejected = 1.0;
  int32_t k_max_;
  double cost_;
  double kept_ = 0, rejected_ = 0;
};

}  // namespace frugal::speculative
