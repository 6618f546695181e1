// Eviction policies on hand-built caches: exact keep-sets per head, the round schedule, prompt
// pinning, determinism and memory. Scored policies are checked against a float64 reference
// written here from the published definitions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "frugal/kv/eviction.h"
#include "frugal/kv/kv_cache.h"
#include "frugal/kv/policies/policy.h"

namespace frugal {
namespace {

constexpr int kLayers = 2, kHeadsKv = 2, kHeadDim = 8, kRep = 2;

struct Fixture {
  KvCache kv;
  std::vector<std::vector<float>> k, v;  // [pos][kHeadsKv * kHeadDim], as appended (layer 0 and 1 share)
};

Fixture make_cache(int n_tokens, int capacity, DType dt, uint32_t seed) {
  KvCacheOptions o;
  o.n_layer = kLayers;
  o.n_head_kv = kHeadsKv;
  o.head_dim = kHeadDim;
  o.capacity = capacity;
  o.dtype = dt;
  auto c = KvCache::create(o);
  EXPECT_TRUE(c.ok());
  Fixture f{std::move(*c), {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  for (int p = 0; p < n_tokens; ++p) {
    std::vector<float> k(kHeadsKv * kHeadDim), v(kHeadsKv * kHeadDim);
    for (auto& x : k) x = d(rng);
    for (auto& x : v) x = d(rng);
    for (int l = 0; l < kLayers; ++l) EXPECT_TRUE(f.kv.append(l, 0, p, k.data(), v.data()).ok());
    f.k.push_back(k);
    f.v.push_back(v);
  }
  return f;
}

std::vector<int32_t> held(const KvCache& kv, int l, int h) {
  const int32_t* p = kv.positions(l, 0, h);
  return std::vector<int32_t>(p, p + kv.size(l, 0, h));
}

// After compaction every row must still be the K/V of the position its table names.
void expect_rows_follow_positions(const Fixture& f) {
  ASSERT_EQ(f.kv.options().dtype, DType::kF32);
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 0; h < kHeadsKv; ++h) {
      const int32_t* p = f.kv.positions(l, 0, h);
      for (int32_t i = 0; i < f.kv.size(l, 0, h); ++i) {
        const auto* k = static_cast<const float*>(f.kv.key_row(l, 0, h, i));
        const auto* v = static_cast<const float*>(f.kv.value_row(l, 0, h, i));
        for (int e = 0; e < kHeadDim; ++e) {
          ASSERT_EQ(k[e], f.k[p[i]][h * kHeadDim + e]);
          ASSERT_EQ(v[e], f.v[p[i]][h * kHeadDim + e]);
        }
      }
    }
  }
}

std::unique_ptr<KvEvictor> evictor(const std::string& name, double budget, int buffer, bool protect,
                                   uint64_t seed = 1, int32_t trace = 1000) {
  KvPolicyOptions o;
  o.policy = name;
  o.budget = budget;
  o.buffer = buffer;
  o.protect_prompt = protect;
  o.seed = seed;
  auto ev = KvEvictor::create(o, trace, 0);
  EXPECT_TRUE(ev.ok()) << ev.status().message();
  return std::move(*ev);
}

TEST(KvPolicy, RegistryAndValidation) {
  for (const auto& n : kv_policy_names()) {
    auto p = make_kv_policy(n);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ((*p)->name(), n);
  }
  EXPECT_EQ(make_kv_policy("lru").status().code(), ErrorCode::kInvalidArgument);
  KvPolicyOptions o;
  o.policy = "random";
  o.budget = 64;
  o.buffer = 64;
  EXPECT_FALSE(validate(o).ok());  // budget must exceed the buffer
  o.budget = 0;
  EXPECT_FALSE(validate(o).ok());
  o.budget = 100.5;
  EXPECT_FALSE(validate(o).ok());
  o.budget = 0.25;
  EXPECT_TRUE(validate(o).ok());
  // A fraction resolves against the trace and must still exceed the buffer.
  auto ev = KvEvictor::create(o, 1000, 600);
  ASSERT_TRUE(ev.ok());
  EXPECT_EQ((*ev)->budget(), 250);
  EXPECT_FALSE(KvEvictor::create(o, 200, 100).ok());
  // Of the generated part: the prompt plus a quarter of the 400 tokens to generate.
  o.budget_base = KvBudgetBase::kGenerated;
  auto gen = KvEvictor::create(o, 1000, 600);
  ASSERT_TRUE(gen.ok());
  EXPECT_EQ((*gen)->budget(), 700);
  // ceil(0.25 * 3) = 1: 61 does not exceed the buffer, and the message names the base.
  auto small = KvEvictor::create(o, 63, 60);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("generated"), std::string::npos) << small.status().message();
  EXPECT_EQ(parse_kv_budget_base("generated").value(), KvBudgetBase::kGenerated);
  EXPECT_EQ(parse_kv_budget_base("trace").value(), KvBudgetBase::kTrace);
  EXPECT_FALSE(parse_kv_budget_base("prompt").ok());
  o.policy = "full";
  o.budget = 0;
  EXPECT_TRUE(validate(o).ok());
}

TEST(KvPolicy, WindowKeepsSinksRecentAndBuffer) {
  Fixture f = make_cache(10, 10, DType::kF32, 3);
  auto ev = evictor("window", 8, 2, false);
  ev->begin(f.kv, 0, 3);
  ASSERT_TRUE(ev->step(f.kv, 0).ok());  // 10 >= 8 + 2: fires
  EXPECT_EQ(ev->stats().rounds, 1);
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 0; h < kHeadsKv; ++h) {
      EXPECT_EQ(held(f.kv, l, h), (std::vector<int32_t>{0, 1, 2, 3, 6, 7, 8, 9}));
    }
  }
  expect_rows_follow_positions(f);
}

