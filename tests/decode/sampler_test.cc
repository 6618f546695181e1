#include "frugal/decode/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

namespace frugal {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> random_logits(size_t n, uint32_t seed, float scale = 3.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// Params with every filter and penalty off, temperature 1: the plain softmax distribution.
SamplingParams plain() {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.0f;
  p.seed = 1234;
  return p;
}

std::set<TokenId> support_ids(const Sampler& s) {
  std::set<TokenId> ids;
  for (const auto& c : s.support()) ids.insert(c.id);
  return ids;
}

// Seven tokens with known probabilities, deliberately not in id order.
// id:      0     1     2     3     4     5     6
// p:     0.10  0.40  0.02  0.25  0.05  0.15  0.03
const std::vector<double> kProbs = {0.10, 0.40, 0.02, 0.25, 0.05, 0.15, 0.03};

std::vector<float> known_logits() {
  std::vector<float> l;
  for (double p : kProbs) l.push_back(static_cast<float>(std::log(p)) + 1.7f);  // shift: softmax-invariant
  return l;
}

// Draws `n` tokens and checks that (a) only ids in `expected` (id -> unnormalised weight) occur and
// (b) frequencies match within a chi-square bound (p ~ 1e-4 critical values).
void check_distribution(Sampler& s, const std::vector<float>& logits,
                        const std::map<TokenId, double>& expected, int n) {
  std::map<TokenId, int> counts;
  for (int i = 0; i < n; ++i) {
    const TokenId t = s.sample(logits.data(), {});
    ASSERT_TRUE(expected.count(t)) << "token " << t << " outside the support was sampled";
    ++counts[t];
  }
  double total = 0.0;
  for (const auto& [id, w] : expected) total += w;
  double chi2 = 0.0;
  for (const auto& [id, w] : expected) {
    const double e = n * w / total;
    const double d = counts[id] - e;
    chi2 += d * d / e;
  }
  const size_t df = expected.size() - 1;
  // Chi-square critical values at p = 1e-4 for df = 0..6.
  const double crit[] = {0.0, 15.14, 18.42, 21.11, 23.51, 25.74, 27.86};
  ASSERT_LT(df, std::size(crit));
  EXPECT_LT(chi2, crit[df]) << "df " << df;
}

TEST(Sampler, GreedyPicksArgmaxOnRandomLogits) {
  SamplingParams p = plain();
  p.temperature = 0.0f;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const auto logits = random_logits(1000 + seed * 37, seed);
    Sampler s(p, static_cast<int32_t>(logits.size()));
    const auto ref = std::max_element(logits.begin(), logits.end()) - logits.begin();
    EXPECT_EQ(s.sample(logits.data(), {}), ref);
  }
}

TEST(Sampler, GreedyTiesGoToLowestId) {
  SamplingParams p = plain();
  p.temperature = 0.0f;
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 3.0f, 1.0f, 3.0f, 3.0f};
  Sampler s(p, 7);
  EXPECT_EQ(s.sample(logits.data(), {}), 3);
  // Default sampling params with temperature 0 are greedy too (filters cannot change the argmax).
  SamplingParams d;
  d.temperature = 0.0f;
  Sampler s2(d, 7);
  EXPECT_EQ(s2.sample(logits.data(), {}), 3);
}

// greedy_token is the rule a temperature-0 sampler without penalties applies; the engine and the
// CUDA backend use it in place of the sampler when a step only needs greedy tokens.
TEST(Sampler, GreedyTokenEqualsSamplerAtTemperatureZero) {
  SamplingParams p = plain();
  p.temperature = 0.0f;
  ASSERT_TRUE(picks_greedy_token(p));
  std::mt19937 gen(77);
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    auto logits = random_logits(3 + seed * 53, seed, 2.0f);
    // Plant ties, NaN, infinities and all-equal stretches so the edge rules are exercised.
    std::uniform_int_distribution<size_t> at(0, logits.size() - 1);
    const float top = *std::max_element(logits.begin(), logits.end());
    switch (seed % 5) {
      case 0: logits[at(gen)] = top; logits[at(gen)] = top; break;
      case 1: logits[at(gen)] = std::numeric_limits<float>::quiet_NaN(); break;
      case 2: logits[at(gen)] = kInf; logits[at(gen)] = kInf; break;
      case 3: std::fill(logits.begin(), logits.end(), -kInf); logits[at(gen)] = std::numeric_limits<float>::quiet_NaN(); break;
      default: break;
    }
    Sampler s(p, static_cast<int32_t>(logits.size()));
    EXPECT_EQ(greedy_token(logits), s.sample(logits.data(), {})) << "seed " << seed;
  }
  EXPECT_EQ(greedy_token(std::vector<float>{1.0f, kInf, 3.0f, kInf}), 1);
  EXPECT_EQ(greedy_token(std::vector<float>{std::numeric_limits<float>::quiet_NaN(), -1.0f}), 1);
  EXPECT_EQ(greedy_token(std::vector<float>{-kInf, -kInf}), 0);
}

