// rkv (R-KV): SnapKV's importance minus a redundancy penalty, so near-duplicate keys do not all
// survive. redundancy = softmax over candidates of each key's mean cosine similarity to the other
// candidates; score = lambda * snapkv - (1 - lambda) * redundancy, lambda = 0.5 (the setting the
// Random Attention paper's tables use).
#include <algorithm>
#include <cmath>
#include <vector>

#include "frugal/kv/policies/policy.h"

namespace frugal {
namespace {
constexpr float kLambda = 0.5f;

class RkvPolicy final : public KvPolicy {
 public:
  std::string_view name() const override { return "rkv"; }
  KvPolicyNeeds needs() const override { return {.keys = true, .attention = true}; }
  void score(const KvHeadView& v, float* scores) const override {
    snapkv_scores(v, scores);
    const int32_t n = v.n_cand;
    const int d = v.head_dim;
    if (n < 2) return;
    std::vector<float> unit(static_cast<size_t>(n) * d);
    for (int32_t i = 0; i < n; ++i) {
      const float* k = v.keys + static_cast<size_t>(i) * d;
      double ss = 0;
      for (int e = 0; e < d; ++e) ss += static_cast<double>(k[e]) * k[e];
      const float inv = ss > 0 ? static_cast<float>(1.0 / std::sqrt(ss)) : 0.f;
      for (int e = 0; e < d; ++e) unit[static_cast<size_t>(i) * d + e] = k[e] * inv;
    }
    std::vector<float> mean_sim(static_cast<size_t>(n), 0.f);
    for (int32_t i = 0; i < n; ++i) {
      const float* a = unit.data() + static_cast<size_t>(i) * d;
      for (int32_t j = i + 1; j < n; ++j) {
        const float* b = unit.data() + static_cast<size_t>(j) * d;
        float s = 0.f;
        for (int e = 0; e < d; ++e) s += a[e] * b[e];
        mean_sim[static_cast<size_t>(i)] += s;
        mean_sim[static_cast<size_t>(j)] += s;
      }
    }
    float mx = -INFINITY;
    for (float& s : mean_sim) {
      s /= static_cast<float>(n - 1);
      mx = std::max(mx, s);
    }
    double z = 0;
    for (float s : mean_sim) z += std::exp(static_cast<double>(s - mx));
    for (int32_t i = 0; i < n; ++i) {
      const float red = static_cast<float>(std::exp(static_cast<double>(mean_sim[static_cast<size_t>(i)] - mx)) / z);
      scores[i] = kLambda * scores[i] - (1.f - kLambda) * red;
    }
  }
};
}  // namespace

std::unique_ptr<KvPolicy> make_rkv_policy() { return std::make_unique<RkvPolicy>(); }

}  // namespace frugal