TEST(KvPolicy, FullNeverEvicts) {
  Fixture f = make_cache(30, 30, DType::kF32, 4);
  auto ev = evictor("full", 0, 64, false);
  ev->begin(f.kv, 0, 3);
  EXPECT_EQ(ev->capacity(3, 4096), 4096);
  ASSERT_TRUE(ev->step(f.kv, 0).ok());
  EXPECT_EQ(ev->stats().rounds, 0);
  EXPECT_EQ(f.kv.size(1, 0, 1), 30);
}

TEST(KvPolicy, RoundsFireEveryBufferStepsAndMemoryFollowsBudget) {
  const int budget = 12, buffer = 4, prompt = 5;
  auto ev = evictor("random", budget, buffer, true);
  const int cap = ev->capacity(prompt, 4096);
  EXPECT_EQ(cap, budget + buffer);
  Fixture f = make_cache(prompt, cap, DType::kF32, 5);
  ev->begin(f.kv, 0, prompt);
  std::mt19937 rng(9);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<int> fired_at;
  for (int p = prompt; p < 100; ++p) {
    const int64_t before = ev->stats().rounds;
    ASSERT_TRUE(ev->step(f.kv, 0).ok());
    if (ev->stats().rounds != before) fired_at.push_back(p);
    ASSERT_LT(f.kv.size(0, 0, 0), budget + buffer);
    std::vector<float> k(kHeadsKv * kHeadDim), v(kHeadsKv * kHeadDim);
    for (auto& x : k) x = d(rng);
    for (auto& x : v) x = d(rng);
    f.k.push_back(k);
    f.v.push_back(v);
    for (int l = 0; l < kLayers; ++l) ASSERT_TRUE(f.kv.append(l, 0, p, k.data(), v.data()).ok());
  }
  // First at budget + buffer tokens, then every `buffer` steps.
  ASSERT_GE(fired_at.size(), 2u);
  EXPECT_EQ(fired_at[0], budget + buffer);
  for (size_t i = 1; i < fired_at.size(); ++i) EXPECT_EQ(fired_at[i] - fired_at[i - 1], buffer);
  EXPECT_EQ(ev->stats().peak_used_bytes, uint64_t{kLayers} * kHeadsKv * (budget + buffer) * kHeadDim * 4 * 2);
  // The pool holds `cap` tokens per head in whole pages; after a round each head gives back the
  // pages it no longer needs.
  const uint64_t page = static_cast<uint64_t>(f.kv.options().page_tokens);
  const auto pages_for = [&](uint64_t rows) { return (rows + page - 1) / page; };
  EXPECT_EQ(f.kv.reserved_bytes(), uint64_t{kLayers} * kHeadsKv * pages_for(cap) * page * kHeadDim * 4 * 2);
  ASSERT_TRUE(ev->round(f.kv, 0).ok());
  EXPECT_EQ(f.kv.used_bytes(), uint64_t{kLayers} * kHeadsKv * budget * kHeadDim * 4 * 2);
  EXPECT_EQ(f.kv.held_bytes(), uint64_t{kLayers} * kHeadsKv * pages_for(budget) * page * kHeadDim * 4 * 2);
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 0; h < kHeadsKv; ++h) {
      const auto p = held(f.kv, l, h);
      for (int i = 0; i < prompt; ++i) EXPECT_EQ(p[static_cast<size_t>(i)], i);  // prompt survives every round
      EXPECT_TRUE(std::is_sorted(p.begin(), p.end()));
    }
  }
  expect_rows_follow_positions(f);
}

