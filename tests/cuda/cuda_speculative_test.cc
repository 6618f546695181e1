// Speculative decoding on the CUDA backend. A verification pass (Batch::row_invariant) must give
// every token the logits of a one-token step, bit for bit: the backend then runs it in passes of
// at most 7 tokens on the kernels of a one-token step (cuda_backend.cu, kRowInvariantTokens).
// Checked at the backend (several weight types, chains longer than a pass, two sequences in one
// batch) and through the engine (greedy output of `--spec draft` and `--spec ngram` token for
// token that of plain decoding on the committed models). Every test skips without a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "cuda/gpu_skip.h"
#include "frugal/backend/cuda/cuda_backend.h"
#include "frugal/engine/engine.h"
#include "frugal/eval/task.h"
#include "frugal/model/model.h"
#include "frugal/synth/random_model.h"
#include "frugal/tokenize/tokenizer.h"

namespace frugal {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Rows of a verification pass against one-token steps: for each type, sequence 0 and 1 get the
// same 9-token prompt (one prefill step each backend), then backend A runs one row-invariant
// batch of sequence 0's next 12 tokens and sequence 1's next 5 (17 tokens: passes of 7, 7, 3, one
// of them holding both sequences), backend B the same 17 tokens as one-token steps.
TEST(CudaSpeculative, RowInvariantStepMatchesOneTokenStepsBitForBit) {
  SKIP_WITHOUT_GPU();
  for (const char* type : {"F16", "BF16", "Q8_0", "Q4_K_M"}) {
    auto opts = synth::random_model_preset("tiny-llama", FRUGAL_SHARED_MODELS_DIR);
    ASSERT_TRUE(opts.ok());
    opts->weight_type = type;
    opts->n_layer = 2;
    opts->weight_std = 0.05;
    const fs::path path = fs::temp_directory_path() / (std::string("frugal_cuda_rowinv_") + type + ".gguf");
    ASSERT_TRUE(synth::write_random_model(*opts, path.string()).ok());
    auto model = Model::load(path.string());
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    Model& m = **model;
    const int64_t nv = m.config().n_vocab;
    auto a = make_cuda_backend();
    auto b = make_cuda_backend();
    ASSERT_TRUE(a.ok() && b.ok());
    auto kv_a = KvCache::create(m.kv_options(2, 64));
    auto kv_b = KvCache::create(m.kv_options(2, 64));
    ASSERT_TRUE(kv_a.ok() && kv_b.ok());
    const auto tok = [nv](int i) { return static_cast<TokenId>((i * 131 + 7) % nv); };
    for (int s = 0; s < 2; ++s) {
      Batch p;
      for (int i = 0; i < 9; ++i) p.add(tok(i), i, s, i == 8);
      std::vector<float> la(static_cast<size_t>(nv)), lb(la.size());
      ASSERT_TRUE(m.forward(p, *kv_a, **a, la.data()).ok());
      ASSERT_TRUE(m.forward(p, *kv_b, **b, lb.data()).ok());
      ASSERT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0) << type << ": prefill differs";
    }
    Batch v;
    v.row_invariant = true;
    for (int i = 0; i < 12; ++i) v.add(tok(100 + i), 9 + i, 0, true);
    for (int i = 0; i < 5; ++i) v.add(tok(200 + i), 9 + i, 1, true);
    std::vector<float> got(static_cast<size_t>(v.size() * nv), NAN);
    ASSERT_TRUE(m.forward(v, *kv_a, **a, got.data()).ok());
    int differing_rows = 0;
    double worst = 0;
    for (int64_t t = 0; t < v.size(); ++t) {
      Batch one;
      const auto u = static_cast<size_t>(t);
      one.add(v.tokens[u], v.pos[u], v.seq[u], true);
      std::vector<float> want(static_cast<size_t>(nv), NAN);
      ASSERT_TRUE(m.forward(one, *kv_b, **b, want.data()).ok());
      const float* row = got.data() + t * nv;
      if (std::memcmp(row, want.data(), want.size() * sizeof(float)) != 0) {
        ++differing_rows;
        for (int64_t k = 0; k < nv; ++k) worst = std::max(worst, static_cast<double>(std::fabs(row[k] - want[k])));
      }
    }
    std::printf("row-invariant %-6s: %d of %lld rows differ from one-token steps (largest difference %.3g)\n", type,
                differing_rows, static_cast<long long>(v.size()), worst);
    EXPECT_EQ(differing_rows, 0) << type;
    fs::remove(path);
  }
}

