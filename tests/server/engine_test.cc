// The engine loop on a tiny random model: batched, chunked and prefix-cached runs must give the
// tokens the same request gets alone (generate(): a batch of one, on a Model and backend of its
// own), and admission, cancellation and limits must behave as documented. The independent oracle
// of that batch of one is llama.cpp and the float64 reference (tests/model).
#include "frugal/engine/engine.h"
#include "frugal/engine/generate.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "frugal/server/request_log.h"
#include "record_schema.h"
#include "test_model.h"

namespace frugal {
namespace {

using namespace std::chrono_literals;

struct Collected {
  std::string text;
  std::vector<TokenId> tokens;
  std::vector<TokenOutput> outputs;
  FinishedRequest fin;
};

Collected collect(RequestHandle& h) {
  Collected c;
  RequestUpdate u;
  for (int i = 0; i < 6000; ++i) {  // at most ~60 s
    if (!h.wait(u, 10ms)) continue;
    c.text += u.text;
    for (auto& t : u.tokens) {
      c.tokens.push_back(t.id);
      c.outputs.push_back(t);
    }
    if (u.done) {
      c.fin = u.finished;
      return c;
    }
  }
  ADD_FAILURE() << "request " << h.id() << " did not finish";
  return c;
}

// Waits (at most ~60 s) for the request's first update: its prompt has been computed.
::testing::AssertionResult first_update(RequestHandle& h, RequestUpdate& u) {
  for (int i = 0; i < 6000; ++i) {
    if (h.wait(u, 10ms)) return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "request " << h.id() << " produced nothing in 60 s";
}

// Engine statistics are published after each step; give the loop a moment.
template <typename F>
bool eventually(F cond) {
  for (int i = 0; i < 500; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return cond();
}

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = Model::load(testing::tiny_chat_model_path());
    ASSERT_TRUE(m.ok()) << m.status().message();
    model_ = std::move(m).value().release();
    // The reference runs on a Model and a backend of its own: each runs one batch at a time, and
    // the engine's loop may still be stepping when a reference starts.
    auto rm = Model::load(testing::tiny_chat_model_path());
    ASSERT_TRUE(rm.ok()) << rm.status().message();
    ref_model_ = std::move(rm).value().release();
    auto t = Tokenizer::from_gguf(model_->gguf());
    ASSERT_TRUE(t.ok()) << t.status().message();
    tok_ = std::move(t).value().release();
    backend_ = make_cpu_backend(CpuBackendOptions{2}).release();
    ref_backend_ = make_cpu_backend(CpuBackendOptions{2}).release();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(backend_->contended_dispatches(), 0u) << "the engine's backend was used by a second thread";
    delete ref_backend_;
    delete backend_;
    delete tok_;
    delete ref_model_;
    delete model_;
  }

  std::unique_ptr<Engine> engine(EngineOptions o = {}) {
    if (o.n_ctx == 0) o.n_ctx = 256;
    auto e = Engine::create(*model_, *tok_, *backend_, o);
    EXPECT_TRUE(e.ok()) << e.status().message();
    return e.ok() ? std::move(e).value() : nullptr;
  }

  std::vector<TokenId> prompt(const std::string& text) {
    auto r = tok_->encode(text);
    EXPECT_TRUE(r.ok());
    return *r;
  }

  // The reference: the request alone (generate()) with the same prompt and options.
  GenerateResult reference(const std::vector<TokenId>& p, int n, const SamplingParams& s = greedy(),
                           const KvPolicyOptions& kv = {}, bool ignore_eos = false) {
    GenerateOptions go;
    go.n_predict = n;
    go.n_ctx = 256;
    go.sampling = s;
    go.kv_policy = kv;
    go.ignore_eos = ignore_eos;
    auto r = generate(*ref_model_, *tok_, *ref_backend_, p, go);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return *r;
  }

  static SamplingParams greedy() {
    SamplingParams s;
    s.temperature = 0;
    return s;
  }

  static RequestOptions request(std::vector<TokenId> p, int max_tokens, SamplingParams s = greedy()) {
    RequestOptions r;
    r.prompt = std::move(p);
    r.max_tokens = max_tokens;
    r.sampling = s;
    return r;
  }

  static Model* model_;
  static Model* ref_model_;
  static Tokenizer* tok_;
  static Backend* backend_;
  static Backend* ref_backend_;
};
Model* EngineTest::model_ = nullptr;
Model* EngineTest::ref_model_ = nullptr;
Tokenizer* EngineTest::tok_ = nullptr;
Backend* EngineTest::backend_ = nullptr;
Backend* EngineTest::ref_backend_ = nullptr;

TEST_F(EngineTest, ConcurrentGreedyRequestsMatchGenerate) {
  const std::vector<std::string> texts = {"Once upon a time", "The quick brown fox jumps", "hello",
                                          "a b c d e f g h i j k l m n o p"};
  EngineOptions o;
  o.n_parallel = 4;
  auto e = engine(o);
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (const auto& t : texts) hs.push_back(*e->submit(request(prompt(t), 12)));
  for (size_t i = 0; i < texts.size(); ++i) {
    const Collected c = collect(*hs[i]);
    const GenerateResult ref = reference(prompt(texts[i]), 12);
    EXPECT_EQ(c.tokens, ref.tokens) << texts[i];
    EXPECT_EQ(c.text, ref.text) << texts[i];
    EXPECT_EQ(c.fin.generated_tokens, static_cast<int64_t>(ref.tokens.size()));
    EXPECT_EQ(c.fin.reason, ref.stop_reason == "eos" ? FinishReason::kEos : FinishReason::kLength);
  }
}

// Every eviction policy and KV quantization, chosen per request, in one batch beside a
// keep-everything request: each sequence gets the tokens it gets alone, with the same rounds.
TEST_F(EngineTest, EveryKvPolicyAndQuantizationPerRequestMatchesGenerate) {
  struct Case {
    std::string policy;
    KvQuant quant;
    bool protect;
  };
  const std::vector<Case> cases = {{"full", KvQuant::kNone, false},   {"window", KvQuant::kNone, false},
                                   {"random", KvQuant::kNone, true},  {"snapkv", KvQuant::kNone, false},
                                   {"h2o", KvQuant::kNone, false},    {"tova", KvQuant::kNone, true},
                                   {"rkv", KvQuant::kNone, false},    {"full", KvQuant::kInt8, false},
                                   {"full", KvQuant::kInt4, false},   {"full", KvQuant::kHyQuant, false},
                                   {"random", KvQuant::kInt4, false}, {"snapkv", KvQuant::kHyQuant, true},
                                   {"full", KvQuant::kHbq, false},    {"random", KvQuant::kHbq, false}};
  const auto p = prompt("Once upon a time there was a little red fox who");
  EngineOptions o;
  o.n_parallel = 4;  // fourteen requests and one more: they wait, join and leave the batch
  auto e = engine(o);
  std::vector<KvPolicyOptions> kvs;
  std::vector<std::shared_ptr<RequestHandle>> hs;
  auto plain = *e->submit(request(prompt("beside them"), 30));
  for (const Case& c : cases) {
    KvPolicyOptions kv;
    kv.policy = c.policy;
    kv.quant = c.quant;
    kv.protect_prompt = c.protect;
    if (c.policy != "full") {
      kv.budget = 20;
      kv.buffer = 6;
    }
    RequestOptions r = request(p, 60);
    r.kv = kv;
    r.ignore_eos = true;
    auto h = e->submit(r);
    ASSERT_TRUE(h.ok()) << c.policy << ": " << h.status().message();
    kvs.push_back(kv);
    hs.push_back(*h);
  }
  collect(*plain);
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string what = cases[i].policy + " " + kv_quant_name(cases[i].quant);
    const Collected c = collect(*hs[i]);
    const GenerateResult ref = reference(p, 60, greedy(), kvs[i], /*ignore_eos=*/true);
    EXPECT_EQ(c.tokens, ref.tokens) << what;
    EXPECT_EQ(c.text, ref.text) << what;
    EXPECT_EQ(c.fin.kv.rounds, ref.kv_eviction.rounds) << what;
    EXPECT_EQ(c.fin.kv_bytes, ref.kv_bytes) << what;
    if (cases[i].policy != "full") {
      EXPECT_GT(c.fin.kv.rounds, 0) << what;
      EXPECT_EQ(c.fin.kv.budget, 20) << what;
    }
  }
}

TEST_F(EngineTest, BadPerRequestKvPolicyIsRefusedAtSubmit) {
  auto e = engine();
  RequestOptions r = request(prompt("hello"), 4);
  r.kv = KvPolicyOptions{};
  r.kv->policy = "lru";
  auto bad = e->submit(r);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("lru"), std::string::npos) << bad.status().message();
  r.kv->policy = "random";
  r.kv->budget = 8;
  r.kv->buffer = 16;  // a budget must exceed the buffer
  auto small = e->submit(r);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().code(), ErrorCode::kInvalidArgument);
  // The engine keeps serving.
  const Collected c = collect(**e->submit(request(prompt("hello"), 4)));
  EXPECT_EQ(c.fin.reason == FinishReason::kEos || c.fin.reason == FinishReason::kLength, true);
}