TEST(KvPolicy, RandomKeepsPromptBufferTimeOrderAndIsSeeded) {
  const int n = 40, budget = 16, buffer = 4, prompt = 5;
  std::vector<std::vector<int32_t>> runs;
  for (uint64_t seed : {7u, 7u, 8u}) {
    Fixture f = make_cache(n, n, DType::kF32, 11);
    auto ev = evictor("random", budget, buffer, true, seed);
    ev->begin(f.kv, 0, prompt);
    ASSERT_TRUE(ev->round(f.kv, 0).ok());
    std::vector<int32_t> all;
    std::set<std::vector<int32_t>> distinct_heads;
    for (int l = 0; l < kLayers; ++l) {
      for (int h = 0; h < kHeadsKv; ++h) {
        const auto p = held(f.kv, l, h);
        ASSERT_EQ(p.size(), static_cast<size_t>(budget));
        EXPECT_TRUE(std::is_sorted(p.begin(), p.end()));
        EXPECT_EQ(std::set<int32_t>(p.begin(), p.end()).size(), p.size());
        for (int i = 0; i < prompt; ++i) EXPECT_EQ(p[static_cast<size_t>(i)], i);
        for (int i = 0; i < buffer; ++i) EXPECT_EQ(p[static_cast<size_t>(budget - buffer + i)], n - buffer + i);
        distinct_heads.insert(p);
        all.insert(all.end(), p.begin(), p.end());
      }
    }
    EXPECT_GT(distinct_heads.size(), 1u);  // drawn per layer and head
    expect_rows_follow_positions(f);
    runs.push_back(all);
  }
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_NE(runs[0], runs[2]);
}

TEST(KvPolicy, RandomIsUniformOverCandidates) {
  // Each unpinned candidate survives with probability (n_keep - pinned) / (n_cand - pinned).
  const int n = 30, budget = 14, buffer = 4, prompt = 3;
  const int n_cand = n - buffer, n_keep = budget - buffer;
  std::vector<int> kept(n, 0);
  const int trials = 1500;
  for (int t = 0; t < trials; ++t) {
    Fixture f = make_cache(n, n, DType::kF32, 2);
    auto ev = evictor("random", budget, buffer, true, static_cast<uint64_t>(t) + 100);
    ev->begin(f.kv, 0, prompt);
    ASSERT_TRUE(ev->round(f.kv, 0).ok());
    for (int32_t p : held(f.kv, 0, 0)) ++kept[static_cast<size_t>(p)];
  }
  const double q = static_cast<double>(n_keep - prompt) / (n_cand - prompt);
  const double sd = std::sqrt(trials * q * (1 - q));
  for (int p = 0; p < n; ++p) {
    if (p < prompt || p >= n_cand) {
      EXPECT_EQ(kept[static_cast<size_t>(p)], trials) << p;
    } else {
      EXPECT_NEAR(kept[static_cast<size_t>(p)], trials * q, 5 * sd) << p;
    }
  }
}

