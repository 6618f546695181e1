// Speculative decoding's pure parts, without a model: the acceptance rule is exact (a chi-square
// goodness-of-fit test of at least 10^5 draws per setting against the target distribution, which
// also fails, as it must, for the rule without the residual and for a draft accepted blindly), the
// verify walk keeps the joint law of consecutive tokens, the sampler's distribution() is the law
// sample() draws from, and the n-gram lookup and the draft length match brute-force oracles.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <random>

#include "frugal/decode/sampler.h"
#include "frugal/decode/speculative/acceptance.h"
#include "frugal/decode/speculative/draft_length.h"
#include "frugal/decode/speculative/layer_skip.h"
#include "frugal/decode/speculative/ngram.h"
#include "frugal/decode/speculative/verify.h"
#include "decode/chi_square.h"

namespace frugal::speculative {
namespace {

// Fixed seeds make every test deterministic; the threshold is then a statement about these draws,
// and the negative controls below show that the same test rejects a wrong rule by far.
constexpr double kMinPValue = 1e-3;
constexpr int kDraws = 200000;

std::vector<float> random_distribution(std::mt19937_64& rng, int n, int zeros) {
  std::vector<float> p(static_cast<size_t>(n));
  std::gamma_distribution<double> g(0.7);
  for (float& x : p) x = static_cast<float>(g(rng) + 1e-3);
  for (int i = 0; i < zeros; ++i) p[rng() % static_cast<size_t>(n)] = 0;
  const double s = std::accumulate(p.begin(), p.end(), 0.0);
  for (float& x : p) x = static_cast<float>(x / s);
  return p;
}

double uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// One position: x ~ q, kept or replaced by the rule under test.
enum class Rule { kExact, kNoResidual, kAlwaysAccept };
TokenId one_position(const std::vector<float>& p, const std::vector<float>& q, std::mt19937_64& rng, Rule rule) {
  const TokenId x = sample_distribution(q, uniform(rng));
  if (rule == Rule::kAlwaysAccept) return x;
  if (accept_draft_token(p, q, x, uniform(rng))) return x;
  return rule == Rule::kExact ? sample_residual(p, q, x, uniform(rng)) : sample_distribution(p, uniform(rng));
}

FitResult fit_one_position(const std::vector<float>& p, const std::vector<float>& q, uint64_t seed, Rule rule) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> counts(p.size(), 0);
  for (int i = 0; i < kDraws; ++i) ++counts[static_cast<size_t>(one_position(p, q, rng, rule))];
  return goodness_of_fit(counts, std::vector<double>(p.begin(), p.end()));
}

TEST(SpeculativeAcceptance, KeptOrReplacedTokensFollowTheTargetExactly) {
  std::mt19937_64 rng(20261204);
  for (int setting = 0; setting < 6; ++setting) {
    SCOPED_TRACE("setting " + std::to_string(setting));
    const int n = 4 + setting * 3;
    // Zeros in p (a truncated target) and in q (a truncated draft) where the other has mass.
    const std::vector<float> p = random_distribution(rng, n, setting % 3);
    const std::vector<float> q = random_distribution(rng, n, (setting + 1) % 3);
    const FitResult r = fit_one_position(p, q, 1000 + setting, Rule::kExact);
    EXPECT_FALSE(r.impossible_seen);
    EXPECT_GT(r.p_value, kMinPValue);
  }
}

TEST(SpeculativeAcceptance, ACertainProposalIsKeptWithItsTargetProbability) {
  // An n-gram draft: q one-hot at x. Then the output law must still be p.
  std::mt19937_64 rng(7);
  const std::vector<float> p = random_distribution(rng, 9, 1);
  for (TokenId x : {0, 3, 8}) {
    std::mt19937_64 draws(100 + static_cast<uint64_t>(x));
    std::vector<int64_t> counts(p.size(), 0);
    for (int i = 0; i < kDraws; ++i) {
      const TokenId t = accept_draft_token(p, {}, x, uniform(draws)) ? x : sample_residual(p, {}, x, uniform(draws));
      ++counts[static_cast<size_t>(t)];
    }
    const FitResult r = goodness_of_fit(counts, std::vector<double>(p.begin(), p.end()));
    EXPECT_FALSE(r.impossible_seen) << "x = " << x;
    EXPECT_GT(r.p_value, kMinPValue) << "x = " << x;
  }
}

TEST(SpeculativeAcceptance, TheTestRejectsWrongRules) {
  // Negative controls on the same draws and thresholds: the rule without the residual (a rejected
  // token redrawn from p) over-weights what the draft under-proposes, and accepting every draft
  // returns q. Both must fail by a wide margin, which shows the test above can fail.
  std::mt19937_64 rng(20261204);
  const std::vector<float> p = random_distribution(rng, 8, 0);
  const std::vector<float> q = random_distribution(rng, 8, 0);
  EXPECT_LT(fit_one_position(p, q, 11, Rule::kNoResidual).p_value, 1e-12);
  EXPECT_LT(fit_one_position(p, q, 12, Rule::kAlwaysAccept).p_value, 1e-12);
  EXPECT_GT(fit_one_position(p, q, 13, Rule::kExact).p_value, kMinPValue);
}

TEST(SpeculativeAcceptance, GreedyRuleIsArgmaxMatching) {
  std::vector<float> p(5, 0.0f);
  p[2] = 1.0f;  // greedy target: one-hot at its argmax
  EXPECT_TRUE(accept_draft_token(p, {}, 2, 0.999999));
  EXPECT_FALSE(accept_draft_token(p, {}, 1, 0.0));
  EXPECT_EQ(sample_residual(p, {}, 1, 0.5), 2);
}

// A toy "model": target and draft distributions over 5 tokens that depend on the whole prefix.
struct ToyModels {
  static constexpr int kVocab = 5;
  static std::vector<float> dist(std::span<const TokenId> prefix, uint64_t salt) {
    uint64_t h = 1469598103934665603ull ^ salt;
    for (TokenId t : prefix) h = (h ^ static_cast<uint64_t>(t + 1)) * 1099511628211ull;
    std::mt19937_64 rng(h);
    return random_distribution(rng, kVocab, static_cast<int>(h % 2));
  }
  static std::vector<float> target(std::span<const TokenId> prefix) { return dist(prefix, 1); }
  static std::vector<float> draft(std::span<const TokenId> prefix) { return dist(prefix, 2); }
};

TEST(SpeculativeVerify, TwoTokensFromDraftedPassesFollowTheTargetJointLaw) {
  // Generates two tokens by repeated draft + verify_draft rounds (k = 3 draft tokens drawn from
  // the toy draft), exactly as the engine does, and compares their joint law over 25 cells with
  // target(a | prompt) * target(b | prompt, a).
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 0.0f;
  Sampler sampler(sp, ToyModels::kVocab);
  std::mt19937_64 draft_rng(99);
  const std::vector<TokenId> prompt = {1, 4, 2};
  const int V = ToyModels::kVocab;
  std::vector<int64_t> counts(static_cast<size_t>(V * V), 0);
  std::vector<float> probs(static_cast<size_t>(V));
  for (int n = 0; n < kDraws; ++n) {
    std::vector<TokenId> seq = prompt;
    while (seq.size() < prompt.size() + 2) {
      Draft d;
      std::vector<TokenId> hist = seq;
      for (int j = 0; j < 3; ++j) {
        const std::vector<float> q = ToyModels::draft(hist);
        const TokenId x = sample_distribution(q, uniform(draft_rng));
        d.tokens.push_back(x);
        d.q.insert(d.q.end(), q.begin(), q.end());
        hist.push_back(x);
      }
      std::vector<float> logits;  // log p after each drafted prefix
      for (size_t i = 0; i <= d.tokens.size(); ++i) {
        for (float v : ToyModels::target(std::span<const TokenId>(hist).first(seq.size() + i))) {
          logits.push_back(v > 0 ? std::log(v) : -INFINITY);
        }
      }
      const Verdict verdict = verify_draft(logits.data(), static_cast<size_t>(V), hist, d, sampler, probs);
      ASSERT_GE(verdict.accepted, 0);
      ASSERT_LE(verdict.accepted, 3);
      seq.insert(seq.end(), d.tokens.begin(), d.tokens.begin() + verdict.accepted);
      seq.push_back(verdict.next);
    }
    ++counts[static_cast<size_t>(seq[prompt.size()] * V + seq[prompt.size() + 1])];
  }
  std::vector<double> expected(static_cast<size_t>(V * V));
  const std::vector<float> first = ToyModels::target(prompt);
  for (TokenId a = 0; a < V; ++a) {
    std::vector<TokenId> pa = prompt;
    pa.push_back(a);
    const std::vector<float> second = ToyModels::target(pa);
    for (TokenId b = 0; b < V; ++b) expected[static_cast<size_t>(a * V + b)] = double(first[a]) * second[b];
  }
  const FitResult r = goodness_of_fit(counts, expected);
  EXPECT_FALSE(r.impossible_seen);
  EXPECT_GT(r.p_value, kMinPValue);
}

// The sampler's law written out independently: penalties off; top-k, then top-p and min-p on the
// softmax at temperature 1 (llama.cpp's order), then the temperature over what survives.
std::vector<double> reference_law(const std::vector<float>& logits, const SamplingParams& sp) {
  const size_t n = logits.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  size_t keep = sp.top_k > 0 ? std::min<size_t>(n, static_cast<size_t>(sp.top_k)) : n;
  const double mx = logits[order[0]];
  double z = 0;
  for (size_t i = 0; i < keep; ++i) z += std::exp(logits[order[i]] - mx);
  if (sp.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < keep; ++i) {
      cum += std::exp(logits[order[i]] - mx) / z;
      if (cum >= sp.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  size_t kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += logits[order[i]] >= mx + std::log(sp.min_p) ? 1 : 0;
  keep = std::max<size_t>(kept, 1);
  std::vector<double> law(n, 0.0);
  double s = 0;
  for (size_t i = 0; i < keep; ++i) s += law[order[i]] = std::exp((logits[order[i]] - mx) / sp.temperature);
  for (double& v : law) v /= s;
  return law;
}

TEST(SpeculativeVerify, TruncatedSamplingKeepsThePlainSamplersLaw) {
  // Target and draft logits over 12 tokens, the request's top-k / top-p / min-p / temperature
  // applied to both through Sampler::distribution (the draft drawn from its transformed law): the
  // tokens verify_draft emits follow the reference law, and so do plain Sampler::sample draws.
  std::mt19937_64 rng(5);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> target_logits(12), draft_logits(12);
  for (float& v : target_logits) v = nd(rng);
  for (size_t i = 0; i < draft_logits.size(); ++i) draft_logits[i] = target_logits[i] + nd(rng) * 0.7f;
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.top_k = 8;
  sp.top_p = 0.9f;
  sp.min_p = 0.02f;
  const std::vector<double> law = reference_law(target_logits, sp);
  Sampler target(sp, 12), draft_sampler(sp, 12), plain(sp, 12);
  std::vector<float> q(12), probs(12);
  std::vector<int64_t> spec_counts(12, 0), plain_counts(12, 0);
  const std::vector<TokenId> history = {3};
  for (int n = 0; n < kDraws; ++n) {
    draft_sampler.distribution(draft_logits.data(), history, q.data());
    Draft d;
    d.tokens = {sample_distribution(q, draft_sampler.uniform())};
    d.q = q;
    std::vector<float> rows = target_logits;  // row 0; row 1 (bonus) is never reached when rejected
    rows.insert(rows.end(), target_logits.begin(), target_logits.end());
    std::vector<TokenId> hist = history;
    hist.push_back(d.tokens[0]);
    const Verdict v = verify_draft(rows.data(), 12, hist, d, target, probs);
    ++spec_counts[static_cast<size_t>(v.accepted == 1 ? d.tokens[0] : v.next)];
    ++plain_counts[static_cast<size_t>(plain.sample(target_logits.data(), history))];
  }
  const FitResult spec = goodness_of_fit(spec_counts, law);
  const FitResult base = goodness_of_fit(plain_counts, law);
  EXPECT_FALSE(spec.impossible_seen);
  EXPECT_FALSE(base.impossible_seen);
  EXPECT_GT(spec.p_value, kMinPValue);
  EXPECT_GT(base.p_value, kMinPValue);
}

TEST(SpeculativeVerify, GreedyKeepsTheArgmaxPrefixAndAddsTheTargetsToken) {
  SamplingParams sp;
  sp.temperature = 0;
  Sampler s(sp, 4);
  // Target argmax per row: 2, 1, 3, 0.
  const std::vector<float> rows = {0, 0, 5, 0, /**/ 0, 5, 0, 0, /**/ 0, 0, 0, 5, /**/ 5, 0, 0, 0};
  std::vector<float> probs(4);
  Draft d;
  d.tokens = {2, 1, 0};
  std::vector<TokenId> hist = {0, 2, 1, 0};
  Verdict v = verify_draft(rows.data(), 4, hist, d, s, probs);
  EXPECT_EQ(v.accepted, 2);
  EXPECT_EQ(v.next, 3);
  d.tokens = {2, 1, 3};
  hist = {0, 2, 1, 3};
  v = verify_draft(rows.data(), 4, hist, d, s, probs);
  EXPECT_EQ(v.accepted, 3);
  EXPECT_EQ(v.next, 0);  // the bonus token from the last row
  d.tokens = {1};
  hist = {0, 1};
  v = verify_draft(rows.data(), 4, hist, d, s, probs);
  EXPECT_EQ(v.accepted, 0);
  EXPECT_EQ(v.next, 2);
}

// Brute force: every earlier occurrence of every suffix length, longest length first, latest
// occurrence first.
std::vector<TokenId> brute_force_lookup(const std::vector<TokenId>& t, int ngram_max, int k) {
  const int n = static_cast<int>(t.size());
  for (int len = std::min(ngram_max, n - 1); len >= 1; --len) {
    for (int start = n - len - 1; start >= 0; --start) {
      bool same = true;
      for (int i = 0; i < len; ++i) {
        same = same && t[static_cast<size_t>(start + i)] == t[static_cast<size_t>(n - len + i)];
      }
      if (!same) continue;
      std::vector<TokenId> out;
      for (int i = start + len; i < n && static_cast<int>(out.size()) < k; ++i) {
        out.push_back(t[static_cast<size_t>(i)]);
      }
      return out;
    }
  }
  return {};
}

TEST(SpeculativeNgram, LookupMatchesBruteForceOnRandomSequences) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 40);
    const int alphabet = 2 + static_cast<int>(rng() % 6);
    std::vector<TokenId> t(static_cast<size_t>(n));
    for (TokenId& x : t) x = static_cast<TokenId>(rng() % static_cast<uint64_t>(alphabet));
    const int ngram_max = 1 + static_cast<int>(rng() % 4);
    const int k = static_cast<int>(rng() % 7);
    ASSERT_EQ(lookup_continuation(t, ngram_max, k), brute_force_lookup(t, ngram_max, k)) << "trial " << trial;
  }
  // The passage copy case: the suffix "b c" recurs, so what followed it is proposed.
  const std::vector<TokenId> text = {7, 1, 2, 3, 4, 5, 9, 1, 2};
  EXPECT_EQ(lookup_continuation(text, 3, 4), (std::vector<TokenId>{3, 4, 5, 9}));
}

