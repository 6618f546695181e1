// window (StreamingLLM): the oldest few tokens (attention sinks) plus the most recent ones.
#include <limits>

#include "frugal/kv/policies/policy.h"

namespace frugal {
namespace {
constexpr int32_t kSinks = 4;  // as StreamingLLM and kvpress's StreamingLLMPress

class WindowPolicy final : public KvPolicy {
 public:
  std::string_view name() const override { return "window"; }
  KvPolicyNeeds needs() const override { return {}; }
  void score(const KvHeadView& v, float* scores) const override {
    for (int32_t i = 0; i < v.n_cand; ++i) {
      // Slots are in time order, so the first kSinks slots are the oldest tokens still held.
      scores[i] = i < kSinks ? std::numeric_limits<float>::infinity() : static_cast<float>(v.positions[i]);
    }
  }
};
}  // namespace

std::unique_ptr<KvPolicy> make_window_policy() { return std::make_unique<WindowPolicy>(); }

}  // namespace frugal
