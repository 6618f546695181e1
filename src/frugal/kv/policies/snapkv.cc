// snapkv: attention of the recent queries (the driver's ring holds the last `buffer` of them),
// averaged, pooled with a 5-wide average along the candidates so neighbours of a hit survive
// together, and averaged over the query heads of the group.
#include "frugal/kv/policies/policy.h"

namespace frugal {

void snapkv_scores(const KvHeadView& v, float* scores) {
  constexpr int kPool = 5;
  const float* mean = v.attention;
  const float w = v.n_rep > 0 && v.n_queries > 0 ? 1.f / static_cast<float>(v.n_rep * v.n_queries) : 0.f;
  for (int32_t i = 0; i < v.n_cand; ++i) {
    float s = 0.f;
    for (int d = -kPool / 2; d <= kPool / 2; ++d) {
      const int32_t k = i + d;
      if (k >= 0 && k < v.n_cand) s += mean[static_cast<size_t>(k)];
    }
    scores[i] = s * w / kPool;
  }
}

namespace {
class SnapKvPolicy final : public KvPolicy {
 public:
  std::string_view name() const override { return "snapkv"; }
  KvPolicyNeeds needs() const override { return {.attention = true}; }
  void score(const KvHeadView& v, float* scores) const override { snapkv_scores(v, scores); }
};
}  // namespace

std::unique_ptr<KvPolicy> make_snapkv_policy() { return std::make_unique<SnapKvPolicy>(); }

}  // namespace frugal