TEST(KvPolicy, PromptLongerThanBudgetPinsOnlyNKeepMinusOne) {
  const int n = 40, budget = 16, buffer = 4, prompt = 30;
  Fixture f = make_cache(n, n, DType::kF32, 12);
  auto ev = evictor("random", budget, buffer, true);
  ev->begin(f.kv, 0, prompt);
  ASSERT_TRUE(ev->round(f.kv, 0).ok());
  for (int h = 0; h < kHeadsKv; ++h) {
    const auto p = held(f.kv, 1, h);
    ASSERT_EQ(p.size(), 16u);
    for (int i = 0; i < 11; ++i) EXPECT_EQ(p[static_cast<size_t>(i)], i);
    EXPECT_GE(p[11], 11);
    EXPECT_LT(p[11], n - buffer);
    for (int i = 0; i < buffer; ++i) EXPECT_EQ(p[static_cast<size_t>(12 + i)], n - buffer + i);
  }
  // The last kept candidate is drawn among positions 11..35, so across seeds it is rarely 11.
  int contested = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Fixture g = make_cache(n, n, DType::kF32, 12);
    auto e = evictor("random", budget, buffer, true, seed);
    e->begin(g.kv, 0, prompt);
    ASSERT_TRUE(e->round(g.kv, 0).ok());
    contested += held(g.kv, 0, 0)[11] != 11 ? 1 : 0;
  }
  EXPECT_GE(contested, 15);
}

// ---- scored policies against a float64 reference ----

struct Queries {
  std::vector<std::vector<float>> q;  // [j][n_head * head_dim]
  std::vector<int32_t> pos;
};

Queries record_random_queries(KvEvictor& ev, int n_tokens, int n_q, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  Queries qs;
  AttentionParams ap;
  ap.n_head = kHeadsKv * kRep;
  ap.n_head_kv = kHeadsKv;
  ap.head_dim = kHeadDim;
  ap.scale = 1.f / std::sqrt(static_cast<float>(kHeadDim));
  for (int j = 0; j < n_q; ++j) {
    std::vector<float> q(static_cast<size_t>(ap.n_head) * kHeadDim);
    for (auto& x : q) x = 2.f * d(rng);  // peaked attention, so the scores separate
    const int32_t p = n_tokens - n_q + j;
    const int32_t s = 0;
    for (int l = 0; l < kLayers; ++l) ev.before_attention(l, &s, &p, 1, q.data(), ap);
    qs.q.push_back(q);
    qs.pos.push_back(p);
  }
  return qs;
}

// probs[r][j][i] in double, straight from the definition.
std::vector<std::vector<std::vector<double>>> ref_probs(const Fixture& f, const Queries& qs, int h, int n) {
  std::vector<std::vector<std::vector<double>>> out(kRep);
  for (int r = 0; r < kRep; ++r) {
    for (size_t j = 0; j < qs.q.size(); ++j) {
      std::vector<double> row(static_cast<size_t>(n), 0.0);
      double mx = -INFINITY;
      for (int i = 0; i <= qs.pos[j] && i < n; ++i) {
        double s = 0;
        for (int e = 0; e < kHeadDim; ++e) {
          s += static_cast<double>(qs.q[j][static_cast<size_t>((h * kRep + r) * kHeadDim + e)]) *
               f.k[static_cast<size_t>(i)][static_cast<size_t>(h * kHeadDim + e)];
        }
        row[static_cast<size_t>(i)] = s / std::sqrt(static_cast<double>(kHeadDim));
        mx = std::max(mx, row[static_cast<size_t>(i)]);
      }
      double z = 0;
      for (int i = 0; i <= qs.pos[j] && i < n; ++i) z += (row[static_cast<size_t>(i)] = std::exp(row[static_cast<size_t>(i)] - mx));
      for (int i = 0; i <= qs.pos[j] && i < n; ++i) row[static_cast<size_t>(i)] /= z;
      out[static_cast<size_t>(r)].push_back(row);
    }
  }
  return out;
}

