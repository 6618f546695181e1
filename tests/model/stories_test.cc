// stories260K (a real trained Llama) against outputs recorded from llama.cpp (tests/data/README.md
// says which build and how): tokenization, last-position logits and 48 greedy tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <span>

#include <nlohmann/json.hpp>

#include "frugal/core/greedy_token.h"
#include "frugal/engine/generate.h"
#include "frugal/model/model.h"
#include "frugal/tokenize/tokenizer.h"

namespace frugal {
namespace {

const std::string kModel = std::string(FRUGAL_SHARED_MODELS_DIR) + "/stories260K.gguf";

nlohmann::json load_json(const std::string& name) {
  std::ifstream in(std::string(FRUGAL_SOURCE_DIR) + "/tests/data/" + name);
  EXPECT_TRUE(in.good()) << name;
  return nlohmann::json::parse(in);
}

class Stories : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::ifstream(kModel).good()) GTEST_SKIP() << "missing " << kModel;
    auto m = Model::load(kModel);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(m).value();
    auto t = Tokenizer::from_gguf(model_->gguf());
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    tok_ = std::move(t).value();
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
};

// forward_greedy returns, per logit row, greedy_token of the logits forward() writes for the same
// step: ragged batch of three sequences, several rows per sequence, two thread counts.
TEST_F(Stories, ForwardGreedyMatchesForwardLogits) {
  const int64_t nv = model_->config().n_vocab;
  std::mt19937 gen(11);
  std::uniform_int_distribution<int> tok(3, static_cast<int>(nv) - 1);
  for (int threads : {1, 2}) {
    CpuBackendOptions bo;
    bo.n_threads = threads;
    auto be = make_cpu_backend(bo);
    auto kv_a = KvCache::create(model_->kv_options(3, 64));
    auto kv_b = KvCache::create(model_->kv_options(3, 64));
    ASSERT_TRUE(kv_a.ok() && kv_b.ok());
    for (int step = 0; step < 3; ++step) {
      Batch b;
      for (int s = 0; s < 3; ++s) {
        const int n = step == 0 ? 5 + 3 * s : 1;
        const int32_t p0 = step == 0 ? 0 : 5 + 3 * s + step - 1;
        for (int i = 0; i < n; ++i) b.add(tok(gen), p0 + i, s, i + 1 == n || i == 1);
      }
      const int64_t rows = b.n_logits();
      std::vector<float> logits(static_cast<size_t>(rows * nv));
      std::vector<int32_t> ids(static_cast<size_t>(rows), -1);
      ASSERT_TRUE(model_->forward(b, *kv_a, *be, logits.data()).ok());
      ASSERT_TRUE(model_->forward_greedy(b, *kv_b, *be, ids.data()).ok());
      for (int64_t r = 0; r < rows; ++r) {
        const std::span<const float> row(logits.data() + r * nv, static_cast<size_t>(nv));
        EXPECT_EQ(ids[static_cast<size_t>(r)], greedy_token(row)) << "step " << step << " row " << r;
      }
    }
  }
}

TEST_F(Stories, GreedyTokensMatchLlamaCpp) {
  const auto data = load_json("stories260K_greedy.json");
  ASSERT_GE(data["cases"].size(), 10u);
  for (int threads : {1, 2}) {
    CpuBackendOptions bo;
    bo.n_threads = threads;
    auto be = make_cpu_backend(bo);
    for (const auto& c : data["cases"]) {
      const std::string prompt = c["prompt"];
      auto ids = tok_->encode(prompt);
      ASSERT_TRUE(ids.ok()) << ids.status().to_string();
      ASSERT_EQ(*ids, c["prompt_tokens"].get<std::vector<TokenId>>()) << prompt;
      GenerateOptions go;
      go.n_predict = data["n_predict"];
      go.n_ctx = data["n_ctx"];
      go.n_batch = 512;  // the whole prompt in one batch, as recorded
      go.ignore_eos = true;
      go.sampling.temperature = 0;
      auto res = generate(*model_, *tok_, *be, *ids, go);
      ASSERT_TRUE(res.ok()) << res.status().to_string();
      EXPECT_EQ(res->tokens, c["generated"].get<std::vector<TokenId>>()) << "prompt: " << prompt << ", threads " << threads;
      EXPECT_EQ(res->text, c["generated_text"].get<std::string>()) << prompt;
    }
  }
}