TEST_F(EngineTest, ChunkedPrefillMatchesGenerate) {
  std::string long_text;
  for (int i = 0; i < 12; ++i) long_text += "word" + std::to_string(i) + " ";
  const auto p = prompt(long_text);
  ASSERT_GT(p.size(), 30u);
  EngineOptions o;
  o.n_parallel = 2;
  o.max_step_tokens = 7;
  auto e = engine(o);
  auto other = *e->submit(request(prompt("running beside it"), 20));
  const Collected c = collect(**e->submit(request(p, 10)));
  collect(*other);
  const GenerateResult ref = reference(p, 10);
  EXPECT_EQ(c.tokens, ref.tokens);
  EXPECT_EQ(c.fin.timings.prefill_tokens, static_cast<int64_t>(p.size()));
}

TEST_F(EngineTest, SeededSamplingIsReproducibleAloneOrBatched) {
  SamplingParams s;
  s.temperature = 1.0f;
  s.top_k = 0;
  s.top_p = 1.0f;
  s.min_p = 0;
  s.seed = 42;
  const auto p = prompt("seeded");
  auto e = engine();
  const Collected alone = collect(**e->submit(request(p, 16, s)));
  std::vector<std::shared_ptr<RequestHandle>> noise;
  for (int i = 0; i < 3; ++i) noise.push_back(*e->submit(request(prompt("noise " + std::to_string(i)), 16)));
  const Collected batched = collect(**e->submit(request(p, 16, s)));
  for (auto& h : noise) collect(*h);
  EXPECT_EQ(alone.tokens, batched.tokens);
  EXPECT_EQ(alone.fin.seed, 42u);
  EXPECT_EQ(alone.tokens, reference(p, 16, s).tokens);
  s.seed = 43;
  EXPECT_NE(collect(**e->submit(request(p, 16, s))).tokens, alone.tokens);
}