TEST(Sampler, PicksGreedyTokenOnlyWithoutTemperatureOrPenalties) {
  SamplingParams p = plain();
  EXPECT_FALSE(picks_greedy_token(p));  // temperature 1
  p.temperature = 0.0f;
  EXPECT_TRUE(picks_greedy_token(p));
  p.repeat_penalty = 1.1f;
  EXPECT_FALSE(picks_greedy_token(p));
  p.repeat_last_n = 0;  // a penalty with an empty window changes nothing
  EXPECT_TRUE(picks_greedy_token(p));
  p.repeat_last_n = 64;
  p.repeat_penalty = 1.0f;
  p.presence_penalty = 0.5f;
  EXPECT_FALSE(picks_greedy_token(p));
}

TEST(Sampler, GreedyRespectsPenalties) {
  SamplingParams p = plain();
  p.temperature = 0.0f;
  p.repeat_penalty = 2.0f;
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f};
  Sampler s(p, 3);
  const std::vector<TokenId> hist = {1};
  EXPECT_EQ(s.sample(logits.data(), hist), 2);  // 3 / 2 = 1.5 < 2
}

TEST(Sampler, PenaltiesExactValues) {
  SamplingParams p = plain();
  p.repeat_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  p.repeat_last_n = 5;
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, 0.0f, 1.0f};
  // Token 5 and the out-of-range ids fall outside / are ignored; window = last 5 = {0,1,0,3,4}.
  const std::vector<TokenId> hist = {5, 5, 99, 0, 1, 0, 3, 4};
  Sampler s(p, 6);
  (void)s.sample(logits.data(), hist);
  std::map<TokenId, float> got;
  for (const auto& c : s.support()) got[c.id] = c.logit;
  ASSERT_EQ(got.size(), 6u);
  EXPECT_FLOAT_EQ(got[0], 2.0f / 2 - (2 * 0.5f + 0.25f));   // -0.25
  EXPECT_FLOAT_EQ(got[1], -1.0f * 2 - (1 * 0.5f + 0.25f));  // -2.75
  EXPECT_FLOAT_EQ(got[2], 0.5f);
  EXPECT_FLOAT_EQ(got[3], 3.0f / 2 - 0.75f);                // 0.75
  EXPECT_FLOAT_EQ(got[4], 0.0f * 2 - 0.75f);                // zero counts as negative
  EXPECT_FLOAT_EQ(got[5], 1.0f);                            // outside the window

  // Penalties must not leak into the next call.
  (void)s.sample(logits.data(), {});
  for (const auto& c : s.support()) EXPECT_EQ(c.logit, logits[c.id]);
}

TEST(Sampler, PenaltyWindowOffAndWhole) {
  SamplingParams p = plain();
  p.frequency_penalty = 1.0f;
  const std::vector<float> logits = {1.0f, 1.0f, 1.0f};
  const std::vector<TokenId> hist = {0, 0, 1, 2, 2, 2};
  p.repeat_last_n = 0;
  Sampler off(p, 3);
  (void)off.sample(logits.data(), hist);
  for (const auto& c : off.support()) EXPECT_EQ(c.logit, 1.0f);
  p.repeat_last_n = -1;
  Sampler all(p, 3);
  (void)all.sample(logits.data(), hist);
  std::map<TokenId, float> got;
  for (const auto& c : all.support()) got[c.id] = c.logit;
  EXPECT_FLOAT_EQ(got[0], -1.0f);
  EXPECT_FLOAT_EQ(got[1], 0.0f);
  EXPECT_FLOAT_EQ(got[2], -2.0f);
}

