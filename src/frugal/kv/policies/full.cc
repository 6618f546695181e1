// full: keep everything; the driver never runs a round.
#include "frugal/kv/policies/policy.h"

namespace frugal {
namespace {
class FullPolicy final : public KvPolicy {
 public:
  std::string_view name() const override { return "full"; }
  KvPolicyNeeds needs() const override { return {.evicts = false}; }
  void score(const KvHeadView& v, float* scores) const override {
    for (int32_t i = 0; i < v.n_cand; ++i) scores[i] = 1.f;
  }
};
}  // namespace

std::unique_ptr<KvPolicy> make_full_policy() { return std::make_unique<FullPolicy>(); }

}  // namespace frugal
