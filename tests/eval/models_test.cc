// The committed models (models/*.gguf) against the task alphabet: llama architecture, and a
// vocabulary that gives every task character exactly one token, so a prompt of n characters is
// n + 1 tokens (BOS) and detokenizes back to itself.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "frugal/engine/generate.h"
#include "frugal/eval/harness.h"
#include "frugal/eval/task.h"
#include "frugal/eval/vocab.h"
#include "frugal/format/gguf.h"
#include "frugal/tokenize/tokenizer.h"

namespace frugal::eval {
namespace {

class ModelFiles : public ::testing::TestWithParam<const char*> {};

TEST_P(ModelFiles, VocabularyIsTheTaskAlphabet) {
  const std::string path = std::string(FRUGAL_SOURCE_DIR) + "/models/" + GetParam();
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ((*file)->get_string("general.architecture").value(), "llama");
  EXPECT_EQ((*file)->get_int("llama.context_length").value(), 2048);
  auto tok = Tokenizer::from_gguf(**file);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_TRUE((*tok)->add_bos());
  // Token ids of the alphabet are frozen: 259 + position in kTaskAlphabet.
  for (size_t i = 0; i < kTaskAlphabet.size(); ++i) {
    const std::string ch(1, kTaskAlphabet[i]);
    auto ids = (*tok)->encode(ch);
    ASSERT_TRUE(ids.ok());
    ASSERT_EQ(ids->size(), 2u) << "character 0x" << std::hex << int(kTaskAlphabet[i]);
    EXPECT_EQ((*ids)[0], (*tok)->bos());
    EXPECT_EQ((*ids)[1], static_cast<TokenId>(259 + i));
    EXPECT_EQ((*tok)->piece((*ids)[1]), ch);
  }
  for (const auto& family : task_family_names()) {
    TaskOptions o;
    o.length = 512;
    auto ex = generate_task(family, TaskSplit::kTest, 3, o);
    ASSERT_TRUE(ex.ok());
    const std::string text = ex->prompt + ex->answer;
    auto ids = (*tok)->encode(text);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(static_cast<int64_t>(ids->size()), ex->n_tokens());
    std::string back;
    for (size_t i = 1; i < ids->size(); ++i) back += (*tok)->piece((*ids)[i]);
    EXPECT_EQ(back, text);
  }
}

// The default model solves every family at its trained length through the same path as
// `frugal eval` (CPU backend, F16 cache, greedy). models/README.md measured 98.0-100% per family at
// L=256 with n = 200 (test seeds 0-199); at p = 0.98 20 examples score 17 or more with probability
// above 0.999 (binomial), and even at the 95% bar with probability 0.98, while a model at 41% (an
// earlier default model's word_count) passes with probability below 1e-4. Test seeds 1000.. are
// apart from the model card's 0..199.
TEST(DefaultModel, SolvesEveryFamilyAtItsTrainedLength) {
  const std::string path = std::string(FRUGAL_SOURCE_DIR) + "/models/default.gguf";
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto tok = Tokenizer::from_gguf(**file);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto backend = make_cpu_backend({});
  EvalSuite suite;
  suite.lengths = {256};
  suite.n = 20;
  suite.seed = 1000;
  suite.kl_examples = 0;
  // Greedy, as tools/cmd_eval.cc sets it: EvalConfig's GenerateOptions default to sampling.
  EvalConfig config{"default", {}};
  config.gen.sampling.temperature = 0;
  auto report = run_eval(**model, **tok, *backend, suite, config, nullptr);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  ASSERT_EQ(report->cells.size(), task_family_names().size());
  for (const auto& cell : report->cells) {
    EXPECT_EQ(cell.n, 20);
    EXPECT_GE(cell.correct, 17) << cell.family << " at L=" << cell.length;
  }
}

// Random eviction end to end on the trained model: the same kv-seed gives the same tokens and the
// same rounds, and the rounds really fire (the budget is half the trace). Another seed keeps other
// tokens, but the greedy output may still agree, so only sameness is asserted.
TEST(DefaultModel, RandomEvictionIsDeterministicPerSeed) {
  const std::string path = std::string(FRUGAL_SOURCE_DIR) + "/models/default.gguf";
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto tok = Tokenizer::from_gguf(**file);
  ASSERT_TRUE(tok.ok());
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok());
  auto backend = make_cpu_backend({});
  TaskOptions o;
  o.length = 256;
  auto ex = generate_task("word_count", TaskSplit::kTest, 11, o);
  ASSERT_TRUE(ex.ok());
  auto prompt = (*tok)->encode(ex->prompt);
  ASSERT_TRUE(prompt.ok());
  GenerateOptions g;
  g.sampling.temperature = 0;
  g.n_predict = 120;
  g.kv_policy.policy = "random";
  g.kv_policy.budget = 0.5;
  g.kv_policy.buffer = 16;
  auto run = [&](uint64_t seed) {
    GenerateOptions gs = g;
    gs.kv_policy.seed = seed;
    auto r = generate(**model, **tok, *backend, *prompt, gs);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? *r : GenerateResult{};
  };
  const GenerateResult a = run(7), b = run(7), c = run(8);
  EXPECT_GT(a.kv_eviction.rounds, 0);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.kv_eviction.rounds, b.kv_eviction.rounds);
  EXPECT_EQ(a.kv_eviction.budget, c.kv_eviction.budget);
  if (a.tokens == c.tokens) std::printf("note: kv-seed 7 and 8 gave the same tokens on this prompt\n");
}

INSTANTIATE_TEST_SUITE_P(Committed, ModelFiles, ::testing::Values("default.gguf", "draft.gguf"));

}  // namespace
}  // namespace frugal::eval
