// Speculative decoding through the engine on the committed models (models/default.gguf as the
// target, models/draft.gguf as its draft): greedy output is token for token that of plain decoding
// for both drafters on testbed prompts of every task family (plain and speculative requests share
// each batch), rejected drafts leave no trace in the paged KV cache or the draft's own cache, and
// bad drafts and impossible combinations are refused with a message naming what is wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <random>
#include <thread>

#include "frugal/backend/backend.h"
#include "frugal/decode/speculative/draft_model.h"
#include "frugal/decode/speculative/conf_layers.h"
#include "frugal/decode/speculative/layer_skip.h"
#include "frugal/decode/speculative/skip_set.h"
#include "frugal/decode/speculative/swift.h"
#include "frugal/engine/engine.h"
#include "frugal/engine/generate.h"
#include "frugal/eval/task.h"
#include "frugal/synth/random_model.h"
#include "frugal/tokenize/tokenizer.h"

namespace frugal {
namespace {

using namespace std::chrono_literals;
using speculative::Method;

std::string model_path(const char* name) { return std::string(FRUGAL_SOURCE_DIR) + "/models/" + name; }

struct Output {
  std::vector<TokenId> tokens;
  FinishedRequest fin;
};

Output collect(RequestHandle& h) {
  Output o;
  RequestUpdate u;
  for (int i = 0; i < 12000; ++i) {  // at most ~120 s
    if (!h.wait(u, 10ms)) continue;
    for (const auto& t : u.tokens) o.tokens.push_back(t.id);
    if (u.done) {
      o.fin = u.finished;
      return o;
    }
  }
  ADD_FAILURE() << "request " << h.id() << " did not finish";
  return o;
}

class SpeculativeEngine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ModelLoadOptions lo;
    lo.cpu_layouts = true;  // as `frugal run` loads a model for the cpu backend
    for (auto [name, out] : {std::pair{"default.gguf", &target_}, std::pair{"draft.gguf", &draft_}}) {
      auto m = Model::load(model_path(name), lo);
      if (!m.ok()) return;
      *out = std::move(m).value().release();
    }
    auto t = Tokenizer::from_gguf(target_->gguf());
    ASSERT_TRUE(t.ok()) << t.status().message();
    tok_ = std::move(t).value().release();
    backend_ = make_cpu_backend(CpuBackendOptions{2}).release();
  }
  static void TearDownTestSuite() {
    delete backend_;
    delete tok_;
    delete draft_;
    delete target_;
  }
  void SetUp() override {
    if (target_ == nullptr || draft_ == nullptr) GTEST_SKIP() << "models/default.gguf or models/draft.gguf missing";
  }

  static EngineOptions options(Method m, int parallel = 4) {
    EngineOptions o;
    o.n_parallel = parallel;
    o.n_ctx = 1024;
    o.max_waiting = 1000;
    // Every request is submitted up front and waits for one of the slots; under a sanitizer on a
    // loaded machine the last ones wait minutes. The queue's timeout is not what these tests check.
    o.queue_timeout_s = std::numeric_limits<double>::infinity();
    o.telemetry_period_s = 0;
    o.spec.method = m;
    o.spec.draft_model = draft_;
    // Plain decoding's own tokens must not depend on which requests share its steps (batched
    // products round differently with the batch size, and which requests meet in a step depends
    // on timing): every step computes each token as alone, so "the same tokens" is exact.
    o.batch_invariant = true;
    return o;
  }
  static std::unique_ptr<Engine> engine(const EngineOptions& o) {
    auto e = Engine::create(*target_, *tok_, *backend_, o);
    EXPECT_TRUE(e.ok()) << e.status().message();
    return e.ok() ? std::move(e).value() : nullptr;
  }
  static std::vector<TokenId> encode(const std::string& text) {
    auto r = tok_->encode(text);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : std::vector<TokenId>{};
  }
  static RequestOptions greedy(std::vector<TokenId> prompt, std::optional<bool> speculative, int32_t max_tokens = 96) {
    RequestOptions r;
    r.prompt = std::move(prompt);
    r.sampling.temperature = 0;
    r.max_tokens = max_tokens;
    r.speculative = speculative;
    return r;
  }

  // Decodes kPromptsPerFamily prompts of `family` speculatively (with `candidates` chains per verify pass) and
  // plainly in one engine and requires the same tokens.
  static void expect_greedy_identity(Method method, const std::string& family, int candidates);

  static inline Model* target_ = nullptr;
  static inline Model* draft_ = nullptr;
  static inline Tokenizer* tok_ = nullptr;
  static inline Backend* backend_ = nullptr;
};

// 30 test-split prompts per family and drafter at lengths 192 and 256 (the trained length): 750
// prompts over the five families and five drafters, each decoded speculatively and plainly in the
// same engine (batches of 4 mixing both). Under AddressSanitizer the first 12 per family: there
// these tests took 2,070 s of the sanitized run's 2,760 s of test time on 2 cores (three quarters),
// and a memory error shows on any prompt; the Release run keeps the full count for the identity
// itself. The runs are deterministic (batch-invariant steps), so the sanitized run sees the same
// drafts as a Release run of 12: every drafter still has rejections there (conflayers on passkey
// has the fewest, 1 of 41; with 8 prompts it has none and the test below would fail).
#if defined(__SANITIZE_ADDRESS__)
constexpr int kPromptsPerFamily = 12;
#else
constexpr int kPromptsPerFamily = 30;
#endif

class GreedyIdentity : public SpeculativeEngine,
                       public ::testing::WithParamInterface<std::tuple<Method, std::string>> {};

TEST_P(GreedyIdentity, SpeculativeGreedyOutputIsPlainGreedyOutput) {
  const auto [method, family] = GetParam();
  expect_greedy_identity(method, family, 1);
}