std::vector<double> ref_scores(const std::string& policy, const Fixture& f, const Queries& qs, int h, int n,
                               int n_cand) {
  const auto P = ref_probs(f, qs, h, n);
  const int nq = static_cast<int>(qs.q.size());
  std::vector<double> s(static_cast<size_t>(n_cand), 0.0);
  if (policy == "tova") {
    for (int i = 0; i < n_cand; ++i) {
      for (int r = 0; r < kRep; ++r) s[static_cast<size_t>(i)] += P[r][nq - 1][i] / kRep;
    }
  } else if (policy == "h2o") {
    for (int i = 0; i < n_cand; ++i) {
      for (int r = 0; r < kRep; ++r) {
        for (int j = 0; j < nq; ++j) s[static_cast<size_t>(i)] += P[r][j][i];
      }
    }
  } else {  // snapkv, rkv
    std::vector<double> mean(static_cast<size_t>(n_cand), 0.0);
    for (int i = 0; i < n_cand; ++i) {
      for (int r = 0; r < kRep; ++r) {
        for (int j = 0; j < nq; ++j) mean[static_cast<size_t>(i)] += P[r][j][i] / (kRep * nq);
      }
    }
    for (int i = 0; i < n_cand; ++i) {
      for (int d = -2; d <= 2; ++d) {
        if (i + d >= 0 && i + d < n_cand) s[static_cast<size_t>(i)] += mean[static_cast<size_t>(i + d)] / 5;
      }
    }
    if (policy == "rkv") {
      std::vector<double> ms(static_cast<size_t>(n_cand), 0.0);
      const auto norm = [&](int i) {
        double a = 0;
        for (int e = 0; e < kHeadDim; ++e) a += std::pow(f.k[i][h * kHeadDim + e], 2);
        return std::sqrt(a);
      };
      for (int i = 0; i < n_cand; ++i) {
        for (int j = 0; j < n_cand; ++j) {
          if (i == j) continue;
          double dot = 0;
          for (int e = 0; e < kHeadDim; ++e) dot += static_cast<double>(f.k[i][h * kHeadDim + e]) * f.k[j][h * kHeadDim + e];
          ms[static_cast<size_t>(i)] += dot / (norm(i) * norm(j)) / (n_cand - 1);
        }
      }
      double z = 0;
      for (double m : ms) z += std::exp(m);
      for (int i = 0; i < n_cand; ++i) s[static_cast<size_t>(i)] = 0.5 * s[static_cast<size_t>(i)] - 0.5 * std::exp(ms[static_cast<size_t>(i)]) / z;
    }
  }
  return s;
}

std::vector<int32_t> ref_keep(const std::vector<double>& s, int n, int n_cand, int n_keep, int pinned) {
  std::vector<int32_t> idx(static_cast<size_t>(n_cand));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin() + pinned, idx.end(), [&](int32_t a, int32_t b) { return s[a] > s[b]; });
  std::vector<int32_t> keep(idx.begin(), idx.begin() + n_keep);
  std::sort(keep.begin(), keep.end());
  for (int i = n_cand; i < n; ++i) keep.push_back(i);
  return keep;
}