TEST_F(EngineTest, PrefixCacheReusesRowsAndKeepsOutput) {
  const auto p = prompt("the same prompt twice over");
  EngineOptions o;
  o.n_parallel = 1;
  auto e = engine(o);
  const Collected first = collect(**e->submit(request(p, 8)));
  const Collected second = collect(**e->submit(request(p, 8)));
  EXPECT_EQ(first.fin.timings.cached_tokens, 0);
  EXPECT_EQ(second.fin.timings.cached_tokens, static_cast<int64_t>(p.size()) - 1);
  EXPECT_EQ(second.fin.timings.prefill_tokens, 1);
  EXPECT_EQ(first.tokens, second.tokens);
  EXPECT_EQ(e->stats().prefix_hit_tokens, p.size() - 1);
}

TEST_F(EngineTest, CopiedPrefixGivesTheSameTokens) {
  std::string system;
  for (int i = 0; i < 10; ++i) system += "shared system words " + std::to_string(i) + " ";
  const auto a = prompt(system + "first question");
  const auto b = prompt(system + "second question");
  EngineOptions o;
  o.n_parallel = 2;
  auto e = engine(o);
  auto ha = *e->submit(request(a, 30));
  RequestUpdate u;
  ASSERT_TRUE(first_update(*ha, u));  // a has computed its prompt
  const Collected cb = collect(**e->submit(request(b, 6)));
  collect(*ha);
  EXPECT_GE(cb.fin.timings.cached_tokens, 16);
  EXPECT_EQ(cb.tokens, reference(b, 6).tokens);
}