// Several chains per verify pass (chain c starts with the draft's c-th most likely token), kept
// chains taking over the slot's rows from their own KV slot: still plain decoding's tokens.
class GreedyIdentityCandidates : public SpeculativeEngine,
                                 public ::testing::WithParamInterface<std::tuple<Method, std::string>> {};

TEST_P(GreedyIdentityCandidates, MultiCandidateGreedyOutputIsPlainGreedyOutput) {
  const auto [method, family] = GetParam();
  expect_greedy_identity(method, family, 3);
}

void SpeculativeEngine::expect_greedy_identity(Method method, const std::string& family, int candidates) {
  EngineOptions o = options(method);
  o.spec.candidates = candidates;
  auto e = engine(o);
  ASSERT_NE(e, nullptr);
  std::vector<std::shared_ptr<RequestHandle>> spec, plain;
  for (int i = 0; i < kPromptsPerFamily; ++i) {
    eval::TaskOptions to;
    to.length = i % 2 == 0 ? 192 : 256;
    auto ex = eval::generate_task(family, eval::TaskSplit::kTest, 5000 + static_cast<uint64_t>(i), to);
    ASSERT_TRUE(ex.ok()) << ex.status().message();
    const std::vector<TokenId> prompt = encode(ex->prompt);
    auto a = e->submit(greedy(prompt, std::nullopt));
    auto b = e->submit(greedy(prompt, false));
    ASSERT_TRUE(a.ok() && b.ok());
    spec.push_back(*a);
    plain.push_back(*b);
  }
  int64_t drafted = 0, accepted = 0, passes = 0, other_chain = 0;
  double search_ms = 0;
  for (size_t i = 0; i < spec.size(); ++i) {
    const Output s = collect(*spec[i]);
    const Output p = collect(*plain[i]);
    ASSERT_EQ(s.fin.reason, p.fin.reason) << "prompt " << i << ": " << s.fin.error.message() << " / "
                                          << p.fin.error.message();
    ASSERT_EQ(s.tokens, p.tokens) << "prompt " << i;
    EXPECT_EQ(s.fin.speculative.method, speculative::method_name(method));
    EXPECT_EQ(p.fin.speculative.passes, 0) << "the opted-out request speculated";
    EXPECT_EQ(s.fin.timings.decode_tokens, p.fin.timings.decode_tokens);
    drafted += s.fin.speculative.drafted;
    accepted += s.fin.speculative.accepted;
    passes += s.fin.speculative.passes;
    other_chain += s.fin.speculative.other_chain;
    search_ms += s.fin.speculative.search_ms;
    if (method == Method::kSwift || method == Method::kConfLayers) {
      EXPECT_EQ(s.fin.speculative.skip_set.size(), static_cast<size_t>(target_->config().n_layer));
    }
  }
  // The online searches really ran.
  if (method == Method::kSwift || method == Method::kConfLayers) {
    EXPECT_GT(search_ms, 0.0);
  }
  // The drafters must really have been exercised, rejections included.
  EXPECT_GT(passes, 0);
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, drafted);
  if (candidates > 1) {
    // Several chains must have been verified, and kept past the first token (the longest kept prefix
    // of any pass exceeds what a rejection at the first token leaves).
    EXPECT_GE(drafted, passes * 2) << "chains per pass";
    EXPECT_GT(other_chain, 0) << "a chain other than the first was kept (its rows taken over)";
  }
  std::printf("%s %s x%d: %lld passes, %lld drafted, %lld accepted\n", speculative::method_name(method),
              family.c_str(), candidates, static_cast<long long>(passes), static_cast<long long>(drafted),
              static_cast<long long>(accepted));
}

std::vector<std::tuple<Method, std::string>> identity_cases() {
  std::vector<std::tuple<Method, std::string>> out;
  for (Method m : {Method::kDraft, Method::kNgram, Method::kLayerSkip, Method::kSwift, Method::kConfLayers}) {
    for (const auto& f : eval::task_family_names()) out.emplace_back(m, f);
  }
  return out;
}

std::vector<std::tuple<Method, std::string>> candidate_identity_cases() {
  std::vector<std::tuple<Method, std::string>> out;
  for (const auto& f : eval::task_family_names()) out.emplace_back(Method::kDraft, f);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Families, GreedyIdentityCandidates, ::testing::ValuesIn(candidate_identity_cases()),
                         [](const auto& info) {
                           return std::string(speculative::method_name(std::get<0>(info.param))) + "_" +
                                  std::get<1>(info.param);
                         });

INSTANTIATE_TEST_SUITE_P(Families, GreedyIdentity, ::testing::ValuesIn(identity_cases()),
                         [](const auto& info) {
                           return std::string(speculative::method_name(std::get<0>(info.param))) + "_" +
                                  std::get<1>(info.param);
                         });