class ScoredPolicy : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(ScoredPolicy, KeepSetsMatchReference) {
  const auto& [name, protect] = GetParam();
  const int n = 48, budget = 20, buffer = 8, prompt = 6;
  Fixture f = make_cache(n, n, DType::kF32, 21);
  auto ev = evictor(name, budget, buffer, protect);
  ev->begin(f.kv, 0, prompt);
  EXPECT_TRUE(ev->policy().needs().attention);
  const Queries qs = record_random_queries(*ev, n, buffer, 33);
  ASSERT_TRUE(ev->round(f.kv, 0).ok());
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 0; h < kHeadsKv; ++h) {
      const auto s = ref_scores(name, f, qs, h, n, n - buffer);
      const auto want = ref_keep(s, n, n - buffer, budget - buffer, protect ? prompt : 0);
      EXPECT_EQ(held(f.kv, l, h), want) << name << " layer " << l << " head " << h;
    }
  }
  expect_rows_follow_positions(f);
}

INSTANTIATE_TEST_SUITE_P(All, ScoredPolicy,
                         ::testing::Combine(::testing::Values("tova", "snapkv", "rkv", "h2o"), ::testing::Bool()),
                         [](const auto& info) {
                           return std::get<0>(info.param) + (std::get<1>(info.param) ? "_protected" : "_plain");
                         });

TEST(KvPolicy, TovaKeepsTheKeyTheQueryPointsAt) {
  // One old key aligned with every query head's latest query must survive a tight budget.
  const int n = 24, budget = 6, buffer = 4;
  Fixture f = make_cache(n, n, DType::kF32, 41);
  auto ev = evictor("tova", budget, buffer, false);
  ev->begin(f.kv, 0, 2);
  const Queries qs = record_random_queries(*ev, n, 1, 5);
  const int target = 7;
  for (int h = 0; h < kHeadsKv; ++h) {
    // k_target = 10 * (q of the group's first head)
    std::vector<float> k(kHeadsKv * kHeadDim);
    for (int l = 0; l < kLayers; ++l) {
      float* row = const_cast<float*>(static_cast<const float*>(f.kv.key_row(l, 0, h, target)));
      for (int e = 0; e < kHeadDim; ++e) row[e] = 10.f * (qs.q[0][(h * kRep) * kHeadDim + e] + qs.q[0][(h * kRep + 1) * kHeadDim + e]);
    }
  }
  ASSERT_TRUE(ev->round(f.kv, 0).ok());
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 0; h < kHeadsKv; ++h) {
      const auto p = held(f.kv, l, h);
      EXPECT_NE(std::find(p.begin(), p.end(), target), p.end()) << "layer " << l << " head " << h;
    }
  }
}

TEST(KvPolicy, H2oAccumulatesAcrossRounds) {
  // Two rounds: the second ranks by attention summed over both rounds' queries (tokens that
  // survived the first). Reference: replay the same queries over the surviving slots.
  const int budget = 12, buffer = 4;
  Fixture f = make_cache(20, 24, DType::kF32, 51);
  auto ev = evictor("h2o", budget, buffer, false);
  ev->begin(f.kv, 0, 2);
  const Queries q1 = record_random_queries(*ev, 20, buffer, 61);
  ASSERT_TRUE(ev->round(f.kv, 0).ok());
  const auto after1 = held(f.kv, 0, 0);
  std::mt19937 rng(71);
  std::normal_distribution<float> d(0.f, 1.f);
  for (int p = 20; p < 24; ++p) {
    std::vector<float> k(kHeadsKv * kHeadDim), v(kHeadsKv * kHeadDim);
    for (auto& x : k) x = d(rng);
    for (auto& x : v) x = d(rng);
    f.k.push_back(k);
    f.v.push_back(v);
    for (int l = 0; l < kLayers; ++l) ASSERT_TRUE(f.kv.append(l, 0, p, k.data(), v.data()).ok());
  }
  const Queries q2 = record_random_queries(*ev, 24, buffer, 62);
  ASSERT_TRUE(ev->round(f.kv, 0).ok());
  // Reference for head 0: acc over slots held after round 1 (+ new tokens).
  std::vector<int32_t> slots_pos = after1;
  for (int p = 20; p < 24; ++p) slots_pos.push_back(p);
  std::map<int32_t, double> acc;
  const auto add = [&](const Queries& qs, const std::vector<int32_t>& visible) {
    for (int r = 0; r < kRep; ++r) {
      for (size_t j = 0; j < qs.q.size(); ++j) {
        std::vector<double> lg;
        double mx = -INFINITY;
        for (int32_t p : visible) {
          double s = 0;
          for (int e = 0; e < kHeadDim; ++e) s += static_cast<double>(qs.q[j][r * kHeadDim + e]) * f.k[p][e];
          s = p <= qs.pos[j] ? s / std::sqrt(8.0) : -INFINITY;
          lg.push_back(s);
          mx = std::max(mx, s);
        }
        double z = 0;
        for (double x : lg) z += std::exp(x - mx);
        for (size_t i = 0; i < visible.size(); ++i) acc[visible[i]] += std::exp(lg[i] - mx) / z;
      }
    }
  };
  std::vector<int32_t> all20(20);
  std::iota(all20.begin(), all20.end(), 0);
  add(q1, all20);
  add(q2, slots_pos);
  const int n = static_cast<int>(slots_pos.size());
  std::vector<double> s;
  for (int i = 0; i < n - buffer; ++i) s.push_back(acc[slots_pos[static_cast<size_t>(i)]]);
  const auto keep = ref_keep(s, n, n - buffer, budget - buffer, 0);
  std::vector<int32_t> want;
  for (int32_t i : keep) want.push_back(slots_pos[static_cast<size_t>(i)]);
  EXPECT_EQ(held(f.kv, 0, 0), want);
}