// Logits at the last prompt position: an F32 cache must agree tightly with llama.cpp's F32-cache
// run; the F16 cache within the rounding llama.cpp's own F16 path shows (~0.016 between its runs).
TEST_F(Stories, LastPositionLogitsMatchLlamaCpp) {
  const auto data = load_json("stories260K_logits.json");
  auto be = make_cpu_backend({});
  for (const auto& c : data["cases"]) {
    const auto prompt = c["prompt_tokens"].get<std::vector<TokenId>>();
    for (DType kv_type : {DType::kF32, DType::kF16}) {
      auto kv = KvCache::create(model_->kv_options(1, 256, kv_type));
      ASSERT_TRUE(kv.ok());
      Batch b;
      for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], static_cast<int32_t>(i), 0, i + 1 == prompt.size());
      std::vector<float> logits(static_cast<size_t>(model_->config().n_vocab));
      ASSERT_TRUE(model_->forward(b, *kv, *be, logits.data()).ok());
      const auto want = c[kv_type == DType::kF32 ? "logits_kv_f32" : "logits"].get<std::vector<float>>();
      ASSERT_EQ(want.size(), logits.size());
      double max_err = 0;
      for (size_t i = 0; i < want.size(); ++i) max_err = std::max(max_err, std::fabs(double(want[i]) - logits[i]));
      const double bound = kv_type == DType::kF32 ? 2e-3 : 3e-2;
      EXPECT_LT(max_err, bound) << "kv " << dtype_name(kv_type) << " prompt of " << prompt.size() << " tokens";
      const auto arg = std::max_element(logits.begin(), logits.end()) - logits.begin();
      EXPECT_EQ(arg, c["argmax"].get<int64_t>());
    }
  }
}

// A prompt decoded in one batch, in chunks, or token by token gives the same last logits.
TEST_F(Stories, ChunkedPrefillMatchesOneBatch) {
  auto be = make_cpu_backend({});
  auto ids = tok_->encode("Lily and Tom went to the park. They saw a big dog and a small cat.");
  ASSERT_TRUE(ids.ok());
  std::vector<std::vector<float>> results;
  for (size_t chunk : {ids->size(), size_t{5}, size_t{1}}) {
    auto kv = KvCache::create(model_->kv_options(1, 128, DType::kF32));
    ASSERT_TRUE(kv.ok());
    std::vector<float> logits(static_cast<size_t>(model_->config().n_vocab));
    for (size_t i = 0; i < ids->size(); i += chunk) {
      Batch b;
      for (size_t j = i; j < std::min(ids->size(), i + chunk); ++j) {
        b.add((*ids)[j], static_cast<int32_t>(j), 0, j + 1 == ids->size());
      }
      ASSERT_TRUE(model_->forward(b, *kv, *be, logits.data()).ok());
    }
    results.push_back(logits);
  }
  for (size_t r = 1; r < results.size(); ++r) {
    for (size_t i = 0; i < results[0].size(); ++i) ASSERT_NEAR(results[r][i], results[0][i], 1e-4);
  }
}

// Two sequences in one ragged batch give the same logits as each run alone.
TEST_F(Stories, RaggedBatchMatchesSeparateRuns) {
  auto be = make_cpu_backend({});
  auto a = tok_->encode("Once upon a time");
  auto b = tok_->encode("The little dog ran to the tree and");
  ASSERT_TRUE(a.ok() && b.ok());
  const size_t nv = static_cast<size_t>(model_->config().n_vocab);
  auto alone = [&](const std::vector<TokenId>& ids) {
    auto kv = KvCache::create(model_->kv_options(1, 64, DType::kF32));
    Batch bt;
    for (size_t i = 0; i < ids.size(); ++i) bt.add(ids[i], static_cast<int32_t>(i), 0, i + 1 == ids.size());
    std::vector<float> lg(nv);
    EXPECT_TRUE(model_->forward(bt, *kv, *be, lg.data()).ok());
    return lg;
  };
  const auto la = alone(*a), lb = alone(*b);
  auto kv = KvCache::create(model_->kv_options(2, 64, DType::kF32));
  Batch bt;
  // Interleave the two prompts' tokens.
  for (size_t i = 0; i < std::max(a->size(), b->size()); ++i) {
    if (i < b->size()) bt.add((*b)[i], static_cast<int32_t>(i), 1, i + 1 == b->size());
    if (i < a->size()) bt.add((*a)[i], static_cast<int32_t>(i), 0, i + 1 == a->size());
  }
  std::vector<float> lg(2 * nv);
  ASSERT_TRUE(model_->forward(bt, *kv, *be, lg.data()).ok());
  // a is shorter, so its last token (and logits row) comes first in batch order.
  for (size_t i = 0; i < nv; ++i) {
    ASSERT_NEAR(lg[i], la[i], 1e-4);
    ASSERT_NEAR(lg[nv + i], lb[i], 1e-4);
  }
}

}  // namespace
}  // namespace frugal