// The rules at one depth on the real models' distributions, without sampling noise: for every
// position of testbed prompts (teacher-forced, positions 32 onwards), p from the target and q from
// the draft after the same prefix through the request's sampling transform (llama.cpp's default
// top-k 40, top-p 0.95, min-p 0.05), the probability that one of m i.i.d. candidates is kept
// (kept_probability) under each rule. ResiSpec's plan must not keep less than the standard rule
// (expected from the late-filling argument in docs/speculative.md, which the standard rule's
// greedy plan is a special case of; not proven, hence checked); the means are printed for
// docs/speculative.md.
TEST_F(SpeculativeEngine, ResiSpecKeepsAtLeastTheStandardRuleOnTheModelsDistributions) {
  const auto n_vocab = static_cast<size_t>(target_->config().n_vocab);
  struct Sums {
    double kept[2][5] = {};  // [rule][m]
    int64_t positions = 0;
  };
  std::map<float, Sums> sums;
  speculative::CandidateScratch scratch;
  for (const auto& family : eval::task_family_names()) {
    for (int i = 0; i < 2; ++i) {
      eval::TaskOptions to;
      to.length = 256;
      auto ex = eval::generate_task(family, eval::TaskSplit::kTest, 7000 + static_cast<uint64_t>(i), to);
      ASSERT_TRUE(ex.ok());
      const std::vector<TokenId> prompt = encode(ex->prompt);
      const auto n = static_cast<int32_t>(prompt.size());
      std::vector<float> pl(static_cast<size_t>(n) * n_vocab), ql(pl.size());
      for (auto [model, out] : {std::pair{target_, &pl}, std::pair{draft_, &ql}}) {
        auto kv = KvCache::create(model->kv_options(1, n + 1));
        ASSERT_TRUE(kv.ok());
        Batch b;
        for (int32_t t = 0; t < n; ++t) b.add(prompt[static_cast<size_t>(t)], t, 0, true);
        ASSERT_TRUE(model->forward(b, *kv, *backend_, out->data()).ok());
      }
      for (const float temp : {1.0f, 0.7f}) {
        SamplingParams sp;
        sp.temperature = temp;
        Sampler sampler(sp, static_cast<int32_t>(n_vocab));
        std::vector<float> p(n_vocab), q(n_vocab);
        Sums& acc = sums[temp];
        for (int32_t t = 32; t < n; ++t) {
          const std::span<const TokenId> before(prompt.data(), static_cast<size_t>(t) + 1);
          sampler.distribution(pl.data() + static_cast<size_t>(t) * n_vocab, before, p.data());
          sampler.distribution(ql.data() + static_cast<size_t>(t) * n_vocab, before, q.data());
          for (int m = 1; m <= 4; ++m) {
            const double standard = kept_probability(p, q, m, speculative::CandidateRule::kStandard, scratch);
            const double shaped = kept_probability(p, q, m, speculative::CandidateRule::kResiSpec, scratch);
            ASSERT_GE(shaped, standard - 1e-6) << family << " position " << t << " m " << m;
            acc.kept[0][m] += standard;
            acc.kept[1][m] += shaped;
          }
          ++acc.positions;
        }
      }
    }
  }
  for (const auto& [temp, acc] : sums) {
    for (int m = 1; m <= 4; ++m) {
      std::printf("temperature %.1f, %d candidates: kept %.4f standard, %.4f resispec (%lld positions)\n", temp, m,
                  acc.kept[0][m] / static_cast<double>(acc.positions), acc.kept[1][m] / static_cast<double>(acc.positions),
                  static_cast<long long>(acc.positions));
    }
    // One candidate: both rules are Leviathan / Chen's.
    EXPECT_NEAR(acc.kept[0][1], acc.kept[1][1], 1e-6 * static_cast<double>(acc.positions));
  }
}

TEST_F(SpeculativeEngine, ContinuationReusesTheRowsASpeculativeSequenceLeft) {
  // A second request whose prompt is the first's prompt and output reuses that slot's cached rows,
  // rows written by verify passes and rolled back at every rejection; it must decode exactly as
  // the same prompt in a fresh engine without speculation, and no page may leak.
  eval::TaskOptions to;
  to.length = 256;
  auto ex = eval::generate_task("kv_recall", eval::TaskSplit::kTest, 77, to);
  ASSERT_TRUE(ex.ok());
  const std::vector<TokenId> prompt = encode(ex->prompt);
  for (Method m : {Method::kDraft, Method::kNgram}) {
    SCOPED_TRACE(speculative::method_name(m));
    EngineOptions o = options(m, 1);
    o.kv_memory = 8u << 20;  // a page pool, so leaked pages would show
    auto e = engine(o);
    ASSERT_NE(e, nullptr);
    auto h = e->submit(greedy(prompt, true, 40));
    ASSERT_TRUE(h.ok()) << h.status().message();
    const Output first = collect(**h);
    ASSERT_GT(first.fin.speculative.passes, 0);
    std::vector<TokenId> longer = prompt;
    longer.insert(longer.end(), first.tokens.begin(), first.tokens.end());
    longer.insert(longer.end(), prompt.end() - 20, prompt.end());  // some more context to read
    auto h2 = e->submit(greedy(longer, true, 40));
    ASSERT_TRUE(h2.ok());
    const Output second = collect(**h2);
    EXPECT_GT(second.fin.timings.cached_tokens, static_cast<int64_t>(prompt.size()));

    auto fresh = engine(options(Method::kNone, 1));
    auto h3 = fresh->submit(greedy(longer, std::nullopt, 40));
    ASSERT_TRUE(h3.ok());
    EXPECT_EQ(second.tokens, collect(**h3).tokens);
    // Only the cached prefix holds pages now, exactly the pages of its rows: rolled-back drafts
    // and the room reserved for them went back to the pool.
    const EngineStats st = e->stats();
    const KvCacheOptions ko = target_->kv_options(1, st.slot_capacity);
    const int64_t heads = static_cast<int64_t>(ko.n_layer) * ko.n_head_kv;
    const int64_t rows = st.kv_rows_cached;
    EXPECT_EQ(st.kv_pages_total - st.kv_pages_free, heads * ((rows + ko.page_tokens - 1) / ko.page_tokens))
        << rows << " cached rows";
  }
}

