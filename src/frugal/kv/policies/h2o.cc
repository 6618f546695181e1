// h2o (Heavy-Hitter Oracle): keep the tokens that have received the most attention since they
// entered the cache, summed over the query heads of the group. The driver accumulates every
// decode query's attention at the round that follows it (rounds fire every `buffer` steps and
// the recent-query ring holds `buffer` queries, so no decode query is missed).
#include "frugal/kv/policies/policy.h"

namespace frugal {
namespace {
class H2oPolicy final : public KvPolicy {
 public:
  std::string_view name() const override { return "h2o"; }
  KvPolicyNeeds needs() const override { return {.attention = true, .accumulated = true}; }
  void score(const KvHeadView& v, float* scores) const override {
    for (int32_t i = 0; i < v.n_cand; ++i) scores[i] = v.accumulated[i];
  }
};
}  // namespace

std::unique_ptr<KvPolicy> make_h2o_policy() { return std::make_unique<H2oPolicy>(); }

}  // namespace frugal
