// The evaluation harness's statistics and teacher forcing, on stories260K.
#include "frugal/eval/harness.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

namespace frugal::eval {
namespace {

// Reference values from the closed-form Wilson score interval (z = 1.959964), computed by hand.
TEST(Wilson, KnownIntervals) {
  Interval a = wilson_interval(5, 10);
  EXPECT_NEAR(a.lo, 0.2366, 1e-4);
  EXPECT_NEAR(a.hi, 0.7634, 1e-4);
  Interval b = wilson_interval(0, 10);
  EXPECT_NEAR(b.lo, 0.0, 1e-12);
  EXPECT_NEAR(b.hi, 0.2775, 1e-4);
  Interval c = wilson_interval(200, 200);
  EXPECT_NEAR(c.lo, 0.9812, 1e-4);
  EXPECT_NEAR(c.hi, 1.0, 1e-12);
  Interval d = wilson_interval(190, 200);
  EXPECT_LT(d.lo, 0.95);
  EXPECT_GT(d.hi, 0.95);
}

const std::string kStories = std::string(FRUGAL_SHARED_MODELS_DIR) + "/stories260K.gguf";

// Teacher-forced logits (prefill + one decode step per token) equal one-batch logits for every
// position, and perplexity equals exp(mean NLL) computed from those logits.
TEST(TeacherForcing, MatchesOneBatchForwardAndPerplexity) {
  if (!std::ifstream(kStories).good()) GTEST_SKIP() << "missing " << kStories;
  auto m = Model::load(kStories);
  ASSERT_TRUE(m.ok());
  auto be = make_cpu_backend({});
  std::vector<TokenId> toks;
  for (int i = 0; i < 32; ++i) toks.push_back(static_cast<TokenId>(1 + (i * 97) % 500));
  GenerateOptions g;
  g.kv_dtype = DType::kF32;
  g.n_batch = 5;
  auto tf = teacher_forced_logits(**m, *be, toks, 16, g);
  ASSERT_TRUE(tf.ok()) << tf.status().to_string();
  const size_t nv = static_cast<size_t>((*m)->config().n_vocab);
  auto kv = KvCache::create((*m)->kv_options(1, 64, DType::kF32));
  Batch b;
  for (size_t i = 0; i < toks.size(); ++i) b.add(toks[i], static_cast<int32_t>(i), 0, i >= 15 && i + 1 < toks.size());
  std::vector<float> all(16 * nv);
  ASSERT_TRUE((*m)->forward(b, *kv, *be, all.data()).ok());
  ASSERT_EQ(tf->size(), all.size());
  for (size_t i = 0; i < all.size(); ++i) ASSERT_NEAR((*tf)[i], all[i], 1e-4) << i;

  auto ppl = perplexity(**m, *be, toks, 32, DType::kF32, -1);
  ASSERT_TRUE(ppl.ok()) << ppl.status().to_string();
  double nll = 0;
  // Rows 1..15 are positions 16..30, the second half but the last: llama-perplexity's scored set.
  for (size_t r = 1; r < 16; ++r) {
    const float* row = all.data() + r * nv;
    double mx = -INFINITY, s = 0;
    for (size_t v = 0; v < nv; ++v) mx = std::max(mx, static_cast<double>(row[v]));
    for (size_t v = 0; v < nv; ++v) s += std::exp(row[v] - mx);
    nll += -(row[toks[16 + r]] - mx - std::log(s));
  }
  EXPECT_EQ(ppl->scored_tokens, 15);
  EXPECT_NEAR(ppl->ppl, std::exp(nll / 15), 1e-3 * ppl->ppl);
}

}  // namespace
}  // namespace frugal::eval