TEST_F(SpeculativeEngine, DraftCacheRollsBackToWhatAFreshDrafterProposes) {
  speculative::DrafterContext dc;
  dc.target = target_;
  dc.backend = backend_;
  dc.n_slots = 2;
  dc.capacity = 512;
  auto used = speculative::DraftModelDrafter::create(*draft_, 0, dc);
  ASSERT_TRUE(used.ok()) << used.status().message();
  SamplingParams sp;
  sp.temperature = 0;
  Sampler s(sp, static_cast<int32_t>(target_->config().n_vocab));
  eval::TaskOptions to;
  to.length = 192;
  auto ex = eval::generate_task("var_track", eval::TaskSplit::kTest, 11, to);
  ASSERT_TRUE(ex.ok());
  const std::vector<TokenId> a = encode(ex->prompt);
  std::vector<speculative::Draft> out(1);
  // Sequence a, then a with its last 30 tokens replaced (rejected drafts, or a new sequence in
  // the slot), then a prefix of it: each proposal must be what a fresh drafter proposes, and what
  // the draft model decodes greedily on its own (generate() with it as the target).
  std::vector<TokenId> b(a.begin(), a.end() - 30);
  for (int i = 0; i < 30; ++i) b.push_back(a[static_cast<size_t>(i) + 5]);
  const std::vector<TokenId> c(a.begin(), a.end() - 50);
  const std::vector<const std::vector<TokenId>*> order = {&a, &b, &c, &a};
  for (const std::vector<TokenId>* seq : order) {
    speculative::DraftSequence ds{1, *seq, 6, &s};
    ASSERT_TRUE((*used)->propose({&ds, 1}, out).ok());
    auto fresh = speculative::DraftModelDrafter::create(*draft_, 0, dc);
    ASSERT_TRUE(fresh.ok());
    std::vector<speculative::Draft> fresh_out(1);
    ASSERT_TRUE((*fresh)->propose({&ds, 1}, fresh_out).ok());
    EXPECT_EQ(out[0].tokens, fresh_out[0].tokens);
    GenerateOptions go;
    go.n_predict = 6;
    go.n_ctx = 512;
    go.ignore_eos = true;
    go.sampling.temperature = 0;
    auto g = generate(*draft_, *tok_, *backend_, *seq, go);
    ASSERT_TRUE(g.ok()) << g.status().message();
    EXPECT_EQ(out[0].tokens, g->tokens);
    // The cache holds the sequence and all drafts but the last: nothing more.
    EXPECT_EQ((*used)->cache().max_pos(1), static_cast<int32_t>(seq->size()) + 4);
  }
}

TEST_F(SpeculativeEngine, ADraftWithAnotherVocabularyIsRefusedNamingTheFirstDifference) {
  const std::string dir = ::testing::TempDir();
  for (synth::VocabKind kind : {synth::VocabKind::kSpm, synth::VocabKind::kBpe}) {
    synth::RandomModelOptions ro;
    ro.n_embd = 64;
    ro.n_layer = 1;
    ro.n_ff = 128;
    ro.n_vocab = 400;
    ro.vocab.kind = kind;
    const std::string path = dir + "/other_vocab.gguf";
    ASSERT_TRUE(synth::write_random_model(ro, path).ok());
    auto other = Model::load(path);
    ASSERT_TRUE(other.ok()) << other.status().message();
    // The oracle: the first id where the two token lists differ.
    const auto t = target_->gguf().get_string_array("tokenizer.ggml.tokens").value();
    const auto d = (*other)->gguf().get_string_array("tokenizer.ggml.tokens").value();
    size_t first = 0;
    while (first < t.size() && first < d.size() && t[first] == d[first]) ++first;
    ASSERT_LT(first, std::min(t.size(), d.size()));
    // Control bytes are escaped so the message stays on one line.
    const auto escaped = [](const std::string& x) {
      std::string o;
      for (unsigned char c : x) {
        o += c == '\n' ? std::string("\\n") : c < 0x20 ? fmt::format("\\x{:02x}", c) : std::string(1, static_cast<char>(c));
      }
      return o;
    };
    const std::string expected = fmt::format("differs from the target's at token id {}: target '{}', draft '{}'", first,
                                             escaped(t[first]), escaped(d[first]));
    EngineOptions o = options(Method::kDraft);
    o.spec.draft_model = other->get();
    auto e = Engine::create(*target_, *tok_, *backend_, o);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.status().message().find(expected), std::string::npos) << e.status().message();
    EXPECT_EQ(e.status().message().find('\n'), std::string::npos) << "one line: " << e.status().message();
  }
}

TEST_F(SpeculativeEngine, LayerSkipPassesSkipExactlyTheMaskedLayers) {
  // A mask of the wrong size is refused; an all-zero mask is the full pass bit for bit; skipping
  // changes the logits.
  const auto nv = static_cast<size_t>(target_->config().n_vocab);
  const auto n_layer = static_cast<size_t>(target_->config().n_layer);
  const std::vector<TokenId> prompt = encode("Q: 3+4?\n");
  const auto run = [&](std::vector<uint8_t> skip, std::vector<float>& out) {
    auto kv = KvCache::create(target_->kv_options(1, 64));
    EXPECT_TRUE(kv.ok());
    Batch b;
    b.skip_layers = std::move(skip);
    for (size_t p = 0; p < prompt.size(); ++p) b.add(prompt[p], static_cast<int32_t>(p), 0, p + 1 == prompt.size());
    out.assign(nv, 0.f);
    return target_->forward(b, *kv, *backend_, out.data());
  };
  std::vector<float> full, zero, skipped;
  ASSERT_TRUE(run({}, full).ok());
  ASSERT_TRUE(run(std::vector<uint8_t>(n_layer, 0), zero).ok());
  EXPECT_EQ(full, zero);
  std::vector<uint8_t> mask(n_layer, 0);
  mask[1] = Batch::kSkipLayer;
  ASSERT_TRUE(run(mask, skipped).ok());
  EXPECT_NE(full, skipped);
  const Status bad = run(std::vector<uint8_t>(n_layer + 1, 0), skipped);
  EXPECT_EQ(bad.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("skip_layers has"), std::string::npos) << bad.message();
  // The drafter picks a set of the requested size among the middle layers.
  speculative::DrafterContext dc;
  dc.target = target_;
  dc.backend = backend_;
  dc.n_slots = 1;
  dc.capacity = 512;
  auto d = speculative::LayerSkipDrafter::create(*target_, 2, 0, dc);
  ASSERT_TRUE(d.ok()) << d.status().message();
  SamplingParams sp;
  sp.temperature = 0;
  Sampler s(sp, static_cast<int32_t>(nv));
  eval::TaskOptions to;
  to.length = 192;
  const std::vector<TokenId> toks = encode(eval::generate_task("passkey", eval::TaskSplit::kTest, 3, to)->prompt);
  speculative::DraftSequence ds{0, toks, 4, &s};
  std::vector<speculative::Draft> out(1);
  ASSERT_TRUE((*d)->propose({&ds, 1}, out).ok());
  const auto& chosen = (*d)->chosen();
  ASSERT_EQ(chosen.size(), n_layer);
  EXPECT_EQ(std::count(chosen.begin(), chosen.end(), Batch::kSkipLayer), 2);
  EXPECT_EQ(chosen.front(), 0);
  EXPECT_EQ(chosen.back(), 0);
  EXPECT_EQ(out[0].tokens.size(), 4u);
  EXPECT_FALSE(speculative::LayerSkipDrafter::create(*target_, static_cast<int32_t>(n_layer) - 1, 0, dc).ok());
}