TEST(KvPolicy, ScoredPolicyWithoutQueriesFailsWithMessage) {
  Fixture f = make_cache(30, 30, DType::kF32, 1);
  auto ev = evictor("snapkv", 16, 4, false);
  ev->begin(f.kv, 0, 2);
  const Status s = ev->round(f.kv, 0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("snapkv"), std::string::npos);
}

// Queries a backend kept beside its device rows reach the evictor as positions only (null rows);
// a store that cannot compute the statistics itself (the host cache) then fails the round with a
// message instead of reading rows that are not there.
TEST(KvPolicy, QueriesKeptOnADeviceNeedAStoreThatScoresThem) {
  Fixture f = make_cache(30, 30, DType::kF32, 1);
  for (const char* policy : {"snapkv", "h2o", "tova", "rkv"}) {
    auto ev = evictor(policy, 16, 4, false);
    ev->begin(f.kv, 0, 2);
    AttentionParams ap;
    ap.n_head = kHeadsKv * kRep;
    ap.n_head_kv = kHeadsKv;
    ap.head_dim = kHeadDim;
    ap.scale = 1.f / std::sqrt(static_cast<float>(kHeadDim));
    for (int32_t p = 26; p < 30; ++p) {
      const int32_t s0 = 0;
      for (int l = 0; l < kLayers; ++l) ev->before_attention(l, &s0, &p, 1, nullptr, ap);
    }
    const Status st = ev->round(f.kv, 0);
    ASSERT_FALSE(st.ok()) << policy;
    EXPECT_EQ(st.code(), ErrorCode::kNotSupported) << policy;
    EXPECT_NE(st.message().find("stayed on the device"), std::string::npos) << st.message();
    EXPECT_EQ(held(f.kv, 0, 0).size(), 30u) << policy << ": nothing evicted";
  }
}

TEST(KvPolicy, F16CacheCompactsToo) {
  Fixture f = make_cache(30, 30, DType::kF16, 13);
  auto ev = evictor("window", 10, 2, false);
  ev->begin(f.kv, 0, 1);
  ASSERT_TRUE(ev->step(f.kv, 0).ok());
  EXPECT_EQ(held(f.kv, 0, 1), (std::vector<int32_t>{0, 1, 2, 3, 24, 25, 26, 27, 28, 29}));
  EXPECT_EQ(f.kv.used_bytes(), uint64_t{kLayers} * kHeadsKv * 10 * kHeadDim * 2 * 2);
}

}  // namespace
}  // namespace frugal