TEST(Sampler, AcceptedHistoryMatchesExplicitHistory) {
  SamplingParams p = plain();
  p.repeat_penalty = 1.3f;
  p.presence_penalty = 0.4f;
  p.repeat_last_n = 3;
  const auto logits = random_logits(50, 7);
  Sampler a(p, 50), b(p, 50);
  std::vector<TokenId> hist;
  for (int i = 0; i < 40; ++i) {
    const TokenId ta = a.sample(logits.data());
    const TokenId tb = b.sample(logits.data(), hist);
    ASSERT_EQ(ta, tb) << "step " << i;
    a.accept(ta);
    hist.push_back(tb);
    ASSERT_LE(a.history().size(), 6u);
    ASSERT_GE(a.history().size(), std::min<size_t>(3, hist.size()));
    EXPECT_TRUE(std::equal(a.history().end() - std::min<size_t>(3, hist.size()), a.history().end(),
                           hist.end() - std::min<size_t>(3, hist.size())));
  }
}

TEST(Sampler, TopKSupportExact) {
  SamplingParams p = plain();
  p.top_k = 3;
  const auto logits = known_logits();
  Sampler s(p, 7);
  (void)s.sample(logits.data(), {});
  EXPECT_EQ(support_ids(s), (std::set<TokenId>{1, 3, 5}));
  check_distribution(s, logits, {{1, 0.40}, {3, 0.25}, {5, 0.15}}, 20000);
}

TEST(Sampler, TopPSupportExact) {
  SamplingParams p = plain();
  p.top_p = 0.75f;  // 0.40, 0.65, 0.80 >= 0.75: three tokens
  const auto logits = known_logits();
  Sampler s(p, 7);
  (void)s.sample(logits.data(), {});
  EXPECT_EQ(support_ids(s), (std::set<TokenId>{1, 3, 5}));
  check_distribution(s, logits, {{1, 0.40}, {3, 0.25}, {5, 0.15}}, 20000);
  p.top_p = 0.81f;  // needs the fourth (0.10 -> 0.90)
  Sampler s2(p, 7);
  (void)s2.sample(logits.data(), {});
  EXPECT_EQ(support_ids(s2), (std::set<TokenId>{0, 1, 3, 5}));
}

TEST(Sampler, MinPSupportExact) {
  SamplingParams p = plain();
  p.min_p = 0.2f;  // keep p >= 0.08
  const auto logits = known_logits();
  Sampler s(p, 7);
  (void)s.sample(logits.data(), {});
  EXPECT_EQ(support_ids(s), (std::set<TokenId>{0, 1, 3, 5}));
  check_distribution(s, logits, {{0, 0.10}, {1, 0.40}, {3, 0.25}, {5, 0.15}}, 20000);
}

TEST(Sampler, ChainOrderKThenPThenMin) {
  SamplingParams p = plain();
  p.top_k = 5;    // {0.40 0.25 0.15 0.10 0.05} renormalised by 0.95
  p.top_p = 0.92f;  // cum 0.421 0.684 0.842 0.947: four tokens
  p.min_p = 0.3f; // of those, keep p >= 0.12: three tokens
  const auto logits = known_logits();
  Sampler s(p, 7);
  (void)s.sample(logits.data(), {});
  EXPECT_EQ(support_ids(s), (std::set<TokenId>{1, 3, 5}));
  p.min_p = 0.0f;
  Sampler s2(p, 7);
  (void)s2.sample(logits.data(), {});
  EXPECT_EQ(support_ids(s2), (std::set<TokenId>{0, 1, 3, 5}));
  // Without top-k, 0.92 of the full distribution needs five tokens (0.90 < 0.92 <= 0.95).
  p.top_k = 0;
  Sampler s3(p, 7);
  (void)s3.sample(logits.data(), {});
  EXPECT_EQ(support_ids(s3), (std::set<TokenId>{0, 1, 3, 4, 5}));
}

TEST(Sampler, MinPComesAfterTopP) {
  SamplingParams p = plain();
  p.min_p = 0.2f;   // alone: {0.40 0.25 0.15 0.10}
  p.top_p = 0.85f;  // on the full distribution: 0.40 0.65 0.80 0.90 -> the same four tokens;
                    // on min-p's renormalised four it would stop at three (0.889)
  const auto logits = known_logits();
  Sampler s(p, 7);
  (void)s.sample(logits.data(), {});
  EXPECT_EQ(support_ids(s), (std::set<TokenId>{0, 1, 3, 5}));
}

TEST(Sampler, TemperatureComesAfterTheFilters) {
  // The nucleus is taken from the untempered distribution; a flatter (T = 2) one would need more.
  SamplingParams p = plain();
  p.top_p = 0.75f;
  p.temperature = 2.0f;
  const auto logits = known_logits();
  Sampler s(p, 7);
  check_distribution(s, logits, {{1, std::sqrt(0.40)}, {3, std::sqrt(0.25)}, {5, std::sqrt(0.15)}},
                     20000);
}