TEST_F(EngineTest, CancelFreesTheSequence) {
  EngineOptions o;
  o.n_parallel = 1;
  auto e = engine(o);
  RequestOptions r = request(prompt("endless"), -1);
  r.ignore_eos = true;
  auto h = *e->submit(r);
  auto waiting = *e->submit(request(prompt("next"), 4));
  RequestUpdate u;
  ASSERT_TRUE(first_update(*h, u));
  EXPECT_TRUE(eventually([&] { return e->stats().running == 1 && e->stats().waiting == 1; }));
  h->cancel();
  const Collected c = collect(*h);
  EXPECT_EQ(c.fin.reason, FinishReason::kCancelled);
  const Collected next = collect(*waiting);
  EXPECT_NE(next.fin.reason, FinishReason::kError);
  EXPECT_TRUE(eventually([&] { return e->stats().running == 0 && e->stats().kv_rows_running == 0; }));
}

TEST_F(EngineTest, ContextFullEndsWithContext) {
  EngineOptions o;
  o.n_parallel = 1;
  o.n_ctx = 24;
  auto e = engine(o);
  RequestOptions r = request(prompt("fill"), -1);
  r.ignore_eos = true;
  const Collected c = collect(**e->submit(r));
  EXPECT_EQ(c.fin.reason, FinishReason::kContext);
  EXPECT_EQ(static_cast<int64_t>(r.prompt.size()) + c.fin.generated_tokens, 25);
}

