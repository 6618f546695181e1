// Speculative decoding through the engine on the committed models (models/default.gguf as the
// target, models/draft.gguf as its draft): greedy output is token for token that of plain decoding
// for both drafters on testbed prompts of every task family (plain and speculative requests share
// each batch), rejected drafts leave no trace in the paged KV cache or the draft's own cache, and
// bad drafts and impossible combinations are refused with a message naming what is wrong.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "frugal/backend/backend.h"
#include "frugal/decode/speculative/draft_model.h"
#include "frugal/decode/speculative/layer_skip.h"
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
    o.telemetry_period_s = 0;
    o.spec.method = m;
    o.spec.draft_model = draft_;
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

  static inline Model* target_ = nullptr;
  static inline Model* draft_ = nullptr;
  static inline Tokenizer* tok_ = nullptr;
  static inline Backend* backend_ = nullptr;
};

// 30 test-split prompts per family and drafter at lengths 192 and 256 (the trained length): 450
// prompts over the five families and three drafters, each decoded speculatively and plainly in the
// same engine (batches of 4 mixing both).
constexpr int kPromptsPerFamily = 30;

class GreedyIdentity : public SpeculativeEngine,
                       public ::testing::WithParamInterface<std::tuple<Method, std::string>> {};

TEST_P(GreedyIdentity, SpeculativeGreedyOutputIsPlainGreedyOutput) {
  const auto [method, family] = GetParam();
  auto e = engine(options(method));
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
  int64_t drafted = 0, accepted = 0, passes = 0;
  for (size_t i = 0; i < spec.size(); ++i) {
    const Output s = collect(*spec[i]);
    const Output p = collect(*plain[i]);
    ASSERT_EQ(s.fin.reason, p.fin.reason) << "prompt " << i;
    ASSERT_EQ(s.tokens, p.tokens) << "prompt " << i;
    EXPECT_EQ(s.fin.speculative.method, speculative::method_name(method));
    EXPECT_EQ(p.fin.speculative.passes, 0) << "the opted-out request speculated";
    EXPECT_EQ(s.fin.timings.decode_tokens, p.fin.timings.decode_tokens);
    drafted += s.fin.speculative.drafted;
    accepted += s.fin.speculative.accepted;
    passes += s.fin.speculative.passes;
  }
  // The drafters must really have been exercised, rejections included.
  EXPECT_GT(passes, 0);
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, drafted);
  std::printf("%s %s: %lld passes, %lld drafted, %lld accepted\n", speculative::method_name(method), family.c_str(),
              static_cast<long long>(passes), static_cast<long long>(drafted), static_cast<long long>(accepted));
}

std::vector<std::tuple<Method, std::string>> identity_cases() {
  std::vector<std::tuple<Method, std::string>> out;
  for (Method m : {Method::kDraft, Method::kNgram, Method::kLayerSkip}) {
    for (const auto& f : eval::task_family_names()) out.emplace_back(m, f);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Families, GreedyIdentity, ::testing::ValuesIn(identity_cases()),
                         [](const auto& info) {
                           return std::string(speculative::method_name(std::get<0>(info.param))) + "_" +
                                  std::get<1>(info.param);
                         });

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
  mask[1] = 1;
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
  EXPECT_EQ(std::count(chosen.begin(), chosen.end(), 1), 2);
  EXPECT_EQ(chosen.front(), 0);
  EXPECT_EQ(chosen.back(), 0);
  EXPECT_EQ(out[0].tokens.size(), 4u);
  EXPECT_FALSE(speculative::LayerSkipDrafter::create(*target_, static_cast<int32_t>(n_layer) - 1, 0, dc).ok());
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