TEST(Sampler, TemperatureScalesDistribution) {
  const auto logits = known_logits();
  for (float t : {0.5f, 2.0f}) {
    SamplingParams p = plain();
    p.temperature = t;
    p.top_k = 4;
    Sampler s(p, 7);
    std::map<TokenId, double> expected;
    for (TokenId id : {0, 1, 3, 5}) expected[id] = std::pow(kProbs[id], 1.0 / t);
    check_distribution(s, logits, expected, 20000);
  }
  // Whole vocabulary, no filters.
  SamplingParams p = plain();
  p.temperature = 1.5f;
  Sampler s(p, 7);
  std::map<TokenId, double> expected;
  for (TokenId id = 0; id < 7; ++id) expected[id] = std::pow(kProbs[id], 1.0 / 1.5);
  check_distribution(s, logits, expected, 30000);
}

TEST(Sampler, NeverSamplesMaskedOrNanTokens) {
  SamplingParams p = plain();
  std::vector<float> logits = {0.0f, -kInf, std::nanf(""), 0.5f, -kInf};
  Sampler s(p, 5);
  for (int i = 0; i < 2000; ++i) {
    const TokenId t = s.sample(logits.data(), {});
    ASSERT_TRUE(t == 0 || t == 3) << t;
  }
  std::vector<float> all_masked(5, -kInf);
  EXPECT_EQ(s.sample(all_masked.data(), {}), 0);
}

// Ids by (logit desc, id asc): a full sort.
std::vector<TokenId> full_order(const std::vector<float>& logits) {
  std::vector<TokenId> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](TokenId a, TokenId b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  return order;
}

// Reference support: the full sort cut by top-k, then by a cumulative walk for top-p.
std::vector<TokenId> reference_support(const std::vector<float>& logits, std::vector<TokenId> order,
                                       int top_k, double top_p) {
  if (top_k > 0) order.resize(std::min<size_t>(order.size(), top_k));
  if (top_p < 1.0) {
    double sum = 0.0;
    for (TokenId id : order) sum += std::exp(static_cast<double>(logits[id]) - logits[order[0]]);
    double cum = 0.0;
    for (size_t i = 0; i < order.size(); ++i) {
      cum += std::exp(static_cast<double>(logits[order[i]]) - logits[order[0]]) / sum;
      if (cum >= top_p) {
        order.resize(i + 1);
        break;
      }
    }
  }
  return order;
}

TEST(Sampler, LargeVocabularyTopKAndTopPMatchFullSort) {
  const int32_t n = 151936;
  auto smooth = random_logits(n, 42, 2.0f);
  // Many exact ties (logits on a 1/4 grid) and masked tokens, as quantized heads and logit masks
  // produce.
  auto tied = random_logits(n, 43, 2.0f);
  for (size_t i = 0; i < tied.size(); ++i) tied[i] = i % 7 == 0 ? -kInf : std::round(tied[i] * 4) / 4;
  struct Case {
    int top_k;
    float top_p;
  };
  // Small k (single-pass selection), large k, and top-p alone over the whole vocabulary.
  const Case cases[] = {{40, 1.0f}, {40, 0.5f}, {5000, 1.0f}, {20000, 0.3f},
                        {0, 0.2f},  {0, 0.9f},  {0, 0.999f}};
  for (const auto* logits : {&smooth, &tied}) {
    const auto order = full_order(*logits);
    for (const Case c : cases) {
      SamplingParams p = plain();
      p.top_k = c.top_k;
      p.top_p = c.top_p;
      Sampler s(p, n);
      const TokenId t = s.sample(logits->data(), {});
      const auto ref = reference_support(*logits, order, c.top_k, c.top_p);
      std::vector<Sampler::Candidate> got(s.support().begin(), s.support().end());
      // The order of the support is an implementation detail; its content is not.
      std::sort(got.begin(), got.end(), [](const auto& a, const auto& b) {
        return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
      });
      std::vector<TokenId> ids;
      for (const auto& cand : got) {
        ids.push_back(cand.id);
        ASSERT_EQ(cand.logit, (*logits)[cand.id]);
      }
      ASSERT_EQ(ids.size(), ref.size()) << "top_k " << c.top_k << " top_p " << c.top_p;
      EXPECT_EQ(ids, ref) << "top_k " << c.top_k << " top_p " << c.top_p;
      EXPECT_TRUE(std::find(ref.begin(), ref.end(), t) != ref.end());
    }
  }
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDiffers) {
  const int32_t n = 2000;
  SamplingParams p;  // defaults, seeded
  p.seed = 99;
  std::vector<std::vector<float>> steps;
  for (uint32_t i = 0; i < 100; ++i) steps.push_back(random_logits(n, 500 + i, 1.0f));
  auto run = [&](Sampler& s) {
    std::vector<TokenId> out;
    for (const auto& l : steps) {
      out.push_back(s.sample(l.data()));
      s.accept(out.back());
    }
    return out;
  };
  Sampler a(p, n), b(p, n);
  const auto ta = run(a);
  EXPECT_EQ(ta, run(b));
  a.reset();
  EXPECT_EQ(ta, run(a));
  p.seed = 100;
  Sampler c(p, n);
  EXPECT_NE(ta, run(c));
}