TEST(SpeculativeDraftLength, ChoosesTheLengthWithTheBestExpectedGain) {
  for (double cost : {0.0, 0.05, 0.2, 0.6}) {
    DraftLength dl(8, cost);
    std::mt19937_64 rng(static_cast<uint64_t>(cost * 100) + 1);
    for (int round = 0; round < 60; ++round) {
      const int32_t k = dl.next();
      ASSERT_GE(k, 1);
      ASSERT_LE(k, 8);
      // Brute force over the current estimate.
      const double a = dl.acceptance();
      int32_t best = 1;
      double best_gain = -1;
      for (int32_t j = 1; j <= 8; ++j) {
        double tokens = 0;
        for (int32_t i = 0; i <= j; ++i) tokens += std::pow(a, i);
        const double gain = tokens / (1 + j * cost);
        if (gain > best_gain * (1 + 1e-9)) {
          best_gain = gain;
          best = j;
        }
      }
      ASSERT_EQ(k, best) << "cost " << cost << " round " << round << " acceptance " << a;
      const int32_t accepted = static_cast<int32_t>(rng() % static_cast<uint64_t>(k + 1));
      dl.update(k, accepted);
    }
  }
  // A draft that is always right drives a cheap drafter to the longest draft; one that is always
  // wrong to the shortest.
  DraftLength good(8, 0.1), bad(8, 0.1);
  for (int i = 0; i < 30; ++i) {
    good.update(good.next(), good.next());
    bad.update(bad.next(), 0);
  }
  EXPECT_EQ(good.next(), 8);
  EXPECT_EQ(bad.next(), 1);
}