std::string model_path(const char* name) { return std::string(FRUGAL_SOURCE_DIR) + "/models/" + name; }

std::vector<TokenId> run_one(Engine& e, const std::vector<TokenId>& prompt, bool spec, FinishedRequest* fin) {
  RequestOptions r;
  r.prompt = prompt;
  r.sampling.temperature = 0;
  r.max_tokens = 64;
  r.speculative = spec;
  auto h = e.submit(r);
  EXPECT_TRUE(h.ok()) << h.status().message();
  std::vector<TokenId> out;
  if (!h.ok()) return out;
  RequestUpdate u;
  for (int i = 0; i < 12000; ++i) {
    if (!(*h)->wait(u, 10ms)) continue;
    for (const auto& t : u.tokens) out.push_back(t.id);
    if (u.done) {
      *fin = u.finished;
      return out;
    }
  }
  ADD_FAILURE() << "request did not finish";
  return out;
}

// The engine on the GPU with the committed target and draft: one request at a time (so plain
// decoding runs one-token steps), each testbed prompt decoded plainly and speculatively with the
// draft model (which runs on a CPU backend of its own) and with prompt lookup.
TEST(CudaSpeculative, GreedyOutputIsPlainGreedyOutput) {
  SKIP_WITHOUT_GPU();
  auto target = Model::load(model_path("default.gguf"));
  ModelLoadOptions lo;
  lo.cpu_layouts = true;
  auto draft = Model::load(model_path("draft.gguf"), lo);
  if (!target.ok() || !draft.ok()) GTEST_SKIP() << "models/default.gguf or models/draft.gguf missing";
  auto tok = Tokenizer::from_gguf((*target)->gguf());
  ASSERT_TRUE(tok.ok());
  auto be = make_cuda_backend();
  ASSERT_TRUE(be.ok()) << be.status().to_string();
  for (auto method : {speculative::Method::kDraft, speculative::Method::kNgram}) {
    EngineOptions o;
    o.n_parallel = 1;
    o.n_ctx = 1024;
    o.max_waiting = 100;
    o.queue_timeout_s = std::numeric_limits<double>::infinity();
    o.telemetry_period_s = 0;
    o.spec.method = method;
    o.spec.draft_model = draft->get();
    auto e = Engine::create(**target, **tok, **be, o);
    ASSERT_TRUE(e.ok()) << e.status().message();
    int64_t drafted = 0, accepted = 0, passes = 0, tokens = 0;
    for (const std::string& family : eval::task_family_names()) {
      for (int i = 0; i < 3; ++i) {
        eval::TaskOptions to;
        to.length = 192;
        auto ex = eval::generate_task(family, eval::TaskSplit::kTest, 7000 + static_cast<uint64_t>(i), to);
        ASSERT_TRUE(ex.ok()) << ex.status().message();
        auto prompt = (*tok)->encode(ex->prompt);
        ASSERT_TRUE(prompt.ok());
        FinishedRequest fs, fp;
        const auto s = run_one(**e, *prompt, true, &fs);
        const auto p = run_one(**e, *prompt, false, &fp);
        ASSERT_EQ(s, p) << speculative::method_name(method) << " " << family << " prompt " << i;
        EXPECT_EQ(fp.speculative.passes, 0);
        drafted += fs.speculative.drafted;
        accepted += fs.speculative.accepted;
        passes += fs.speculative.passes;
        tokens += static_cast<int64_t>(s.size());
      }
    }
    std::printf("cuda --spec %s: %lld tokens in %lld verify passes, %lld of %lld drafts accepted\n",
                speculative::method_name(method), static_cast<long long>(tokens), static_cast<long long>(passes),
                static_cast<long long>(accepted), static_cast<long long>(drafted));
    EXPECT_GT(passes, 0) << speculative::method_name(method);
    if (method == speculative::Method::kDraft) {
      EXPECT_GT(accepted, 0);
      EXPECT_LT(accepted, drafted) << "no draft was ever rejected: the rollback went untested";
    }
  }
}

}  // namespace
}  // namespace frugal