TEST(Sampler, SeedFromTimeIsResolvedAndReported) {
  SamplingParams p;
  p.seed = kSeedFromTime;
  Sampler s(p, 10);
  EXPECT_NE(s.seed(), kSeedFromTime);
  p.seed = 5;
  EXPECT_EQ(Sampler(p, 10).seed(), 5u);
}

TEST(Sampler, InvalidParamsNameTheField) {
  struct Case {
    const char* field;
    void (*mutate)(SamplingParams&);
  };
  const Case cases[] = {
      {"temperature", [](SamplingParams& p) { p.temperature = -0.1f; }},
      {"temperature", [](SamplingParams& p) { p.temperature = std::nanf(""); }},
      {"top_k", [](SamplingParams& p) { p.top_k = -1; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 0.0f; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 1.5f; }},
      {"min_p", [](SamplingParams& p) { p.min_p = -0.01f; }},
      {"min_p", [](SamplingParams& p) { p.min_p = 1.01f; }},
      {"repeat_penalty", [](SamplingParams& p) { p.repeat_penalty = 0.0f; }},
      {"repeat_last_n", [](SamplingParams& p) { p.repeat_last_n = -2; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = kInf; }},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = std::nanf(""); }},
  };
  EXPECT_TRUE(validate(SamplingParams{}).ok());
  for (const Case& c : cases) {
    SamplingParams p;
    c.mutate(p);
    const Status st = validate(p);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << c.field;
    EXPECT_NE(st.message().find(c.field), std::string::npos) << st.message();
    auto r = Sampler::create(p, 100);
    EXPECT_FALSE(r.ok());
  }
  auto r = Sampler::create(SamplingParams{}, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("n_vocab"), std::string::npos);
  EXPECT_TRUE(Sampler::create(SamplingParams{}, 10).ok());
}

TEST(Softmax, MatchesDirectFormulaAndTopLogprobs) {
  const auto logits = random_logits(300, 3);
  const auto probs = softmax(logits);
  const auto logp = log_softmax(logits);
  double z = 0.0;
  for (float x : logits) z += std::exp(static_cast<double>(x));
  double total = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double ref = std::exp(static_cast<double>(logits[i])) / z;
    EXPECT_NEAR(probs[i], ref, 1e-6 + 1e-5 * ref);
    EXPECT_NEAR(logp[i], std::log(ref), 1e-5);
    total += probs[i];
  }
  EXPECT_NEAR(total, 1.0, 1e-5);

  const auto top = top_logprobs(logits, 5);
  ASSERT_EQ(top.size(), 5u);
  std::vector<TokenId> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](TokenId a, TokenId b) { return logits[a] > logits[b]; });
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(top[i].id, order[i]);
    EXPECT_NEAR(top[i].logprob, std::log(std::exp(static_cast<double>(logits[order[i]])) / z), 1e-5);
    EXPECT_FLOAT_EQ(token_logprob(logits, order[i]), top[i].logprob);
  }
  EXPECT_EQ(top_logprobs(logits, 1000).size(), logits.size());
  EXPECT_TRUE(top_logprobs(logits, -3).empty());
  EXPECT_EQ(token_logprob(logits, 300), -kInf);

  // Ties rank by lower id; large values do not overflow.
  const std::vector<float> tied = {1000.0f, 1001.0f, 1001.0f};
  const auto t = top_logprobs(tied, 3);
  EXPECT_EQ(t[0].id, 1);
  EXPECT_EQ(t[1].id, 2);
  EXPECT_NEAR(std::exp(t[0].logprob) * 2 + std::exp(t[2].logprob), 1.0, 1e-6);
}

}  // namespace
}  // namespace frugal