TEST_F(EngineTest, QueueLimitAndBadRequestsAreRefused) {
  EngineOptions o;
  o.n_parallel = 1;
  o.max_waiting = 1;
  auto e = engine(o);
  RequestOptions r = request(prompt("long"), 200);
  r.ignore_eos = true;
  auto running = *e->submit(r);
  RequestUpdate u;
  ASSERT_TRUE(first_update(*running, u));
  auto queued = e->submit(request(prompt("queued"), 2));
  ASSERT_TRUE(queued.ok());
  auto refused = e->submit(request(prompt("refused"), 2));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::kOverBudget);
  running->cancel();
  collect(*running);
  collect(**queued);

  EXPECT_EQ(e->submit(request({}, 2)).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(e->submit(request(std::vector<TokenId>(300, 5), 2)).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(e->submit(request({1, 100000}, 2)).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(e->submit(request({1, 5}, 0)).status().code(), ErrorCode::kInvalidArgument);
  SamplingParams bad;
  bad.top_p = 2;
  EXPECT_EQ(e->submit(request({1, 5}, 2, bad)).status().code(), ErrorCode::kInvalidArgument);
}

// kv-memory is the size of the page pool all sequences share: one sequence alone may use all of it
// (in whole pages), and a budget below one page per (layer, KV head) is refused with the minimum.
TEST_F(EngineTest, KvMemoryIsThePoolSize) {
  const ModelConfig& c = model_->config();
  const uint64_t row = static_cast<uint64_t>(c.n_layer) * c.n_head_kv * c.head_dim * 2 * 2;  // f16 K and V
  EngineOptions o;
  o.n_parallel = 2;
  o.kv_memory = row * 80;  // 80 tokens of every head: pages of 32 tokens, two and a half per head
  auto e = engine(o);
  const int64_t heads = static_cast<int64_t>(c.n_layer) * c.n_head_kv;
  EXPECT_EQ(e->context_per_sequence(), 64);  // two whole pages in every head
  EXPECT_EQ(e->stats().kv_pages_total, heads * 80 / 32);
  EXPECT_EQ(e->stats().kv_bytes, static_cast<uint64_t>(e->stats().kv_pages_total) * (row / heads) * 32);
  EXPECT_LE(e->stats().kv_bytes, o.kv_memory);
  EXPECT_EQ(e->submit(request(std::vector<TokenId>(70, 5), 2)).status().code(), ErrorCode::kInvalidArgument);
  o.kv_memory = row * 16;
  auto tiny = Engine::create(*model_, *tok_, *backend_, o);
  ASSERT_EQ(tiny.status().code(), ErrorCode::kOverBudget);
  EXPECT_NE(tiny.status().message().find(fmt::format("minimum {} bytes", row * 32)), std::string::npos)
      << tiny.status().message();
}

// A scored policy records each sequence's newest `buffer` queries of every layer on the host: the
// engine reports those bytes (and the rounds' scratch) as memory beside the cache while the request
// runs, and nothing once it is gone; random records no queries.
TEST_F(EngineTest, KvSideBytesCountTheRecordedQueries) {
  const ModelConfig& c = model_->config();
  const uint64_t rings = static_cast<uint64_t>(c.n_layer) * 6 * c.n_head * c.head_dim * sizeof(float);
  uint64_t peak[2] = {0, 0};
  for (int which = 0; which < 2; ++which) {
    const char* policy = which == 0 ? "snapkv" : "random";
    EngineOptions o;
    o.n_parallel = 2;
    auto e = engine(o);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->stats().kv_side_bytes, 0u);
    KvPolicyOptions kv;
    kv.policy = policy;
    kv.budget = 20;
    kv.buffer = 6;
    RequestOptions r = request(prompt("Once upon a time there was a little red fox who"), 40);
    r.kv = kv;
    r.ignore_eos = true;
    auto h = e->submit(r);
    ASSERT_TRUE(h.ok()) << h.status().message();
    const Collected got = collect(**h);
    EXPECT_EQ(got.fin.reason, FinishReason::kLength) << policy;
    EXPECT_GT(got.fin.kv.rounds, 0) << policy;
    EXPECT_TRUE(eventually([&] { return e->stats().kv_side_bytes == 0; })) << policy << ": still "
                                                                            << e->stats().kv_side_bytes;
    peak[which] = e->stats().kv_side_bytes_peak;
  }
  EXPECT_GE(peak[0], rings) << "snapkv's query rings: " << c.n_layer << " layers x 6 queries x " << c.n_head
                            << " heads x " << c.head_dim;
  EXPECT_LT(peak[1], rings) << "random records no queries";
}

// With --kv-memory the pool pays for the scored policies' recorded queries too: each running
// sequence borrows pages for its rings (and rounds' scratch), so at every step the bytes beside the
// cache are within the pages lent and rows plus lent pages never pass the pool. More work than
// that holds still finishes (waiting, preempting), every lent page comes back, and a sequence whose
// rings cannot fit beside its prompt is refused at submission, saying why.
TEST_F(EngineTest, KvMemoryPaysForTheRecordedQueries) {
  const ModelConfig& c = model_->config();
  const int64_t heads = c.n_layer * c.n_head_kv;
  const uint64_t page = 32 * static_cast<uint64_t>(c.head_dim) * 2 * 2;  // f16 K and V, 32 tokens
  const uint64_t rings = static_cast<uint64_t>(c.n_layer) * 6 * (c.n_head * c.head_dim * 4 + 4);
  const int64_t ring_pages = static_cast<int64_t>((rings + page - 1) / page);
  KvPolicyOptions kv;
  kv.policy = "snapkv";
  kv.budget = 20;
  kv.buffer = 6;
  EngineOptions o;
  o.n_parallel = 4;
  o.prefix_cache = false;
  // Rows of two sequences (one page per head each: budget + buffer < 32) and the rings of two.
  o.kv_memory = static_cast<uint64_t>(2 * heads + 2 * ring_pages) * page;
  o.kv = kv;
  auto e = engine(o);
  ASSERT_NE(e, nullptr);
  const int64_t total = e->stats().kv_pages_total;
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (const char* t : {"Once upon a time", "The quick brown fox jumps", "hello there", "a b c d e f g h",
                        "one two three", "red green blue"}) {
    RequestOptions r = request(prompt(t), 40);
    r.ignore_eos = true;
    auto h = e->submit(r);
    ASSERT_TRUE(h.ok()) << h.status().message();
    hs.push_back(*h);
  }
  uint64_t worst_side = 0;
  int64_t worst_lent = 0;
  bool side_within_lent = true;
  for (int i = 0; i < 6000 && e->stats().generated_tokens < 6 * 40; ++i) {
    const EngineStats s = e->stats();
    side_within_lent = side_within_lent && s.kv_side_bytes <= static_cast<uint64_t>(s.kv_pages_lent) * page;
    worst_side = std::max(worst_side, s.kv_side_bytes);
    worst_lent = std::max(worst_lent, s.kv_pages_lent);
    std::this_thread::sleep_for(1ms);
  }
  for (auto& h : hs) {
    const Collected got = collect(*h);
    EXPECT_EQ(got.fin.reason, FinishReason::kLength) << got.fin.error.message();
    EXPECT_EQ(got.fin.generated_tokens, 40);
    EXPECT_GT(got.fin.kv.rounds, 0);
  }
  EXPECT_TRUE(side_within_lent) << "bytes beside the cache passed the pages lent for them";
  const EngineStats s = e->stats();
  EXPECT_GE(s.kv_pages_lent_peak, ring_pages) << "each running sequence borrows its rings' pages";
  EXPECT_LE(s.kv_pages_lent_peak, total);
  EXPECT_LE(s.kv_pages_used_peak, total);
  EXPECT_GT(s.kv_side_bytes_peak, 0u);
  EXPECT_LE(worst_side, static_cast<uint64_t>(std::max(worst_lent, s.kv_pages_lent_peak)) * page);
  EXPECT_TRUE(eventually([&] { return e->stats().kv_pages_lent == 0 && e->stats().kv_side_bytes == 0; }))
      << e->stats().kv_pages_lent << " pages still lent";

  // Rings larger than the pool less the prompt's pages: refused when submitted.
  kv.buffer = 64;
  kv.budget = 100;
  RequestOptions big = request(prompt("Once upon a time"), 40);
  big.kv = kv;
  auto refused = e->submit(big);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::kOverBudget);
  EXPECT_NE(refused.status().message().find("records the newest 64 queries"), std::string::npos)
      << refused.status().message();

  // Without a budget nothing is lent: the policy's state is reported beside the cache only.
  EngineOptions free_pool = o;
  free_pool.kv_memory = 0;
  auto f = engine(free_pool);
  RequestOptions r = request(prompt("Once upon a time"), 40);
  r.ignore_eos = true;
  const Collected got = collect(**f->submit(r));
  EXPECT_EQ(got.fin.reason, FinishReason::kLength);
  EXPECT_EQ(f->stats().kv_pages_lent_peak, 0);
  EXPECT_GT(f->stats().kv_side_bytes_peak, 0u);
}

