// frugal perplexity against llama-perplexity (build 4748) on stories260K: the figure for
// tests/data/stories_ppl.txt at -c 128 was 2.6883 (llama-perplexity -m stories260K.gguf
// -f tests/data/stories_ppl.txt -c 128, F16 KV cache). Our forward pass rounds differently in
// the last bits, so the test allows one unit in the fourth decimal. Also the KL-divergence file:
// a model scored against its own base has zero divergence and the same top token everywhere.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "frugal/eval/harness.h"
#include "frugal/eval/kl_divergence.h"
#include "frugal/model/model.h"
#include "frugal/tokenize/tokenizer.h"
#include "reference/reference_forward.h"

namespace frugal::eval {
namespace {

const std::string kStories = std::string(FRUGAL_SHARED_MODELS_DIR) + "/stories260K.gguf";
constexpr double kLlamaCppPpl = 2.6883;

std::vector<TokenId> story_tokens(const Tokenizer& tok) {
  std::ifstream f(std::string(FRUGAL_SOURCE_DIR) + "/tests/data/stories_ppl.txt");
  std::stringstream ss;
  ss << f.rdbuf();
  TokenizeOptions to;
  to.add_special = true;
  auto t = tok.encode(ss.str(), to);
  EXPECT_TRUE(t.ok());
  return *t;
}

// stories260K's tokenizer and model, and the text's tokens (call through ASSERT_NO_FATAL_FAILURE).
struct Stories {
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<Model> model;
  std::vector<TokenId> tokens;
};
void open_stories(Stories& s) {
  auto file = GgufFile::open(kStories);
  ASSERT_TRUE(file.ok());
  auto tok = Tokenizer::from_gguf(**file);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  s.tok = std::move(*tok);
  auto m = Model::load(kStories);
  ASSERT_TRUE(m.ok());
  s.model = std::move(*m);
  s.tokens = story_tokens(*s.tok);
}

TEST(Perplexity, MatchesLlamaPerplexityOnStories) {
  if (!std::ifstream(kStories).good()) GTEST_SKIP() << "missing " << kStories;
  Stories st;
  ASSERT_NO_FATAL_FAILURE(open_stories(st));
  Model& m = *st.model;
  const TokenId bos = st.tok->bos();
  const std::vector<TokenId>& tokens = st.tokens;
  auto be = make_cpu_backend({});
  auto r = perplexity(m, *be, tokens, 128, DType::kF16, bos);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->windows, 18);
  EXPECT_EQ(r->scored_tokens, 18 * 63);
  EXPECT_NEAR(r->ppl, kLlamaCppPpl, 1.5e-4);