TEST_F(SpeculativeEngine, SublayerSkipsSkipTheAttentionOrTheMlpAlone) {
  // Attention alone and MLP alone each change the logits, differently, and both together are the
  // whole layer skipped, bit for bit; a value past kSkipLayer is refused.
  const auto nv = static_cast<size_t>(target_->config().n_vocab);
  const auto n_layer = static_cast<size_t>(target_->config().n_layer);
  const std::vector<TokenId> prompt = encode("Q: 3+4?\n");
  const auto run = [&](uint8_t at_layer_2, std::vector<float>& out) {
    auto kv = KvCache::create(target_->kv_options(1, 64));
    EXPECT_TRUE(kv.ok());
    Batch b;
    b.skip_layers.assign(n_layer, 0);
    b.skip_layers[2] = at_layer_2;
    for (size_t p = 0; p < prompt.size(); ++p) b.add(prompt[p], static_cast<int32_t>(p), 0, p + 1 == prompt.size());
    out.assign(nv, 0.f);
    return target_->forward(b, *kv, *backend_, out.data());
  };
  std::vector<float> full, attn, mlp, whole, bad;
  ASSERT_TRUE(run(0, full).ok());
  ASSERT_TRUE(run(Batch::kSkipAttention, attn).ok());
  ASSERT_TRUE(run(Batch::kSkipMlp, mlp).ok());
  ASSERT_TRUE(run(Batch::kSkipLayer, whole).ok());
  EXPECT_NE(full, attn);
  EXPECT_NE(full, mlp);
  EXPECT_NE(attn, mlp);
  EXPECT_NE(attn, whole);
  EXPECT_NE(mlp, whole);
  const Status st = run(4, bad);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("skip_layers[2] = 4"), std::string::npos) << st.message();
}

namespace {
std::vector<TokenId> passkey_prompt_tokens(const Tokenizer& tok, uint64_t seed) {
  eval::TaskOptions to;
  to.length = 192;
  auto r = tok.encode(eval::generate_task("passkey", eval::TaskSplit::kTest, seed, to)->prompt);
  return r.ok() ? *r : std::vector<TokenId>{};
}
}  // namespace

TEST_F(SpeculativeEngine, SwiftSearchesSetsOfTheRequestedSizeAndFreezesOnRequest) {
  const auto nv = static_cast<int32_t>(target_->config().n_vocab);
  const auto n_layer = static_cast<int32_t>(target_->config().n_layer);
  speculative::DrafterContext dc;
  dc.target = target_;
  dc.backend = backend_;
  dc.n_slots = 1;
  dc.capacity = 512;
  SamplingParams sp;
  sp.temperature = 0;
  Sampler sampler(sp, nv);
  const std::vector<TokenId> toks = passkey_prompt_tokens(*tok_, 3);
  speculative::SpeculativeOptions o;
  o.method = Method::kSwift;
  o.skip_layers = 3;
  o.search_every = 1;
  o.confidence = 0;  // never stop early: drafts of the full length
  o.search_seed = 7;
  auto d = speculative::SwiftDrafter::create(*target_, o, dc);
  ASSERT_TRUE(d.ok()) << d.status().message();
  std::vector<TokenId> seq = toks;
  for (int call = 0; call < 12; ++call) {
    speculative::DraftSequence ds{0, seq, 4, &sampler};
    std::vector<speculative::Draft> out(1);
    ASSERT_TRUE((*d)->propose({&ds, 1}, out).ok());
    EXPECT_EQ(out[0].tokens.size(), 4u);
    seq.push_back(out[0].tokens.front());
  }
  EXPECT_EQ((*d)->search_steps(), 12);
  EXPECT_GT((*d)->search_ms(), 0.0);
  const std::string found = (*d)->skip_set();
  auto parsed = speculative::parse_skip_set(found, n_layer);
  ASSERT_TRUE(parsed.ok()) << found;
  EXPECT_EQ(speculative::skipped_sublayers(*parsed), 3) << found;
  EXPECT_EQ(found.front(), '-');
  EXPECT_EQ(found.back(), '-');
  std::printf("swift: %d search steps, %d switches, set %s\n", (*d)->search_steps(), (*d)->switches(), found.c_str());

  // Frozen at what the search found: no search, the same set, and the same drafts as a drafter
  // that searched its way there (both run the same skipped model over the same tokens).
  o.skip_set = found;
  auto frozen = speculative::SwiftDrafter::create(*target_, o, dc);
  ASSERT_TRUE(frozen.ok()) << frozen.status().message();
  speculative::DraftSequence ds{0, seq, 5, &sampler};
  std::vector<speculative::Draft> a(1), b(1);
  ASSERT_TRUE((*frozen)->propose({&ds, 1}, a).ok());
  EXPECT_EQ((*frozen)->search_steps(), 0);
  EXPECT_EQ((*frozen)->search_ms(), 0.0);
  EXPECT_EQ((*frozen)->skip_set(), found);
  o.skip_set.clear();
  o.search_every = 1000;  // one search step at the first call only
  // Every drafter's first step measures its first random set; seed 7's, then frozen there.
  auto once = speculative::SwiftDrafter::create(*target_, o, dc);
  ASSERT_TRUE(once.ok());
  ASSERT_TRUE((*once)->propose({&ds, 1}, b).ok());
  o.skip_set = (*once)->skip_set();
  auto replay = speculative::SwiftDrafter::create(*target_, o, dc);
  ASSERT_TRUE(replay.ok());
  std::vector<speculative::Draft> c(1);
  ASSERT_TRUE((*replay)->propose({&ds, 1}, c).ok());
  EXPECT_EQ(b[0].tokens, c[0].tokens);
  EXPECT_EQ(b[0].tokens.size(), 5u);

  // More sublayers than the middle layers have is refused with the range.
  speculative::SpeculativeOptions too_many = o;
  too_many.skip_set.clear();
  too_many.skip_layers = 99;
  auto refused = speculative::SwiftDrafter::create(*target_, too_many, dc);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            fmt::format("speculative: spec-skip = 99 must be in [1, {}] for swift (the middle layers' attention and "
                        "MLP sublayers)",
                        2 * (n_layer - 2)));
  // A confidence of 1 stops every draft before its first token (no softmax reaches 1 here).
  o.skip_set.clear();
  o.confidence = 1.0;
  auto shy = speculative::SwiftDrafter::create(*target_, o, dc);
  ASSERT_TRUE(shy.ok());
  std::vector<speculative::Draft> e(1);
  ASSERT_TRUE((*shy)->propose({&ds, 1}, e).ok());
  EXPECT_TRUE(e[0].tokens.empty());
}