// Four times more work than the pool holds: every request finishes with the tokens it gets alone,
// sequences wait for pages or are preempted and recomputed, and every page comes back.
TEST_F(EngineTest, OversubscribedPoolFinishesEveryRequestExactly) {
  const ModelConfig& c = model_->config();
  const uint64_t row = static_cast<uint64_t>(c.n_layer) * c.n_head_kv * c.head_dim * 2 * 2;
  EngineOptions o;
  o.n_parallel = 4;
  o.prefix_cache = false;
  o.kv_memory = row * 128;  // four pages per head; each request below grows to three
  auto e = engine(o);
  const std::vector<std::string> texts = {"Once upon a time", "The quick brown fox jumps", "hello there",
                                          "a b c d e f g h", "one two three", "red green blue",
                                          "the end of the story", "it was a dark night"};
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (const auto& t : texts) {
    RequestOptions r = request(prompt(t), 60);
    r.ignore_eos = true;
    hs.push_back(*e->submit(r));
  }
  uint64_t peak_bytes = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const Collected got = collect(*hs[i]);
    const GenerateResult ref = reference(prompt(texts[i]), 60, greedy(), {}, /*ignore_eos=*/true);
    EXPECT_EQ(got.tokens, ref.tokens) << texts[i];
    EXPECT_EQ(got.fin.reason, FinishReason::kLength) << texts[i];
    peak_bytes = std::max(peak_bytes, got.fin.kv_bytes);
  }
  EXPECT_LE(peak_bytes, row * 128);
  EXPECT_TRUE(eventually([&] { return e->stats().kv_pages_free == e->stats().kv_pages_total; }));
  EXPECT_GT(e->stats().preemptions, 0u) << "the pool never ran out: the test does not oversubscribe it";
}