  const std::string base = (std::filesystem::temp_directory_path() / "frugal_kl_base.bin").string();
  auto saved = save_kl_base(m, *be, tokens, 128, DType::kF16, bos, base);
  ASSERT_TRUE(saved.ok()) << saved.status().to_string();
  EXPECT_NEAR(saved->ppl, r->ppl, 1e-6);  // the file's writer sums in float steps, as llama's
  auto kl = kl_divergence(m, *be, base, DType::kF16, bos);
  ASSERT_TRUE(kl.ok()) << kl.status().to_string();
  EXPECT_EQ(kl->count, 18 * 63);
  EXPECT_LT(kl->mean_kld(), 1e-5);  // only the 16-bit encoding of the base separates them
  EXPECT_DOUBLE_EQ(kl->same_top(), 1.0);
  EXPECT_NEAR(std::exp(kl->sum_nll / static_cast<double>(kl->count)), r->ppl, 1e-4);
  EXPECT_NE(kl_report(*kl).find("Same top p"), std::string::npos);
  std::filesystem::resize_file(base, 100);
  EXPECT_FALSE(kl_divergence(m, *be, base, DType::kF16, bos).ok());
  std::filesystem::remove(base);
}

// Where the last digit comes from. llama-perplexity's figure differs from ours by one unit in
// the fourth decimal. The float64 forward (tests/reference) scores the same windows exactly, with
// keys and values rounded to F16 as both engines' caches store them, and with the query and the
// softmax weights rounded to F16 as well, as ggml's CPU attention does (its K.Q and V.softmax
// products convert their F32 operand to the F16 cache's type). Both engines sit within float32
// rounding of the exact figure; which of them is nearer changes from text to text
// (bench/perplexity_rounding_study, docs/quantization.md), so four decimals of a perplexity are
// beyond what two float32 forward passes with different summation orders agree on.
double reference_perplexity(const reference::ReferenceModel& ref, const std::vector<TokenId>& tokens, int32_t n_ctx,
                            TokenId bos, const reference::RefForwardOptions& o) {
  auto nll = reference::window_nll(ref, tokens, n_ctx, bos, o);
  EXPECT_TRUE(nll.ok()) << nll.status().to_string();
  if (!nll.ok() || nll->empty()) return 0;
  double sum = 0;
  for (double x : *nll) sum += x;
  return std::exp(sum / static_cast<double>(nll->size()));
}

TEST(Perplexity, BothEnginesAreWithinFloat32RoundingOfTheExactFigure) {
  if (!std::ifstream(kStories).good()) GTEST_SKIP() << "missing " << kStories;
  Stories st;
  ASSERT_NO_FATAL_FAILURE(open_stories(st));
  auto ref = reference::ReferenceModel::load(kStories);
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  auto be = make_cpu_backend({});
  const std::vector<TokenId>& tokens = st.tokens;
  const TokenId bos = st.tok->bos();
  auto ours = perplexity(*st.model, *be, tokens, 128, DType::kF16, bos);
  ASSERT_TRUE(ours.ok()) << ours.status().to_string();
  reference::RefForwardOptions o;
  const double exact = reference_perplexity(**ref, tokens, 128, bos, o);
  o.kv_f16 = true;
  const double cache_f16 = reference_perplexity(**ref, tokens, 128, bos, o);
  o.attention_operands_f16 = true;
  const double operands_f16 = reference_perplexity(**ref, tokens, 128, bos, o);
  std::printf("perplexity: float64 %.6f, F16 cache %.6f, F16 cache and attention operands %.6f; frugal %.6f, "
              "llama-perplexity %.4f\n",
              exact, cache_f16, operands_f16, ours->ppl, kLlamaCppPpl);
  // Measured: 2.688224, 2.688226, 2.688327; frugal 2.688201, llama-perplexity 2.6883. Ours is the
  // F16-cache forward within float32 rounding (9e-6 relative); llama-perplexity's printed figure,
  // within its half unit of 5e-5, is at least 1e-5 from the exact one. The F16 cache moves the
  // exact figure by 1e-6 relative, the F16 attention operands by 4e-5.
  EXPECT_LT(std::abs(ours->ppl - cache_f16) / cache_f16, 2e-5);
  EXPECT_LT(std::abs(kLlamaCppPpl - exact) / exact, 2e-5 + 5e-5 / exact);
  EXPECT_LT(std::abs(cache_f16 - exact) / exact, 5e-6);
  EXPECT_GT(std::abs(operands_f16 - exact), 10 * std::abs(cache_f16 - exact));
}

// The natural-text model (models/text.gguf: byte-level BPE, llama-bpe pre-tokenizer) on a
// held-out excerpt, tests/data/text_ppl.txt, at -c 256: llama-perplexity (build 4748) gave
// kTextLlamaCppPpl over 10 chunks (frugal: 16.2923). Both tokenizers must give the same ids and
// the forward passes agree to about 2e-5 relative here, so the bound is 5e-4; a tokenization or
// model difference moves the figure by far more.
const std::string kTextModel = std::string(FRUGAL_SOURCE_DIR) + "/models/text.gguf";
constexpr double kTextLlamaCppPpl = 16.2926;

TEST(Perplexity, MatchesLlamaPerplexityOnTheTextModel) {
  if (!std::ifstream(kTextModel).good()) GTEST_SKIP() << "missing " << kTextModel;
  auto file = GgufFile::open(kTextModel);
  ASSERT_TRUE(file.ok());
  auto tok = Tokenizer::from_gguf(**file);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  auto m = Model::load(kTextModel);
  ASSERT_TRUE(m.ok());
  auto be = make_cpu_backend({});
  std::ifstream f(std::string(FRUGAL_SOURCE_DIR) + "/tests/data/text_ppl.txt");
  std::stringstream ss;
  ss << f.rdbuf();
  TokenizeOptions to;
  to.add_special = true;
  auto tokens = (*tok)->encode(ss.str(), to);
  ASSERT_TRUE(tokens.ok());
  auto r = perplexity(**m, *be, *tokens, 256, DType::kF16, (*tok)->bos());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->windows, 10);
  EXPECT_EQ(r->scored_tokens, 10 * 127);
  EXPECT_NEAR(r->ppl, kTextLlamaCppPpl, 5e-4);
}

}  // namespace
}  // namespace frugal::eval