TEST_F(SpeculativeEngine, ConfLayersExitsAtTheFirstLayerConfidentEnough) {
  const auto nv = static_cast<int32_t>(target_->config().n_vocab);
  const auto n_layer = static_cast<int32_t>(target_->config().n_layer);
  speculative::DrafterContext dc;
  dc.target = target_;
  dc.backend = backend_;
  dc.n_slots = 1;
  dc.capacity = 512;
  SamplingParams sp;
  sp.temperature = 0;
  Sampler sampler(sp, nv);
  const std::vector<TokenId> toks = passkey_prompt_tokens(*tok_, 4);
  speculative::DraftSequence ds{0, toks, 4, &sampler};
  speculative::SpeculativeOptions o;
  o.method = Method::kConfLayers;
  // Threshold 1: no exit is confident enough; every exit measured, the deepest used.
  o.confidence = 1.0;
  auto all = speculative::ConfLayersDrafter::create(*target_, o, dc);
  ASSERT_TRUE(all.ok()) << all.status().message();
  std::vector<speculative::Draft> out(1);
  ASSERT_TRUE((*all)->propose({&ds, 1}, out).ok());
  EXPECT_EQ((*all)->exit_layer(), n_layer - 1);
  EXPECT_EQ((*all)->skip_set(), std::string(static_cast<size_t>(n_layer - 1), '-') + "x");
  const std::vector<double> conf = (*all)->confidences();
  ASSERT_EQ(conf.size(), static_cast<size_t>(n_layer - 2));
  for (double c : conf) {
    EXPECT_GT(c, 0.0);
    EXPECT_LT(c, 1.0);
  }
  std::printf("conflayers: mean top-token probability at exits 1..%d:", n_layer - 2);
  for (double c : conf) std::printf(" %.3f", c);
  std::printf("\n");
  // Threshold at each measured confidence: the exit is the first layer reaching it.
  for (size_t j = 0; j < conf.size(); ++j) {
    o.confidence = conf[j];
    auto d = speculative::ConfLayersDrafter::create(*target_, o, dc);
    ASSERT_TRUE(d.ok());
    ASSERT_TRUE((*d)->propose({&ds, 1}, out).ok());
    size_t first = 0;
    while (conf[first] < conf[j]) ++first;
    EXPECT_EQ((*d)->exit_layer(), static_cast<int32_t>(first) + 2) << "threshold " << conf[j];
    const std::string set = (*d)->skip_set();
    EXPECT_EQ(set.find('x'), first + 2) << set;
  }
  // A set given is used as is, without a search.
  o.skip_set = "--xxxx";
  o.skip_set.resize(static_cast<size_t>(n_layer), 'x');
  auto frozen = speculative::ConfLayersDrafter::create(*target_, o, dc);
  ASSERT_TRUE(frozen.ok());
  ASSERT_TRUE((*frozen)->propose({&ds, 1}, out).ok());
  EXPECT_EQ((*frozen)->skip_set(), o.skip_set);
  EXPECT_EQ((*frozen)->search_ms(), 0.0);
}

TEST_F(SpeculativeEngine, ADraftOverItsMemoryBudgetIsRefusedWithTheNumbers) {
  EngineOptions o = options(Method::kDraft, 2);
  o.spec.draft_memory = 1u << 20;
  auto e = Engine::create(*target_, *tok_, *backend_, o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), ErrorCode::kOverBudget);
  const std::string weights = std::to_string(draft_->weights().bytes);
  EXPECT_NE(e.status().message().find(weights + " bytes of weights"), std::string::npos) << e.status().message();
  EXPECT_NE(e.status().message().find("budget of 1048576 bytes"), std::string::npos) << e.status().message();
  // The target as its own draft cannot pay for itself.
  o.spec.draft_memory = 0;
  o.spec.draft_model = target_;
  e = Engine::create(*target_, *tok_, *backend_, o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("a draft must be smaller than its target"), std::string::npos)
      << e.status().message();
  // A budget that holds it: accepted.
  o.spec.draft_model = draft_;
  o.spec.draft_memory = 1u << 30;
  EXPECT_TRUE(Engine::create(*target_, *tok_, *backend_, o).ok());
}

