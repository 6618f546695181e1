// Attention over the KV cache against a double-precision softmax reference: GQA, sliding windows,
// ragged batches of several sequences, evicted (per-head) token tables, F16 and F32 caches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "frugal/core/half.h"
#include "frugal/kv/kv_cache.h"
#include "test_util.h"

namespace frugal {
namespace {

using testing::backend_with;
using testing::for_each_target_and_threads;
using testing::random_floats;

// Element e of one cached row, read through the row accessor (independent of the pages' layout).
float cache_value(const KvCache& kv, const void* row, int e) {
  if (kv.options().dtype == DType::kF16) return fp16_to_f32(static_cast<const uint16_t*>(row)[e]);
  return static_cast<const float*>(row)[e];
}

// Plain scalar attention: for every (token, head), the visible keys of its sequence and KV head.
std::vector<float> attention_reference(const std::vector<float>& q, const KvCache& kv, int layer,
                                       const std::vector<int32_t>& seq, const std::vector<int32_t>& pos,
                                       const AttentionParams& p) {
  const int64_t n = static_cast<int64_t>(seq.size());
  const int d = p.head_dim;
  std::vector<float> out(q.size(), 0.f);
  for (int64_t t = 0; t < n; ++t) {
    for (int h = 0; h < p.n_head; ++h) {
      const int g = h / (p.n_head / p.n_head_kv);
      const float* qh = q.data() + (t * p.n_head + h) * d;
      const int32_t len = kv.size(layer, seq[t], g);
      const int32_t* kp = kv.positions(layer, seq[t], g);
      std::vector<double> s;
      std::vector<int32_t> idx;
      for (int32_t j = 0; j < len; ++j) {
        if (kp[j] > pos[t]) continue;
        if (p.window > 0 && kp[j] <= pos[t] - p.window) continue;
        double dot = 0;
        for (int e = 0; e < d; ++e) dot += static_cast<double>(qh[e]) * cache_value(kv, kv.key_row(layer, seq[t], g, j), e);
        s.push_back(dot * p.scale);
        idx.push_back(j);
      }
      if (s.empty()) continue;  // nothing visible: zeros
      const double m = *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - m));
      float* o = out.data() + (t * p.n_head + h) * d;
      for (int e = 0; e < d; ++e) {
        double acc = 0;
        for (size_t j = 0; j < s.size(); ++j) acc += s[j] * cache_value(kv, kv.value_row(layer, seq[t], g, idx[j]), e);
        o[e] = static_cast<float>(acc / sum);
      }
    }
  }
  return out;
}

struct Scenario {
  const char* name;
  int n_head, n_head_kv, head_dim;
  int32_t window;
  DType dtype;
};

// A cache with three sequences of different lengths, then a ragged batch that interleaves them
// and asks for various positions (including before the first cached one of an evicted head).
void run_scenario(const Scenario& sc, std::mt19937& rng) {
  KvCacheOptions ko;
  ko.n_layer = 2;
  ko.n_head_kv = sc.n_head_kv;
  ko.head_dim = sc.head_dim;
  ko.n_seq = 3;
  ko.capacity = 300;
  ko.dtype = sc.dtype;
  auto kvr = KvCache::create(ko);
  ASSERT_TRUE(kvr.ok()) << kvr.status().to_string();
  KvCache& kv = kvr.value();
  const int layer = 1;
  const int32_t lens[3] = {150, 7, 70};
  for (int s = 0; s < 3; ++s) {
    for (int32_t p = 0; p < lens[s]; ++p) {
      const auto k = random_floats(rng, sc.n_head_kv * sc.head_dim, 1.5f);
      const auto v = random_floats(rng, sc.n_head_kv * sc.head_dim);
      ASSERT_TRUE(kv.append(0, s, p, k.data(), v.data()).ok());
      ASSERT_TRUE(kv.append(layer, s, p, k.data(), v.data()).ok());
    }
  }
  // Evict in head 0 of sequence 2 (different token tables per head): keep every third token
  // from position 9 on.
  std::vector<int32_t> keep;
  for (int32_t j = 9; j < lens[2]; j += 3) keep.push_back(j);
  ASSERT_TRUE(kv.keep_tokens(layer, 2, 0, keep).ok());

  std::vector<int32_t> seq = {0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 2, 1, 0, 0, 0, 0, 0, 0, 0};
  std::vector<int32_t> pos = {149, 0, 63, 6, 69, 64, 65, 100, 2, 3, 40, 0, 120, 121, 122, 123, 124, 125, 126};
  const int64_t n = static_cast<int64_t>(seq.size());
  AttentionParams p;
  p.n_head = sc.n_head;
  p.n_head_kv = sc.n_head_kv;
  p.head_dim = sc.head_dim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(sc.head_dim));
  p.window = sc.window;
  const auto q = random_floats(rng, n * sc.n_head * sc.head_dim, 1.5f);
  const auto ref = attention_reference(q, kv, layer, seq, pos, p);

  // Also a single decode token and a same-sequence prefill run (the common shapes).
  std::vector<int32_t> seq1 = {0}, pos1 = {149};
  const auto q1 = random_floats(rng, sc.n_head * sc.head_dim);
  const auto ref1 = attention_reference(q1, kv, layer, seq1, pos1, p);
  std::vector<int32_t> seq2(100, 0), pos2(100);
  for (int i = 0; i < 100; ++i) pos2[i] = 50 + i;
  const auto q2 = random_floats(rng, 100 * sc.n_head * sc.head_dim);
  const auto ref2 = attention_reference(q2, kv, layer, seq2, pos2, p);

  for_each_target_and_threads([&](Backend& be) {
    auto check = [&](const std::vector<float>& qq, const std::vector<int32_t>& ss, const std::vector<int32_t>& pp,
                     const std::vector<float>& rr, const char* what) {
      std::vector<float> out(qq.size(), -777.f);
      be.attention(qq.data(), kv, layer, ss.data(), pp.data(), static_cast<int64_t>(ss.size()), p, out.data());
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_NEAR(out[i], rr[i], 2e-5 * (1 + std::abs(rr[i])))
            << sc.name << " " << what << " index " << i << " token "
            << i / (sc.n_head * sc.head_dim) << " head " << (i / sc.head_dim) % sc.n_head;
      }
    };
    check(q, seq, pos, ref, "ragged");
    check(q1, seq1, pos1, ref1, "decode");
    check(q2, seq2, pos2, ref2, "prefill");
  });
}

