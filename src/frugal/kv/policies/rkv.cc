// rkv (R-KV): SnapKV's importance minus a redundancy penalty, so near-duplicate keys do not all
// survive. redundancy = softmax over candidates of each key's mean cosine similarity to the other
// candidates (view.similarity, computed by the round); score = lambda * snapkv - (1 - lambda) *
// redundancy, lambda = 0.5 (the setting the Random Attention paper's tables use).
#include <algorithm>
#include <cmath>

#include "frugal/kv/policies/policy.h"

namespace frugal {
namespace {
constexpr float kLambda = 0.5f;

class RkvPolicy final : public KvPolicy {
 public:
  std::string_view name() const override { return "rkv"; }
  KvPolicyNeeds needs() const override { return {.attention = true, .similarity = true}; }
  void score(const KvHeadView& v, float* scores) const override {
    snapkv_scores(v, scores);
    const int32_t n = v.n_cand;
    if (n < 2) return;
    const float* sim = v.similarity;
    float mx = -INFINITY;
    for (int32_t i = 0; i < n; ++i) mx = std::max(mx, sim[i]);
    double z = 0;
    for (int32_t i = 0; i < n; ++i) z += std::exp(static_cast<double>(sim[i] - mx));
    for (int32_t i = 0; i < n; ++i) {
      const float red = static_cast<float>(std::exp(static_cast<double>(sim[i] - mx)) / z);
      scores[i] = kLambda * scores[i] - (1.f - kLambda) * red;
    }
  }
};
}  // namespace

std::unique_ptr<KvPolicy> make_rkv_policy() { return std::make_unique<RkvPolicy>(); }

}  // namespace frugal