TEST_F(SpeculativeEngine, RequestsSpeculationCannotServeAreRefusedOrDecodedPlainly) {
  auto e = engine(options(Method::kNgram, 2));
  ASSERT_NE(e, nullptr);
  const std::vector<TokenId> prompt = encode("Q: what is 2+2?\n");
  RequestOptions json = greedy(prompt, true, 8);
  json.json_schema = JsonSchema::any_json_object();
  auto r = e->submit(json);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("does not run under a JSON schema constraint"), std::string::npos)
      << r.status().message();
  RequestOptions evict = greedy(prompt, true, 8);
  KvPolicyOptions kv;
  kv.policy = "window";
  kv.budget = 128;
  kv.buffer = 16;
  evict.kv = kv;
  r = e->submit(evict);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not kv policy 'window' with kv-quant none"), std::string::npos)
      << r.status().message();
  // Without an explicit request for it, both decode plainly.
  json.speculative.reset();
  evict.speculative.reset();
  for (RequestOptions* req : {&json, &evict}) {
    auto h = e->submit(*req);
    ASSERT_TRUE(h.ok()) << h.status().message();
    const Output o = collect(**h);
    EXPECT_NE(o.fin.reason, FinishReason::kError);
    EXPECT_EQ(o.fin.speculative.passes, 0);
  }
  // An engine whose default policy evicts cannot speculate at all: refused when configured.
  EngineOptions bad = options(Method::kNgram, 2);
  bad.kv = kv;
  auto be = Engine::create(*target_, *tok_, *backend_, bad);
  ASSERT_FALSE(be.ok());
  EXPECT_NE(be.status().message().find("needs a keep-everything unquantized KV cache"), std::string::npos)
      << be.status().message();
  // And an engine without a drafter refuses a request that requires one.
  auto plain = engine(options(Method::kNone, 1));
  r = plain->submit(greedy(prompt, true, 8));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("without a drafter"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace frugal

namespace frugal {
namespace {

// Sampling through the whole engine (drafter, verify pass, rollback, emission): the joint law of
// the first two generated tokens of a speculating request equals plain sampling's. A random
// 2-layer target and a draft of the same vocabulary whose distributions differ from the target's
// (drafts are kept and rejected), top-k 3 on both so the law has 9 cells; 3000 requests of each kind, compared
// with Pearson's test of homogeneity at p > 1e-3. The same test against plain sampling at another
// temperature must reject (p < 1e-6): it has the power to see a wrong law.
class SpeculativeSampling : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir() + "/spec_sampling");
    std::filesystem::create_directories(*dir_);
    synth::RandomModelOptions ro;
    ro.n_embd = 64;
    ro.n_layer = 2;
    ro.n_head = 2;
    ro.n_head_kv = 1;
    ro.n_ff = 128;
    ro.n_vocab = 300;
    ro.weight_std = 0.2;  // logits spread enough that top-3 is not one token
    ro.seed = 11;
    const std::string target = *dir_ + "/target.gguf", draft = *dir_ + "/draft.gguf";
    ASSERT_TRUE(synth::write_random_model(ro, target).ok());
    // The draft: the same seed at a smaller weight scale, so its top tokens mostly agree with the
    // target's while its probabilities differ (both acceptance and the residual get exercised).
    ro.weight_std = 0.15;
    ro.vocab.kind = synth::VocabKind::kCopy;
    ro.vocab.copy_from = target;
    ro.n_vocab = 0;
    ASSERT_TRUE(synth::write_random_model(ro, draft).ok());
    target_ = Model::load(target).value().release();
    draft_ = Model::load(draft).value().release();
    tok_ = Tokenizer::from_gguf(target_->gguf()).value().release();
    backend_ = make_cpu_backend(CpuBackendOptions{2}).release();
  }
  static void TearDownTestSuite() {
    delete backend_;
    delete tok_;
    delete draft_;
    delete target_;
    std::error_code ec;
    std::filesystem::remove_all(*dir_, ec);
    delete dir_;
  }

  // Counts of (first, second) generated token over `n` requests with seeds 0..n-1.
  static std::map<std::pair<TokenId, TokenId>, int64_t> joint(Method m, float temperature, int n,
                                                              int candidates = 1,
                                                              speculative::CandidateRule rule =
                                                                  speculative::CandidateRule::kStandard) {
    EngineOptions o;
    o.n_parallel = 16;
    o.n_ctx = 512;
    o.max_waiting = n + 1;
    o.queue_timeout_s = std::numeric_limits<double>::infinity();  // all n wait up front
    o.telemetry_period_s = 0;
    o.spec.method = m;
    o.spec.draft_model = draft_;
    o.spec.k = 3;
    o.spec.candidates = candidates;
    o.spec.rule = rule;
    o.spec.draft_memory = 1u << 30;  // the draft is as large as the target: a budget allows it
    auto e = Engine::create(*target_, *tok_, *backend_, o);
    EXPECT_TRUE(e.ok()) << e.status().message();
    // Every non-control token once, in a fixed shuffled order: whatever is sampled first, the n-gram
    // drafter finds it and proposes what followed it. The shared prompt is computed once per slot
    // (prefix cache).
    std::vector<TokenId> prompt = {1};
    for (TokenId t = 3; t < static_cast<TokenId>(target_->config().n_vocab); ++t) prompt.push_back(t);
    std::shuffle(prompt.begin() + 1, prompt.end(), std::mt19937(5));
    std::vector<std::shared_ptr<RequestHandle>> hs;
    for (int i = 0; i < n; ++i) {
      RequestOptions r;
      r.prompt = prompt;
      r.sampling.temperature = temperature;
      r.sampling.top_k = 3;
      r.sampling.top_p = 1.0f;
      r.sampling.min_p = 0.0f;
      r.sampling.seed = static_cast<uint64_t>(i);
      r.max_tokens = 6;
      r.ignore_eos = true;
      auto h = (*e)->submit(r);
      EXPECT_TRUE(h.ok()) << h.status().message();
      hs.push_back(*h);
    }
    std::map<std::pair<TokenId, TokenId>, int64_t> counts;
    int64_t passes = 0, rejected = 0, accepted = 0;
    for (auto& h : hs) {
      const Output out = collect(*h);
      EXPECT_GE(out.tokens.size(), 2u);
      if (out.tokens.size() >= 2) ++counts[{out.tokens[0], out.tokens[1]}];
      passes += out.fin.speculative.passes;
      rejected += out.fin.speculative.drafted - out.fin.speculative.accepted;
      accepted += out.fin.speculative.accepted;
    }
    if (std::getenv("FRUGAL_TEST_VERBOSE") != nullptr) {
      std::printf("%s t=%.1f:", speculative::method_name(m), temperature);
      for (const auto& [k, v] : counts) std::printf(" (%d,%d)=%lld", k.first, k.second, static_cast<long long>(v));
      std::printf("; %lld passes, %lld accepted, %lld rejected\n", static_cast<long long>(passes),
                  static_cast<long long>(accepted), static_cast<long long>(rejected));
    }
    if (m != Method::kNone) {
      EXPECT_GT(passes, n) << "drafts were verified";
      EXPECT_GT(rejected, n / 2) << "and rejected often enough to exercise the residual";
      // The draft model agrees often enough to exercise acceptance; n-gram proposals (what
      // followed the token in a shuffled prompt) mostly fall outside the target's top 3.
      if (m == Method::kDraft) {
        EXPECT_GT(accepted, n / 2) << "and kept often enough to exercise acceptance";
      }
    }
    return counts;
  }

  static double homogeneity_p(const std::map<std::pair<TokenId, TokenId>, int64_t>& a,
                              const std::map<std::pair<TokenId, TokenId>, int64_t>& b) {
    std::map<std::pair<TokenId, TokenId>, std::pair<double, double>> cells;
    double na = 0, nb = 0;
    for (const auto& [k, v] : a) cells[k].first += v, na += v;
    for (const auto& [k, v] : b) cells[k].second += v, nb += v;
    double stat = 0;
    for (const auto& [k, v] : cells) {
      const double tot = v.first + v.second;
      const double ea = tot * na / (na + nb), eb = tot * nb / (na + nb);
      stat += (v.first - ea) * (v.first - ea) / ea + (v.second - eb) * (v.second - eb) / eb;
    }
    const int df = static_cast<int>(cells.size()) - 1;
    // Upper tail of chi-square(df) by the regularized gamma series / continued fraction.
    const double s = df / 2.0, z = stat / 2.0;
    if (z <= 0) return 1.0;
    const double lp = -z + s * std::log(z) - std::lgamma(s);
    if (z < s + 1) {
      double term = 1.0 / s, sum = term;
      for (int i = 1; i < 10000 && term > sum * 1e-15; ++i) sum += term *= z / (s + i);
      return 1.0 - sum * std::exp(lp);
    }
    double bb = z + 1 - s, c = 1e300, d = 1 / bb, h = d;
    for (int i = 1; i < 10000; ++i) {
      const double an = -i * (i - s);
      bb += 2;
      d = an * d + bb;
      c = bb + an / c;
      d = 1 / d;
      h *= d * c;
      if (std::fabs(d * c - 1) < 1e-15) break;
    }
    return std::exp(lp) * h;
  }

  static inline std::string* dir_ = nullptr;
  static inline Model* target_ = nullptr;
  static inline Model* draft_ = nullptr;
  static inline Tokenizer* tok_ = nullptr;
  static inline Backend* backend_ = nullptr;
};