TEST(SpeculativeLayerSkip, CandidatesAreEverySubsetOfTheMiddleLayers) {
  for (int32_t n_layer = 3; n_layer <= 9; ++n_layer) {
    for (int32_t n_skip = 1; n_skip <= n_layer - 2; ++n_skip) {
      const auto c = layer_skip_candidates(n_layer, n_skip, 1000);
      // Brute force: every mask over the layers with n_skip ones, first and last layer zero.
      size_t expected = 0;
      for (uint32_t bits = 0; bits < (1u << n_layer); ++bits) {
        if ((bits & 1u) || (bits >> (n_layer - 1)) & 1u || std::popcount(bits) != n_skip) continue;
        std::vector<uint8_t> mask(static_cast<size_t>(n_layer));
        for (int32_t l = 0; l < n_layer; ++l) mask[static_cast<size_t>(l)] = (bits >> l) & 1u ? Batch::kSkipLayer : 0;
        ASSERT_NE(std::find(c.begin(), c.end(), mask), c.end()) << n_layer << " layers, skip " << n_skip;
        ++expected;
      }
      ASSERT_EQ(c.size(), expected) << n_layer << " layers, skip " << n_skip;
    }
  }
  // Capped: distinct masks of the right size, drawn the same way every time.
  const auto capped = layer_skip_candidates(30, 10, 64);
  ASSERT_EQ(capped.size(), 64u);
  EXPECT_EQ(capped, layer_skip_candidates(30, 10, 64));
  for (const auto& m : capped) {
    EXPECT_EQ(std::count(m.begin(), m.end(), Batch::kSkipLayer), 10);
    EXPECT_EQ(m.front(), 0);
    EXPECT_EQ(m.back(), 0);
    EXPECT_EQ(std::count(capped.begin(), capped.end(), m), 1);
  }
  EXPECT_TRUE(layer_skip_candidates(2, 1, 64).empty());
}

}  // namespace
}  // namespace frugal::speculative