TEST_F(EngineTest, JsonSchemaConstrainsTheOutput) {
  auto schema = JsonSchema::compile(nlohmann::ordered_json::parse(
      R"({"type": "object", "properties": {"ok": {"type": "boolean"}, "color": {"enum": ["red", "green"]},
          "n": {"type": "integer"}}, "required": ["ok", "color", "n"]})"));
  ASSERT_TRUE(schema.ok());
  auto e = engine();
  RequestOptions r = request(prompt("answer in JSON"), 120);
  r.json_schema = *schema;
  const Collected c = collect(**e->submit(r));
  ASSERT_EQ(c.fin.reason, FinishReason::kEos) << c.text;
  const auto j = nlohmann::json::parse(c.text, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << c.text;
  EXPECT_TRUE(j["ok"].is_boolean());
  EXPECT_TRUE(j["color"] == "red" || j["color"] == "green") << c.text;
  EXPECT_TRUE(j["n"].is_number_integer()) << c.text;
}

// With batch_invariant every token is computed as in a pass of its own, so a request's
// log-probabilities are bit for bit the same alone and batched with other requests' prefills and
// decodes (without it the products switch to batched kernels whose rounding depends on the step's
// size, and which requests share a step depends on timing).
TEST_F(EngineTest, BatchInvariantLogprobsDoNotDependOnTheBatch) {
  EngineOptions o;
  o.n_parallel = 4;
  o.max_step_tokens = 64;
  o.batch_invariant = true;
  auto e = engine(o);
  RequestOptions r = request(prompt("the same request, alone and in company"), 12);
  r.ignore_eos = true;
  r.logprobs = 1;
  const Collected alone = collect(**e->submit(r));
  std::vector<std::shared_ptr<RequestHandle>> others;
  for (int i = 0; i < 3; ++i) {
    std::string text;
    for (int w = 0; w < 40 + 7 * i; ++w) text += "word" + std::to_string((w * 7 + i) % 13) + " ";
    RequestOptions other = request(prompt(text), 20);
    other.ignore_eos = true;
    others.push_back(*e->submit(other));
  }
  const Collected batched = collect(**e->submit(r));
  for (auto& h : others) collect(*h);
  ASSERT_EQ(alone.tokens, batched.tokens);
  ASSERT_EQ(alone.outputs.size(), batched.outputs.size());
  for (size_t i = 0; i < alone.outputs.size(); ++i) {
    EXPECT_EQ(alone.outputs[i].logprob, batched.outputs[i].logprob) << "token " << i;
  }
}