TEST_F(SpeculativeSampling, JointLawOfTwoTokensEqualsPlainSampling) {
  constexpr int kRequests = 3000;
  const auto plain = joint(Method::kNone, 1.5f, kRequests);
  ASSERT_GE(plain.size(), 4u) << "the law must have several cells";
  for (Method m : {Method::kDraft, Method::kNgram}) {
    SCOPED_TRACE(speculative::method_name(m));
    const double p = homogeneity_p(joint(m, 1.5f, kRequests), plain);
    std::printf("%s: p = %.4g over %zu cells\n", speculative::method_name(m), p, plain.size());
    EXPECT_GT(p, 1e-3);
  }
  for (const auto rule : {speculative::CandidateRule::kStandard, speculative::CandidateRule::kResiSpec}) {
    SCOPED_TRACE(speculative::candidate_rule_name(rule));
    // Three i.i.d. chains per pass through the draft model, verified by the multi-candidate rule.
    const double p = homogeneity_p(joint(Method::kDraft, 1.5f, kRequests, 3, rule), plain);
    std::printf("draft x3 %s: p = %.4g over %zu cells\n", speculative::candidate_rule_name(rule), p, plain.size());
    EXPECT_GT(p, 1e-3);
  }
  const double control = homogeneity_p(joint(Method::kNone, 0.7f, kRequests), plain);
  std::printf("plain at temperature 0.7 against 1.5: p = %.4g\n", control);
  EXPECT_LT(control, 1e-6) << "the test can fail";
}

}  // namespace
}  // namespace frugal