TEST(Attention, MatchesReference) {
  const Scenario scenarios[] = {
      {"gqa8_f16", 32, 4, 64, 0, DType::kF16},     {"gqa8_f32", 16, 2, 64, 0, DType::kF32},
      {"gqa7_f16", 14, 2, 64, 0, DType::kF16},     {"mha_odd_dim", 3, 3, 20, 0, DType::kF16},
      {"window_f16", 8, 2, 32, 17, DType::kF16},   {"window_f32", 6, 1, 40, 64, DType::kF32},
      {"head128", 4, 2, 128, 0, DType::kF16},      {"one_head", 1, 1, 8, 3, DType::kF32},
  };
  std::mt19937 rng(77);
  for (const Scenario& sc : scenarios) {
    SCOPED_TRACE(sc.name);
    run_scenario(sc, rng);
    if (HasFatalFailure()) return;
  }
}

TEST(Attention, EmptyHistoryGivesZeros) {
  KvCacheOptions ko;
  ko.n_layer = 1;
  ko.n_head_kv = 1;
  ko.head_dim = 16;
  ko.capacity = 8;
  auto kvr = KvCache::create(ko);
  ASSERT_TRUE(kvr.ok());
  std::mt19937 rng(3);
  const auto q = random_floats(rng, 2 * 16);
  std::vector<int32_t> seq = {0}, pos = {5};
  AttentionParams p;
  p.n_head = 2;
  p.n_head_kv = 1;
  p.head_dim = 16;
  std::vector<float> out(q.size(), -1.f);
  backend_with(2)->attention(q.data(), kvr.value(), 0, seq.data(), pos.data(), 1, p, out.data());
  for (float v : out) EXPECT_EQ(v, 0.f);
}

}  // namespace
}  // namespace frugal

namespace frugal {
namespace {

// A verify pass (speculative decoding): the cache already holds the keys of all of the pass's
// tokens, and in row-invariant mode each token's output must be bitwise what a one-token pass
// gives when the cache holds only the keys up to that token, across key-block boundaries.
TEST(Attention, RowInvariantPassEqualsOneTokenPassesBitwise) {
  const Scenario scenarios[] = {{"gqa3_f16", 6, 2, 64, 0, DType::kF16}, {"window_f32", 8, 2, 32, 17, DType::kF32}};
  std::mt19937 rng(91);
  for (const Scenario& sc : scenarios) {
    SCOPED_TRACE(sc.name);
    KvCacheOptions ko;
    ko.n_layer = 1;
    ko.n_head_kv = sc.n_head_kv;
    ko.head_dim = sc.head_dim;
    ko.capacity = 200;
    ko.dtype = sc.dtype;
    auto full = KvCache::create(ko);
    auto growing = KvCache::create(ko);
    ASSERT_TRUE(full.ok() && growing.ok());
    const int32_t first = 120, n = 13;  // queries at 120..132: crosses the key block at 128
    std::vector<std::vector<float>> ks, vs;
    for (int32_t p = 0; p < first + n; ++p) {
      ks.push_back(random_floats(rng, sc.n_head_kv * sc.head_dim, 1.5f));
      vs.push_back(random_floats(rng, sc.n_head_kv * sc.head_dim));
      ASSERT_TRUE(full->append(0, 0, p, ks.back().data(), vs.back().data()).ok());
    }
    AttentionParams p;
    p.n_head = sc.n_head;
    p.n_head_kv = sc.n_head_kv;
    p.head_dim = sc.head_dim;
    p.scale = 1.0f / std::sqrt(static_cast<float>(sc.head_dim));
    p.window = sc.window;
    const int64_t row = static_cast<int64_t>(sc.n_head) * sc.head_dim;
    const auto q = random_floats(rng, n * row, 1.5f);
    std::vector<int32_t> seq(n, 0), pos(n);
    for (int32_t i = 0; i < n; ++i) pos[i] = first + i;
    for_each_target_and_threads([&](Backend& be) {
      std::vector<float> batch(static_cast<size_t>(n * row)), one(static_cast<size_t>(row));
      be.set_row_invariant(true);
      be.attention(q.data(), *full, 0, seq.data(), pos.data(), n, p, batch.data());
      be.set_row_invariant(false);
      growing->clear(0);
      for (int32_t t = 0; t < first + n; ++t) {
        ASSERT_TRUE(growing->append(0, 0, t, ks[t].data(), vs[t].data()).ok());
        if (t < first) continue;
        const int32_t i = t - first;
        be.attention(q.data() + i * row, *growing, 0, seq.data(), pos.data() + i, 1, p, one.data());
        ASSERT_EQ(0, std::memcmp(one.data(), batch.data() + i * row, static_cast<size_t>(row) * sizeof(float)))
            << "token " << i;
      }
    });
  }
}

}  // namespace
}  // namespace frugal