TEST_F(EngineTest, LogprobsAndStopStrings) {
  auto e = engine();
  RequestOptions r = request(prompt("logprobs please"), 6);
  r.logprobs = 3;
  const Collected c = collect(**e->submit(r));
  ASSERT_EQ(c.outputs.size(), c.tokens.size());
  for (const auto& t : c.outputs) {
    ASSERT_EQ(t.top.size(), 3u);
    EXPECT_EQ(t.top[0].id, t.id);  // greedy picks the most likely token
    EXPECT_FLOAT_EQ(t.top[0].logprob, t.logprob);
    EXPECT_GE(t.top[0].logprob, t.top[1].logprob);
    EXPECT_LE(t.logprob, 0.0f);
  }
  // A stop string taken from the greedy text ends the output just before it.
  const GenerateResult ref = reference(prompt("logprobs please"), 12);
  ASSERT_GE(ref.text.size(), 4u);
  const std::string stop = ref.text.substr(ref.text.size() / 2, 2);
  RequestOptions s = request(prompt("logprobs please"), 12);
  s.stop = {stop};
  const Collected cs = collect(**e->submit(s));
  EXPECT_EQ(cs.fin.reason, FinishReason::kStop);
  EXPECT_EQ(cs.fin.stop_string, stop);
  EXPECT_EQ(cs.text, ref.text.substr(0, ref.text.find(stop)));
}

// serve's record: what `--log-requests` writes for a request this engine ran, against the schema
// run, bench and eval records are checked with (tests/cli/record_schema_test.cc).
TEST_F(EngineTest, RequestLogRecordMatchesTheRecordSchema) {
  auto e = engine();
  const auto p = prompt("a record");
  const Collected c = collect(**e->submit(request(p, 4)));
  const nlohmann::json rec = nlohmann::json::parse(server::RequestLog::record(c.fin, "tiny").dump())["timings"];
  const auto schema = schema_check::MiniSchema::load(std::string(FRUGAL_SOURCE_DIR) + "/docs/record.schema.json");
  EXPECT_EQ(schema.validate(rec), "") << rec.dump(1);
  EXPECT_EQ(rec["energy_meter"], e->energy_meter());
  const auto& work = rec["phases"]["prefill"]["work"];
  EXPECT_GT(work["weight_bytes_read"].get<double>(), 0);
  EXPECT_GT(rec["phases"]["prefill"]["hardware"]["samples"].get<int>(), 0);  // the edges are sampled
  for (const char* phase : {"prefill", "decode"}) {
    if (rec["phases"][phase]["energy"]["source"] == "unavailable") {
      EXPECT_TRUE(rec["phases"][phase]["energy"]["joules"].is_null());
    }
  }
}

TEST_F(EngineTest, TimingsAddUp) {
  auto e = engine();
  const auto p = prompt("timings");
  const Collected c = collect(**e->submit(request(p, 5)));
  const RequestTimings& t = c.fin.timings;
  EXPECT_GE(t.queue_ms, 0);
  EXPECT_GT(t.ttft_ms, 0);
  EXPECT_GE(t.total_ms, t.ttft_ms);
  EXPECT_EQ(t.prefill_tokens, static_cast<int64_t>(p.size()));
  if (c.fin.reason == FinishReason::kLength) {
    EXPECT_EQ(t.decode_tokens, 4);
    EXPECT_NEAR(t.tpot_ms, t.decode_ms / 4, 1e-9);
  }
}

}  // namespace
}  // namespace frugal
