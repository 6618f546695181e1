// Attention over quantized KV caches (int8, int4, hyquant, hbq): the CPU kernel, which dequantizes
// inside each work item, against a double-precision softmax over the rows the cache dequantizes
// to (tight), and against attention over the original full-precision K/V (bounded by the format).
#include <gtest/gtest.h>

#include <cmath>

#include "frugal/backend/cpu/simd_ops.h"
#include "frugal/kv/kv_cache.h"
#include "test_util.h"

namespace frugal {
namespace {

using testing::for_each_target_and_threads;
using testing::random_floats;

// out[t][h][d] for queries at `pos` over rows k/v ([head_kv][n][d]) at positions 0..n-1.
std::vector<float> reference(const std::vector<float>& q, const std::vector<int32_t>& pos,
                             const std::vector<std::vector<float>>& k, const std::vector<std::vector<float>>& v,
                             const AttentionParams& p) {
  const int d = p.head_dim, rep = p.n_head / p.n_head_kv;
  std::vector<float> out(q.size());
  for (size_t t = 0; t < pos.size(); ++t) {
    for (int h = 0; h < p.n_head; ++h) {
      const float* qh = q.data() + (t * p.n_head + h) * d;
      const auto& kk = k[h / rep];
      const auto& vv = v[h / rep];
      const int n = std::min<int>(pos[t] + 1, static_cast<int>(kk.size()) / d);
      std::vector<double> s(n);
      double m = -1e300, z = 0;
      for (int j = 0; j < n; ++j) {
        double dot = 0;
        for (int e = 0; e < d; ++e) dot += double{qh[e]} * kk[static_cast<size_t>(j) * d + e];
        s[j] = dot * p.scale;
        m = std::max(m, s[j]);
      }
      for (double& x : s) z += (x = std::exp(x - m));
      for (int e = 0; e < d; ++e) {
        double acc = 0;
        for (int j = 0; j < n; ++j) acc += s[j] * vv[static_cast<size_t>(j) * d + e];
        out[(t * p.n_head + h) * d + e] = static_cast<float>(acc / z);
      }
    }
  }
  return out;
}

TEST(AttentionKvQuant, MatchesReferenceOverDequantizedRowsAndStaysNearFullPrecision) {
  std::mt19937 rng(91);
  const int n = 150, d = 64, n_head = 6, n_head_kv = 2;
  AttentionParams p;
  p.n_head = n_head;
  p.n_head_kv = n_head_kv;
  p.head_dim = d;
  p.scale = 1.f / std::sqrt(static_cast<float>(d));
  const auto keys = random_floats(rng, static_cast<size_t>(n) * n_head_kv * d, 1.5f);
  const auto vals = random_floats(rng, static_cast<size_t>(n) * n_head_kv * d);
  std::vector<std::vector<float>> k_full(n_head_kv), v_full(n_head_kv);
  for (int g = 0; g < n_head_kv; ++g) {
    for (int t = 0; t < n; ++t) {
      for (int e = 0; e < d; ++e) {
        k_full[g].push_back(keys[(static_cast<size_t>(t) * n_head_kv + g) * d + e]);
        v_full[g].push_back(vals[(static_cast<size_t>(t) * n_head_kv + g) * d + e]);
      }
    }
  }
  // Decode queries and a prefill-like run over the first tokens.
  std::vector<int32_t> pos = {n - 1, n - 1, 40, 41, 42, 43, 100};
  std::vector<int32_t> seq(pos.size(), 0);
  const auto q = random_floats(rng, pos.size() * n_head * d);
  const auto exact = reference(q, pos, k_full, v_full, p);
  double err8 = 0, err4 = 0;
  for (KvQuant kq : {KvQuant::kInt8, KvQuant::kInt4, KvQuant::kHyQuant, KvQuant::kHbq}) {
    SCOPED_TRACE(kv_quant_name(kq));
    KvCacheOptions ko;
    ko.n_layer = 1;
    ko.n_head_kv = n_head_kv;
    ko.head_dim = d;
    ko.capacity = 160;
    ko.quant = kq;
    auto c = KvCache::create(ko);
    ASSERT_TRUE(c.ok());
    KvCache& kv = *c;
    for (int t = 0; t < n; ++t) {
      const size_t off = static_cast<size_t>(t) * n_head_kv * d;
      ASSERT_TRUE(kv.append(0, 0, t, keys.data() + off, vals.data() + off).ok());
    }
    std::vector<float> qmean(static_cast<size_t>(n_head_kv) * d, 0.f);
    for (size_t i = 0; i < qmean.size(); ++i) qmean[i] = q[i];
    kv.flush(0, 0, qmean.data());  // hyquant: quantize down to the recent window
    std::vector<std::vector<float>> k_deq(n_head_kv), v_deq(n_head_kv);
    for (int g = 0; g < n_head_kv; ++g) {
      k_deq[g].resize(static_cast<size_t>(n) * d);
      v_deq[g].resize(static_cast<size_t>(n) * d);
      kv.read_rows(0, 0, g, k_deq[g].data(), v_deq[g].data());
    }
    const auto ref = reference(q, pos, k_deq, v_deq, p);
    double err = 0;
    for (size_t i = 0; i < exact.size(); ++i) err += std::fabs(ref[i] - exact[i]);
    err /= static_cast<double>(exact.size());
    // Mean output error against full precision, from the format's step sizes: keys ~N(0, 1.5) with
    // 32-token ranges of ~7 and values ranges of ~5 give steps of ~0.03 (int8) and ~0.4 (int4).
    EXPECT_LT(err, kq == KvQuant::kInt8 ? 0.01 : 0.12);
    (kq == KvQuant::kInt8 ? err8 : err4) = kq == KvQuant::kHyQuant ? err4 : err;
    for_each_target_and_threads([&](Backend& be) {
      std::vector<float> out(q.size(), -777.f);
      be.attention(q.data(), kv, 0, seq.data(), pos.data(), static_cast<int64_t>(pos.size()), p, out.data());
      for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 2e-5 * (1 + std::abs(ref[i]))) << i;
    });
  }
  EXPECT_LT(err8, err4);
}

// The SIMD loader the attention uses reads quantized heads as read_rows (its reference) does:
// key groups cut by the block, the FP16 residual, hyquant's FP16 copies of hot slots; on every
// target, for 8- and 4-bit codes and hbq's rows.
TEST(AttentionKvQuant, SimdBlockLoaderMatchesReadRows) {
  std::mt19937 rng(17);
  const int d = 64, n_head_kv = 2, n = 203;
  const auto keys = random_floats(rng, static_cast<size_t>(n) * n_head_kv * d, 1.5f);
  const auto vals = random_floats(rng, static_cast<size_t>(n) * n_head_kv * d);
  for (KvQuant kq : {KvQuant::kInt8, KvQuant::kInt4, KvQuant::kHyQuant, KvQuant::kHbq}) {
    SCOPED_TRACE(kv_quant_name(kq));
    KvCacheOptions ko;
    ko.n_layer = 1;
    ko.n_head_kv = n_head_kv;
    ko.head_dim = d;
    ko.capacity = 256;
    ko.quant = kq;
    auto c = KvCache::create(ko);
    ASSERT_TRUE(c.ok());
    KvCache& kv = *c;
    for (int t = 0; t < n; ++t) {
      const size_t off = static_cast<size_t>(t) * n_head_kv * d;
      ASSERT_TRUE(kv.append(0, 0, t, keys.data() + off, vals.data() + off).ok());
    }
    const auto qmean = random_floats(rng, static_cast<size_t>(n_head_kv) * d);
    kv.flush(0, 0, qmean.data());
    for (int g = 0; g < n_head_kv; ++g) {
      const KvQuantHeadView h = kv.quant_view(0, 0, g);
      ASSERT_EQ(h.size, n);
      ASSERT_GT(h.cold, 0);
      ASSERT_LT(h.cold, n);  // some FP16 residual is left
      if (kq == KvQuant::kHyQuant) {
        EXPECT_GT(h.hot_n, 0);
      }
      std::vector<float> kr(static_cast<size_t>(n) * d), vr(kr.size());
      kv.read_rows(0, 0, g, kr.data(), vr.data());
      for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
        if (target == HWY_SSSE3) continue;
        hwy::SetSupportedTargetsForTest(target);
        for (const auto& [k0, nk] : std::vector<std::pair<int, int>>{{0, 64}, {64, 64}, {17, 50}, {150, 53}, {192, 11}}) {
          std::vector<float> kb(static_cast<size_t>(nk) * d, -7.f), vb(kb.size(), -7.f);
          cpu::dequant_kv_block(h, d, k0, nk, kb.data(), vb.data());
          for (size_t i = 0; i < kb.size(); ++i) {
            const size_t ref = static_cast<size_t>(k0) * d + i;
            ASSERT_NEAR(kb[i], kr[ref], 1e-6f * (1 + std::abs(kr[ref]))) << hwy::TargetName(target) << " key " << i;
            ASSERT_NEAR(vb[i], vr[ref], 1e-6f * (1 + std::abs(vr[ref]))) << hwy::TargetName(target) << " value " << i;
          }
        }
        hwy::SetSupportedTargetsForTest(0);
      }
    }
  }
}

}  // namespace
}  // namespace frugal
