// tova (Token Omission Via Attention): keep the tokens the latest query attends to most,
// averaged over the query heads of the group.
#include "frugal/kv/policies/policy.h"

namespace frugal {
namespace {
class TovaPolicy final : public KvPolicy {
 public:
  std::string_view name() const override { return "tova"; }
  KvPolicyNeeds needs() const override { return {.attention = true, .newest_query_only = true}; }
  void score(const KvHeadView& v, float* scores) const override {
    const bool any = v.n_rep > 0 && v.n_queries > 0;
    for (int32_t i = 0; i < v.n_cand; ++i) scores[i] = any ? v.attention_last[i] / static_cast<float>(v.n_rep) : 0.f;
  }
};
}  // namespace

std::unique_ptr<KvPolicy> make_tova_policy() { return std::make_unique<TovaPolicy>(); }

}  // namespace frugal
