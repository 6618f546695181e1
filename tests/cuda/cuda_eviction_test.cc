// KV eviction on the CUDA backend's device-resident cache: the token store a backend exposes
// (Backend::device_kv) keeps exactly the rows and positions a round asks for, in every head
// separately, composes two rounds before a step, refuses malformed keeps and uneven heads with a
// named error; the engine's window and random policies decode on the GPU the tokens they decode
// on the CPU (the same tokens kept, the same greedy choices); the queries a GPU pass copies back for
// the scored policies are the CPU pass's, the ones it keeps in rings on the device give the
// statistics of those copies, the statistics are computed on the device as the host computes them,
// and those policies decode there. Every test skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda/gpu_skip.h"
#include "frugal/backend/cuda/cuda_backend.h"
#include "frugal/engine/engine.h"
#include "frugal/eval/task.h"
#include "frugal/kv/attention_probs.h"
#include "frugal/kv/round_stats.h"
#include "frugal/kv/token_store.h"
#include "frugal/model/model.h"
#include "frugal/tokenize/tokenizer.h"

namespace frugal {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string default_model() { return std::string(FRUGAL_SOURCE_DIR) + "/models/default.gguf"; }

// Rows of every head of sequence `seq`: [layer][head] -> [size][head_dim] K then V.
struct HeadRows {
  std::vector<int32_t> pos;
  std::vector<float> k, v;
};
std::vector<HeadRows> read_all(KvTokenStore& st, int seq) {
  const KvStoreShape sh = st.store_shape();
  std::vector<HeadRows> out;
  for (int l = 0; l < sh.n_layer; ++l) {
    for (int h = 0; h < sh.n_head_kv; ++h) {
      HeadRows r;
      const int32_t n = st.size(l, seq, h);
      r.pos.assign(st.positions(l, seq, h), st.positions(l, seq, h) + n);
      r.k.resize(static_cast<size_t>(n) * sh.head_dim);
      r.v.resize(r.k.size());
      st.read_rows(l, seq, h, r.k.data(), r.v.data());
      out.push_back(std::move(r));
    }
  }
  return out;
}

std::vector<int32_t> random_subset(int32_t n, int32_t keep, std::mt19937& rng) {
  std::vector<int32_t> all(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) all[static_cast<size_t>(i)] = i;
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(static_cast<size_t>(keep));
  std::sort(all.begin(), all.end());
  return all;
}

// The default model on the GPU with a cache of two sequences of 64 tokens and the backend's device
// store for it: what the store tests start from (call through ASSERT_NO_FATAL_FAILURE).
struct DeviceStore {
  std::unique_ptr<Model> model;
  std::unique_ptr<Backend> gpu;
  KvCache kv;
  KvTokenStore* store = nullptr;
};
void open_device_store(DeviceStore& d) {
  auto model = Model::load(default_model());
  ASSERT_TRUE(model.ok()) << model.status().message();
  d.model = std::move(*model);
  auto gpu = make_cuda_backend();
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  d.gpu = std::move(*gpu);
  auto kv = KvCache::create(d.model->kv_options(2, 64));
  ASSERT_TRUE(kv.ok());
  d.kv = std::move(*kv);
  auto store = d.gpu->device_kv(*d.model, d.kv.options());
  ASSERT_TRUE(store.ok()) << store.status().message();
  d.store = *store;
}

TEST(CudaEviction, DeviceStoreKeepsExactlyTheChosenRowsPerHead) {
  SKIP_WITHOUT_GPU();
  if (!fs::exists(default_model())) GTEST_SKIP() << default_model() << " not present";
  DeviceStore d;
  ASSERT_NO_FATAL_FAILURE(open_device_store(d));
  Model& m = *d.model;
  Backend& gpu = *d.gpu;
  KvCache& kv = d.kv;
  KvTokenStore& st = *d.store;
  const KvStoreShape sh = st.store_shape();
  ASSERT_EQ(sh.n_layer, m.config().n_layer);
  ASSERT_EQ(sh.n_seq, 2);

  // Two sequences of 40 tokens (every head holds positions 0..39).
  const int64_t nv = m.config().n_vocab;
  Batch b;
  for (int s = 0; s < 2; ++s) {
    for (int i = 0; i < 40; ++i) b.add(static_cast<TokenId>((7 * i + 13 * s + 3) % nv), i, s, i == 39);
  }
  std::vector<float> logits(static_cast<size_t>(2 * nv));
  ASSERT_TRUE(m.forward(b, kv, gpu, logits.data()).ok());
  const std::vector<HeadRows> before0 = read_all(st, 0), before1 = read_all(st, 1);
  for (const HeadRows& r : before1) {
    ASSERT_EQ(r.pos.size(), 40u);
    for (int i = 0; i < 40; ++i) ASSERT_EQ(r.pos[static_cast<size_t>(i)], i);
  }

  // Two rounds before the next step, a different subset in every head: 40 -> 25 -> 20.
  std::mt19937 rng(std::random_device{}());
  std::vector<std::vector<int32_t>> expect(before1.size());
  for (int l = 0; l < sh.n_layer; ++l) {
    for (int h = 0; h < sh.n_head_kv; ++h) {
      const size_t idx = static_cast<size_t>(l) * sh.n_head_kv + h;
      const auto first = random_subset(40, 25, rng), second = random_subset(25, 20, rng);
      ASSERT_TRUE(st.keep_tokens(l, 1, h, first).ok());
      ASSERT_TRUE(st.keep_tokens(l, 1, h, second).ok());
      for (int32_t j : second) expect[idx].push_back(first[static_cast<size_t>(j)]);
      ASSERT_EQ(st.size(l, 1, h), 20);
    }
  }
  const std::vector<HeadRows> after1 = read_all(st, 1), after0 = read_all(st, 0);
  for (size_t idx = 0; idx < after1.size(); ++idx) {
    for (size_t i = 0; i < expect[idx].size(); ++i) {
      const auto src = static_cast<size_t>(expect[idx][i]);
      ASSERT_EQ(after1[idx].pos[i], before1[idx].pos[src]) << "head " << idx << " slot " << i;
      const size_t d = static_cast<size_t>(sh.head_dim);
      for (size_t e = 0; e < d; ++e) {
        ASSERT_EQ(after1[idx].k[i * d + e], before1[idx].k[src * d + e]) << "head " << idx << " slot " << i;
        ASSERT_EQ(after1[idx].v[i * d + e], before1[idx].v[src * d + e]) << "head " << idx << " slot " << i;
      }
    }
  }
  // The other sequence is untouched.
  for (size_t idx = 0; idx < after0.size(); ++idx) {
    EXPECT_EQ(after0[idx].pos, before0[idx].pos);
    EXPECT_EQ(after0[idx].k, before0[idx].k);
  }
  EXPECT_EQ(st.used_bytes(1), static_cast<uint64_t>(20) * sh.n_layer * sh.n_head_kv * sh.head_dim * 4);

  // A decode step after the rounds appends position 40 behind the 20 kept rows of every head, and
  // its logits are finite.
  b.clear();
  b.add(5, 40, 1, true);
  std::vector<float> one(static_cast<size_t>(nv));
  ASSERT_TRUE(m.forward(b, kv, gpu, one.data()).ok());
  for (float x : one) ASSERT_TRUE(std::isfinite(x));
  const std::vector<HeadRows> grown = read_all(st, 1);
  for (size_t idx = 0; idx < grown.size(); ++idx) {
    ASSERT_EQ(grown[idx].pos.size(), 21u);
    EXPECT_EQ(grown[idx].pos.back(), 40);
    EXPECT_EQ(std::vector<int32_t>(grown[idx].pos.begin(), grown[idx].pos.end() - 1), after1[idx].pos);
  }

  // Malformed keeps are refused and change nothing.
  EXPECT_EQ(st.keep_tokens(0, 1, 0, {3, 2}).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(st.keep_tokens(0, 1, 0, {0, 21}).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(st.keep_tokens(sh.n_layer, 1, 0, {0}).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(st.size(0, 1, 0), 21);
  // Heads cut unevenly: the next step names it instead of running on a wrong slot count.
  ASSERT_TRUE(st.keep_tokens(0, 1, 0, {0, 1, 2}).ok());
  b.clear();
  b.add(6, 41, 1, true);
  const Status uneven = m.forward(b, kv, gpu, one.data());
  EXPECT_EQ(uneven.code(), ErrorCode::kInvalidArgument) << uneven.message();
  // A new request in the slot starts clean.
  b.clear();
  for (int i = 0; i < 5; ++i) b.add(static_cast<TokenId>(i + 3), i, 1, i == 4);
  ASSERT_TRUE(m.forward(b, kv, gpu, one.data()).ok());
  EXPECT_EQ(st.size(sh.n_layer - 1, 1, sh.n_head_kv - 1), 5);
}

// The engine on the GPU with per-request window and random policies gives the tokens it gives on
// the CPU: the same rounds keep the same tokens on either backend, and the greedy choices agree
// (as GreedyMatchesCpuDefaultModel shows for a full cache).
TEST(CudaEviction, EnginePoliciesDecodeAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  if (!fs::exists(default_model())) GTEST_SKIP() << default_model() << " not present";
  ModelLoadOptions lo;
  auto gmodel = Model::load(default_model());
  lo.cpu_layouts = true;
  auto cmodel = Model::load(default_model(), lo);
  ASSERT_TRUE(gmodel.ok() && cmodel.ok());
  auto tok = Tokenizer::from_gguf((*cmodel)->gguf());
  ASSERT_TRUE(tok.ok());
  auto gpu = make_cuda_backend();
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  auto cpu = make_cpu_backend(CpuBackendOptions{0});
  EngineOptions o;
  o.n_parallel = 4;
  o.n_ctx = 1024;
  o.max_waiting = 100;
  o.telemetry_period_s = 0;
  auto ge = Engine::create(**gmodel, **tok, **gpu, o);
  auto ce = Engine::create(**cmodel, **tok, *cpu, o);
  ASSERT_TRUE(ge.ok()) << ge.status().message();
  ASSERT_TRUE(ce.ok()) << ce.status().message();
  struct Req {
    std::shared_ptr<RequestHandle> g, c;
    std::string what;
  };
  std::vector<Req> reqs;
  int64_t rounds = 0;
  for (const char* policy : {"window", "random", "full"}) {
    for (int i = 0; i < 6; ++i) {
      eval::TaskOptions to;
      to.length = 256;
      const std::string family = eval::task_family_names()[static_cast<size_t>(i) % eval::task_family_names().size()];
      auto ex = eval::generate_task(family, eval::TaskSplit::kTest, 900 + static_cast<uint64_t>(i), to);
      ASSERT_TRUE(ex.ok());
      auto prompt = (*tok)->encode(ex->prompt);
      ASSERT_TRUE(prompt.ok());
      RequestOptions r;
      r.prompt = *prompt;
      r.sampling.temperature = 0;
      r.max_tokens = 96;
      r.ignore_eos = true;  // long enough for several rounds
      KvPolicyOptions kv;
      kv.policy = policy;
      if (kv.policy != "full") {
        kv.budget = 96;  // below the prompt: the first round thins the prompt too
        kv.buffer = 16;
        kv.seed = 11;
      }
      r.kv = kv;
      auto g = (*ge)->submit(r);
      auto c = (*ce)->submit(r);
      ASSERT_TRUE(g.ok()) << g.status().message();
      ASSERT_TRUE(c.ok()) << c.status().message();
      reqs.push_back({*g, *c, std::string(policy) + " " + family});
    }
  }
  const auto collect = [](RequestHandle& h, std::vector<TokenId>& toks) {
    RequestUpdate u;
    for (int i = 0; i < 12000; ++i) {
      if (!h.wait(u, 10ms)) continue;
      for (const auto& t : u.tokens) toks.push_back(t.id);
      if (u.done) return u.finished;
    }
    ADD_FAILURE() << "request " << h.id() << " did not finish";
    return FinishedRequest{};
  };
  for (Req& r : reqs) {
    std::vector<TokenId> gt, ct;
    const FinishedRequest gf = collect(*r.g, gt), cf = collect(*r.c, ct);
    EXPECT_EQ(gf.reason, cf.reason) << r.what;
    EXPECT_EQ(gt, ct) << r.what;
    EXPECT_EQ(gf.kv.rounds, cf.kv.rounds) << r.what;
    rounds += gf.kv.rounds;
  }
  EXPECT_GT(rounds, 0) << "no eviction round ran";
  std::printf("%zu requests, %lld eviction rounds on the GPU\n", reqs.size(), static_cast<long long>(rounds));
}

// The default model, its tokenizer and a CUDA backend: what the engine tests start from (call
// through ASSERT_NO_FATAL_FAILURE).
struct GpuEngineParts {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<Backend> gpu;
};
void open_gpu_engine_parts(GpuEngineParts& p) {
  auto model = Model::load(default_model());
  ASSERT_TRUE(model.ok()) << model.status().message();
  p.model = std::move(*model);
  auto tok = Tokenizer::from_gguf(p.model->gguf());
  ASSERT_TRUE(tok.ok());
  p.tok = std::move(*tok);
  auto gpu = make_cuda_backend();
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  p.gpu = std::move(*gpu);
}

// KV quantization is refused on the GPU with a message naming it, per request and as the engine's
// default; every policy is accepted.
TEST(CudaEviction, QuantizedCacheIsRefusedEveryPolicyAccepted) {
  SKIP_WITHOUT_GPU();
  if (!fs::exists(default_model())) GTEST_SKIP() << default_model() << " not present";
  GpuEngineParts parts;
  ASSERT_NO_FATAL_FAILURE(open_gpu_engine_parts(parts));
  EngineOptions o;
  o.n_parallel = 1;
  o.n_ctx = 256;
  o.telemetry_period_s = 0;
  auto e = Engine::create(*parts.model, *parts.tok, *parts.gpu, o);
  ASSERT_TRUE(e.ok()) << e.status().message();
  for (const char* p : {"window", "random", "snapkv", "h2o", "tova", "rkv"}) {
    RequestOptions r;
    r.prompt = {1, 5, 9};
    r.max_tokens = 4;
    KvPolicyOptions kv;
    kv.policy = p;
    kv.budget = 100;
    r.kv = kv;
    auto h = (*e)->submit(r);
    EXPECT_TRUE(h.ok()) << p << ": " << h.status().message();
  }
  RequestOptions r;
  r.prompt = {1, 5, 9};
  r.max_tokens = 4;
  KvPolicyOptions kv;
  kv.policy = "snapkv";
  kv.budget = 100;
  kv.quant = KvQuant::kInt8;
  r.kv = kv;
  auto h = (*e)->submit(r);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), ErrorCode::kNotSupported);
  EXPECT_NE(h.status().message().find("int8"), std::string::npos) << h.status().message();
  o.kv.policy = "h2o";
  o.kv.budget = 100;
  o.kv.quant = KvQuant::kInt4;
  EXPECT_EQ(Engine::create(*parts.model, *parts.tok, *parts.gpu, o).status().code(), ErrorCode::kNotSupported);
}

// A server's memory budget on the GPU sets how many sequences run at once, each with the whole
// context (the device reserves a slot's context up front): a budget of three and a half slots at
// parallel 8 gives three slots of 256 tokens; eight requests of 200 tokens all finish at their
// length, at most three running at a time, the others waiting (two of them evicting). A budget
// below one slot shrinks the context over the slots asked for instead, or is refused when it
// cannot give each of them one page.
TEST(CudaEviction, KvMemorySetsTheSlotsAtTheFullContext) {
  SKIP_WITHOUT_GPU();
  if (!fs::exists(default_model())) GTEST_SKIP() << default_model() << " not present";
  GpuEngineParts parts;
  ASSERT_NO_FATAL_FAILURE(open_gpu_engine_parts(parts));
  EngineOptions o;
  o.n_parallel = 8;
  o.n_ctx = 256;
  o.max_waiting = 100;
  o.telemetry_period_s = 0;
  const uint64_t one = kv_reserved_bytes(parts.model->kv_options(1, 256, o.kv_dtype));
  o.kv_memory = kv_reserved_bytes(parts.model->kv_options(3, 256, o.kv_dtype)) + one / 2;
  {
    auto e = Engine::create(*parts.model, *parts.tok, *parts.gpu, o);
    ASSERT_TRUE(e.ok()) << e.status().message();
    const EngineStats st = (*e)->stats();
    EXPECT_EQ(st.n_slots, 3);
    EXPECT_EQ(st.slot_capacity, 256);
    EXPECT_LE(st.kv_bytes, o.kv_memory);
    std::vector<std::shared_ptr<RequestHandle>> hs;
    for (int i = 0; i < 8; ++i) {
      RequestOptions r;
      r.prompt = {1, static_cast<TokenId>(5 + i), 9};
      r.max_tokens = 200;
      r.ignore_eos = true;
      r.sampling.temperature = 0;
      if (i % 4 == 1) {
        KvPolicyOptions kv;
        kv.policy = "random";
        kv.budget = 64;
        kv.buffer = 16;
        r.kv = kv;
      }
      auto h = (*e)->submit(r);
      ASSERT_TRUE(h.ok()) << h.status().message();
      hs.push_back(*h);
    }
    int most_running = 0, most_waiting = 0;
    int64_t rounds = 0;
    for (auto& h : hs) {
      RequestUpdate u;
      int64_t n = 0;
      bool done = false;
      for (int i = 0; i < 12000 && !done; ++i) {
        const EngineStats now = (*e)->stats();
        most_running = std::max(most_running, now.running);
        most_waiting = std::max(most_waiting, now.waiting);
        if (!h->wait(u, 10ms)) continue;
        n += static_cast<int64_t>(u.tokens.size());
        if (u.done) {
          done = true;
          EXPECT_EQ(u.finished.reason, FinishReason::kLength) << "request " << h->id();
          rounds += u.finished.kv.rounds;
        }
      }
      EXPECT_TRUE(done) << "request " << h->id() << " did not finish";
      EXPECT_EQ(n, 200) << "request " << h->id();
    }
    EXPECT_LE(most_running, 3);
    EXPECT_GT(most_waiting, 0);
    EXPECT_GT(rounds, 0);
    std::printf("kv-memory of 3.5 slots at parallel 8: %d slots of %d tokens, at most %d running and %d waiting, "
                "%lld eviction rounds\n",
                st.n_slots, st.slot_capacity, most_running, most_waiting, static_cast<long long>(rounds));
  }
  // Below one full slot at parallel 2: two slots of what the budget holds (whole pages of 32
  // tokens). At parallel 8 the same budget cannot give each slot one page: refused, by name.
  o.kv_memory = one * 9 / 10;
  auto refused = Engine::create(*parts.model, *parts.tok, *parts.gpu, o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("raise --kv-memory or lower --parallel"), std::string::npos)
      << refused.status().message();
  o.n_parallel = 2;
  auto small = Engine::create(*parts.model, *parts.tok, *parts.gpu, o);
  ASSERT_TRUE(small.ok()) << small.status().message();
  EXPECT_EQ((*small)->stats().n_slots, 2);
  EXPECT_LT((*small)->stats().slot_capacity, 256);
  EXPECT_GE((*small)->stats().slot_capacity, 16);
  EXPECT_LE((*small)->stats().kv_bytes, o.kv_memory);
}

// Records what the model hands an attention observer.
class Recorder final : public AttentionObserver {
 public:
  explicit Recorder(int32_t recent) : recent_(recent) {}
  struct Call {
    int layer;
    std::vector<int32_t> seq, pos;
    std::vector<float> q;
  };
  void before_attention(int layer, const int32_t* seq, const int32_t* pos, int64_t n, const float* q,
                        const AttentionParams& p) override {
    Call c{layer, {seq, seq + n}, {pos, pos + n}, {}};
    if (q != nullptr) c.q.assign(q, q + n * p.n_head * p.head_dim);
    null_q += q == nullptr ? 1 : 0;
    calls.push_back(std::move(c));
    params = p;
  }
  void after_attention(KvCache&, int, const int32_t*, int64_t) override { ++after; }
  int32_t recent_queries() const override { return recent_; }
  void set_recent(int32_t recent) { recent_ = recent; }
  std::vector<Call> calls;
  AttentionParams params;
  int after = 0;
  int null_q = 0;  // calls whose queries stayed on the device

 private:
  int32_t recent_;
};

// A pass on the GPU with an observer copies back the post-RoPE queries of each sequence's newest
// `recent_queries()` rows of the step, and the observer sees them layer by layer with their
// sequences and positions: the rows the CPU's op-by-op pass shows it (there: every row), within the
// rounding of the GPU's F16 prefill products (rel_l2 per layer below 1e-2; a wrong row, layer or
// an unrotated query is off by far more). With the queries kept on the device (the default), the
// test after this one.
TEST(CudaEviction, ObserverGetsTheQueriesOfTheCpuPass) {
  SKIP_WITHOUT_GPU();
  if (!fs::exists(default_model())) GTEST_SKIP() << default_model() << " not present";
  ModelLoadOptions lo;
  lo.cpu_layouts = true;
  auto gmodel = Model::load(default_model());
  auto cmodel = Model::load(default_model(), lo);
  ASSERT_TRUE(gmodel.ok() && cmodel.ok());
  CudaBackendOptions go;
  go.query_ring = false;
  auto gpu = make_cuda_backend(go);
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  auto cpu = make_cpu_backend(CpuBackendOptions{0});
  const Model& m = **cmodel;
  const int64_t nv = m.config().n_vocab;
  auto kv_g = KvCache::create(m.kv_options(2, 128));
  auto kv_c = KvCache::create(m.kv_options(2, 128));
  ASSERT_TRUE(kv_g.ok() && kv_c.ok());
  for (int step = 0; step < 2; ++step) {
    Batch b;
    // Step 0: prefill runs of 20 and 5 tokens; step 1: one token of each.
    const int n0 = step == 0 ? 20 : 1, n1 = step == 0 ? 5 : 1, p0 = step == 0 ? 0 : 20, p1 = step == 0 ? 0 : 5;
    for (int i = 0; i < n0; ++i) b.add(static_cast<TokenId>((7 * i + 3) % nv), p0 + i, 0, i + 1 == n0);
    for (int i = 0; i < n1; ++i) b.add(static_cast<TokenId>((11 * i + 5) % nv), p1 + i, 1, i + 1 == n1);
    Recorder rg(8), rc(8);
    std::vector<float> lg(static_cast<size_t>(2 * nv)), lc(lg.size());
    ASSERT_TRUE((*gmodel)->forward(b, *kv_g, **gpu, lg.data(), &rg).ok());
    ASSERT_TRUE((*cmodel)->forward(b, *kv_c, *cpu, lc.data(), &rc).ok());
    ASSERT_EQ(rg.calls.size(), static_cast<size_t>(m.config().n_layer));
    ASSERT_EQ(rc.calls.size(), rg.calls.size());
    EXPECT_EQ(rg.after, m.config().n_layer);
    const size_t row = static_cast<size_t>(rg.params.n_head) * rg.params.head_dim;
    EXPECT_EQ(rg.params.n_head, rc.params.n_head);
    EXPECT_EQ(rg.params.head_dim, rc.params.head_dim);
    // The rows the GPU copies: the newest 8 of sequence 0, every one of sequence 1.
    std::vector<size_t> want_rows;
    for (int i = std::max(0, n0 - 8); i < n0; ++i) want_rows.push_back(static_cast<size_t>(i));
    for (int i = 0; i < n1; ++i) want_rows.push_back(static_cast<size_t>(n0 + i));
    for (size_t l = 0; l < rg.calls.size(); ++l) {
      const Recorder::Call& g = rg.calls[l];
      const Recorder::Call& c = rc.calls[l];
      ASSERT_EQ(g.layer, static_cast<int>(l));
      ASSERT_EQ(g.seq.size(), want_rows.size()) << "layer " << l;
      double num = 0, den = 0;
      for (size_t r = 0; r < want_rows.size(); ++r) {
        const size_t t = want_rows[r];
        EXPECT_EQ(g.seq[r], c.seq[t]) << "layer " << l << " row " << r;
        EXPECT_EQ(g.pos[r], c.pos[t]) << "layer " << l << " row " << r;
        for (size_t k = 0; k < row; ++k) {
          const double d = g.q[r * row + k] - c.q[t * row + k];
          num += d * d;
          den += static_cast<double>(c.q[t * row + k]) * c.q[t * row + k];
        }
      }
      const double rel = std::sqrt(num / std::max(den, 1e-30));
      EXPECT_LT(rel, 1e-2) << "step " << step << " layer " << l;
      if (l == 0 || l + 1 == rg.calls.size()) std::printf("step %d layer %zu: queries rel_l2 GPU vs CPU %.2e\n", step, l, rel);
    }
  }
}

// The statistics from the device's ring of `ring` rows per sequence against those from the host
// copies a second backend recorded over the same passes, for the newest nq queries of each
// sequence (QueriesKeptOnTheDeviceGiveTheStatisticsOfHostCopies).
void check_ring_against_host_copies(const Model& m, KvTokenStore& ring_store, KvTokenStore& host_store,
                                    const Recorder& rr, const Recorder& rh, int ring, std::initializer_list<int> nqs) {
  const int n_head = static_cast<int>(m.config().n_head), hd = static_cast<int>(m.config().head_dim);
  auto* st_r = &ring_store;
  auto* st_h = &host_store;
  ASSERT_EQ(rr.calls.size(), rh.calls.size());
  EXPECT_EQ(rr.null_q, static_cast<int>(rr.calls.size()));
  EXPECT_EQ(rh.null_q, 0);
  for (size_t c = 0; c < rr.calls.size(); ++c) {
    EXPECT_EQ(rr.calls[c].layer, rh.calls[c].layer);
    EXPECT_EQ(rr.calls[c].seq, rh.calls[c].seq);
    EXPECT_EQ(rr.calls[c].pos, rh.calls[c].pos);
  }
  // The newest nq queries of each (layer, sequence), as an evictor's ring holds them.
  const int n_layer = static_cast<int>(m.config().n_layer);
  const size_t row = static_cast<size_t>(n_head) * hd;
  for (const int nq : nqs) {
    for (int s = 0; s < 2; ++s) {
      std::vector<std::vector<float>> q(static_cast<size_t>(n_layer));
      std::vector<std::vector<int32_t>> qpos(static_cast<size_t>(n_layer));
      std::vector<RoundStatsRequest> host_reqs(static_cast<size_t>(n_layer)), ring_reqs;
      for (size_t c = 0; c < rh.calls.size(); ++c) {
        const Recorder::Call& call = rh.calls[c];
        for (size_t i = 0; i < call.seq.size(); ++i) {
          if (call.seq[i] != s) continue;
          auto& ql = q[static_cast<size_t>(call.layer)];
          ql.insert(ql.end(), call.q.begin() + static_cast<std::ptrdiff_t>(i * row),
                    call.q.begin() + static_cast<std::ptrdiff_t>((i + 1) * row));
          qpos[static_cast<size_t>(call.layer)].push_back(call.pos[i]);
        }
      }
      for (int l = 0; l < n_layer; ++l) {
        RoundStatsRequest& rq = host_reqs[static_cast<size_t>(l)];
        const auto held = static_cast<int>(qpos[static_cast<size_t>(l)].size());
        ASSERT_GE(held, nq);
        rq.queries = q[static_cast<size_t>(l)].data();
        rq.query_pos = qpos[static_cast<size_t>(l)].data();
        rq.ring_rows = held;
        rq.first = held - nq;
        rq.nq = nq;
        rq.n_head = n_head;
        rq.head_dim = hd;
        rq.scale = 1.f / std::sqrt(static_cast<float>(hd));
        rq.fresh_after = 21;
        rq.attention = true;
        rq.similarity_candidates = 0;
      }
      ring_reqs = host_reqs;
      for (RoundStatsRequest& rq : ring_reqs) rq.queries = nullptr;
      std::vector<std::vector<HeadRoundStats>> from_ring, from_host;
      auto a = st_r->round_stats(s, ring_reqs, from_ring);
      auto b = st_h->round_stats(s, host_reqs, from_host);
      ASSERT_TRUE(a.ok()) << a.status().message();
      ASSERT_TRUE(b.ok()) << b.status().message();
      ASSERT_TRUE(*a && *b);
      for (int l = 0; l < n_layer; ++l) {
        for (size_t h = 0; h < from_host[static_cast<size_t>(l)].size(); ++h) {
          const HeadRoundStats& x = from_ring[static_cast<size_t>(l)][h];
          const HeadRoundStats& y = from_host[static_cast<size_t>(l)][h];
          EXPECT_EQ(x.attention, y.attention) << "nq " << nq << " seq " << s << " layer " << l << " head " << h;
          EXPECT_EQ(x.last, y.last) << "layer " << l;
          EXPECT_EQ(x.fresh, y.fresh) << "layer " << l;
          ASSERT_FALSE(x.attention.empty());
        }
      }
      // The oldest position recorded is no longer in the ring: refused, naming it.
      std::vector<RoundStatsRequest> stale = ring_reqs;
      stale[0].first = 0;
      stale[0].nq = std::min(static_cast<int>(qpos[0].size()), ring);
      if (static_cast<int>(qpos[0].size()) > ring) {
        auto r = st_r->round_stats(s, stale, from_ring);
        ASSERT_FALSE(r.ok());
        EXPECT_NE(r.status().message().find("not in the device's ring"), std::string::npos) << r.status().message();
      }
      std::vector<RoundStatsRequest> too_many = ring_reqs;
      too_many[1].nq = ring + 1;
      too_many[1].ring_rows = std::max(too_many[1].ring_rows, ring + 1);
      too_many[1].first = 0;
      if (static_cast<int>(qpos[1].size()) >= ring + 1) {
        EXPECT_FALSE(st_r->round_stats(s, too_many, from_ring).ok());
      }
    }
  }}

// The queries kept on the device (QueryCapture::ring_rows, the default) are the ones a pass copies
// to the host: the observer gets the same sequences and positions and no query rows, and the
// store's statistics from its rings (requests without queries) equal, bit for bit, those from the
// host copies of a second backend that ran the same passes, before and after the ring grows (an
// observer asking for more rows: the held queries are laid out again). Positions the ring no
// longer holds, or more queries than it keeps, are refused with a message.
TEST(CudaEviction, QueriesKeptOnTheDeviceGiveTheStatisticsOfHostCopies) {
  SKIP_WITHOUT_GPU();
  if (!fs::exists(default_model())) GTEST_SKIP() << default_model() << " not present";
  auto model = Model::load(default_model());
  ASSERT_TRUE(model.ok());
  Model& m = **model;
  CudaBackendOptions host_opts;
  host_opts.query_ring = false;
  auto ring_gpu = make_cuda_backend();
  auto host_gpu = make_cuda_backend(host_opts);
  ASSERT_TRUE(ring_gpu.ok() && host_gpu.ok()) << ring_gpu.status().to_string();
  const int n_head = static_cast<int>(m.config().n_head);
  ASSERT_TRUE((*ring_gpu)->keeps_queries(n_head, static_cast<int>(m.config().n_head_kv), 8));
  ASSERT_FALSE((*host_gpu)->keeps_queries(n_head, static_cast<int>(m.config().n_head_kv), 8));
  auto kv_r = KvCache::create(m.kv_options(2, 128));
  auto kv_h = KvCache::create(m.kv_options(2, 128));
  ASSERT_TRUE(kv_r.ok() && kv_h.ok());
  auto st_r = (*ring_gpu)->device_kv(m, kv_r->options());
  auto st_h = (*host_gpu)->device_kv(m, kv_h->options());
  ASSERT_TRUE(st_r.ok() && st_h.ok());
  const int64_t nv = m.config().n_vocab;
  Recorder rr(8), rh(8);  // every step's calls, appended
  // Steps [from, to): step 0 prefills 20 and 5 tokens, later ones one token of each sequence.
  const auto run_steps = [&](int from, int to) {
    for (int step = from; step < to; ++step) {
      Batch b;
      const int n0 = step == 0 ? 20 : 1, n1 = step == 0 ? 5 : 1;
      const int p0 = step == 0 ? 0 : 19 + step, p1 = step == 0 ? 0 : 4 + step;
      for (int i = 0; i < n0; ++i) b.add(static_cast<TokenId>((7 * i + 3 * step + 3) % nv), p0 + i, 0, i + 1 == n0);
      for (int i = 0; i < n1; ++i) b.add(static_cast<TokenId>((11 * i + 5 * step + 5) % nv), p1 + i, 1, i + 1 == n1);
      std::vector<float> lr(static_cast<size_t>(2 * nv)), lh(lr.size());
      ASSERT_TRUE(m.forward(b, *kv_r, **ring_gpu, lr.data(), &rr).ok());
      ASSERT_TRUE(m.forward(b, *kv_h, **host_gpu, lh.data(), &rh).ok());
    }
  };
  // A ring of 8 rows that wraps (7 steps); then the observer asks for 12, so the ring grows and
  // takes the 8 queries it held along, and 3 more steps: 11 positions of each sequence held.
  ASSERT_NO_FATAL_FAILURE(run_steps(0, 7));
  ASSERT_NO_FATAL_FAILURE(check_ring_against_host_copies(m, **st_r, **st_h, rr, rh, 8, {8, 5}));
  rr.set_recent(12);
  rh.set_recent(12);
  ASSERT_NO_FATAL_FAILURE(run_steps(7, 10));
  ASSERT_NO_FATAL_FAILURE(check_ring_against_host_copies(m, **st_r, **st_h, rr, rh, 12, {11, 8, 5}));
}

// The statistics a scored round reads, computed on the device rows (KvTokenStore::round_stats),
// equal the host's from the same rows (kv/round_stats.h, kv/attention_probs.h): fresh random
// queries over every layer of a sequence as prefilled and of one thinned by a round and then grown
// by a step (its device slots no longer follow positions), with and without a sliding window. A
// sequence with a round queued since the last step has its rows moved first; one queued on some
// heads only is refused.
TEST(CudaEviction, RoundStatisticsOnTheDeviceMatchTheHost) {
  SKIP_WITHOUT_GPU();
  if (!fs::exists(default_model())) GTEST_SKIP() << default_model() << " not present";
  DeviceStore d;
  ASSERT_NO_FATAL_FAILURE(open_device_store(d));
  Model& m = *d.model;
  Backend& gpu = *d.gpu;
  KvCache& kv = d.kv;
  KvTokenStore& st = *d.store;
  const KvStoreShape sh = st.store_shape();
  const int n_head = static_cast<int>(m.config().n_head), hd = sh.head_dim, n_rep = n_head / sh.n_head_kv;
  const int64_t nv = m.config().n_vocab;
  Batch b;
  for (int s = 0; s < 2; ++s) {
    for (int i = 0; i < 40; ++i) b.add(static_cast<TokenId>((11 * i + 5 * s + 1) % nv), i, s, i == 39);
  }
  std::vector<float> logits(static_cast<size_t>(2 * nv));
  ASSERT_TRUE(m.forward(b, kv, gpu, logits.data()).ok());
  std::mt19937 rng(std::random_device{}());
  for (int l = 0; l < sh.n_layer; ++l) {
    for (int h = 0; h < sh.n_head_kv; ++h) ASSERT_TRUE(st.keep_tokens(l, 1, h, random_subset(40, 30, rng)).ok());
  }
  b.clear();
  b.add(9, 40, 1, true);
  ASSERT_TRUE(m.forward(b, kv, gpu, logits.data()).ok());  // applies the keeps, appends position 40

  std::normal_distribution<float> g(0.f, 1.f);
  const int nq = 6;
  int checked = 0;
  const auto make_requests = [&](int s, int32_t window, std::vector<std::vector<float>>& q,
                                 std::vector<std::vector<int32_t>>& qpos) {
    std::vector<RoundStatsRequest> reqs(static_cast<size_t>(sh.n_layer));
    q.assign(reqs.size(), {});
    qpos.assign(reqs.size(), {});
    for (int l = 0; l < sh.n_layer; ++l) {
      auto& ql = q[static_cast<size_t>(l)];
      auto& pl = qpos[static_cast<size_t>(l)];
      // A ring of nq + 2 rows whose oldest is row 3, as an evictor's ring after it wrapped.
      const int ring_rows = nq + 2, first = 3;
      ql.resize(static_cast<size_t>(ring_rows) * n_head * hd);
      for (float& x : ql) x = 1.5f * g(rng);
      pl.assign(static_cast<size_t>(ring_rows), -100);
      for (int j = 0; j < nq; ++j) pl[static_cast<size_t>((first + j) % ring_rows)] = 2 + 7 * j + s + (l % 2);  // early ones see few keys
      RoundStatsRequest& rq = reqs[static_cast<size_t>(l)];
      rq.queries = ql.data();
      rq.query_pos = pl.data();
      rq.nq = nq;
      rq.ring_rows = ring_rows;
      rq.first = first;
      rq.n_head = n_head;
      rq.head_dim = hd;
      rq.scale = 1.f / std::sqrt(static_cast<float>(hd));
      rq.window = window;
      rq.fresh_after = 20 + l;
      rq.attention = true;
      rq.similarity_candidates = st.size(l, s, 0) - 4;
    }
    return reqs;
  };
  for (int s = 0; s < 2; ++s) {
    for (const int32_t window : {0, 9}) {
      std::vector<std::vector<float>> q;
      std::vector<std::vector<int32_t>> qpos;
      const std::vector<RoundStatsRequest> reqs = make_requests(s, window, q, qpos);
      std::vector<std::vector<HeadRoundStats>> dev;
      auto on = st.round_stats(s, reqs, dev);
      ASSERT_TRUE(on.ok()) << on.status().message();
      ASSERT_TRUE(*on) << "sequence " << s;
      ASSERT_EQ(dev.size(), static_cast<size_t>(sh.n_layer));
      for (int l = 0; l < sh.n_layer; ++l) {
        const RoundStatsRequest& rq = reqs[static_cast<size_t>(l)];
        ASSERT_EQ(dev[static_cast<size_t>(l)].size(), static_cast<size_t>(sh.n_head_kv));
        for (int h = 0; h < sh.n_head_kv; ++h) {
          const int32_t n = st.size(l, s, h);
          std::vector<float> keys(static_cast<size_t>(n) * hd);
          st.read_rows(l, s, h, keys.data(), nullptr);
          std::vector<const float*> rows;
          std::vector<int32_t> rpos;
          for (int r = 0; r < n_rep; ++r) {
            for (int j = 0; j < nq; ++j) {
              rows.push_back(request_query(rq, j) + static_cast<size_t>(h * n_rep + r) * hd);
              rpos.push_back(request_pos(rq, j));
            }
          }
          std::vector<float> probs(rows.size() * static_cast<size_t>(n));
          attention_probs_reference(ProbsQueries{rows.data(), rpos.data(), static_cast<int>(rows.size())}, keys.data(),
                                    st.positions(l, s, h), n, hd, rq.scale, window, probs.data());
          std::vector<float> att(n), last(n), fresh(n), sim(static_cast<size_t>(rq.similarity_candidates));
          reduce_attention(probs.data(), n_rep, nq, n, rpos.data(), rq.fresh_after, att.data(), last.data(), fresh.data());
          key_similarity(keys.data(), rq.similarity_candidates, hd, sim.data());
          const HeadRoundStats& d = dev[static_cast<size_t>(l)][static_cast<size_t>(h)];
          ASSERT_EQ(d.attention.size(), static_cast<size_t>(n));
          ASSERT_EQ(d.similarity.size(), sim.size());
          const auto near = [](float got, float want) { return std::fabs(got - want) <= 2e-5f + 2e-4f * std::fabs(want); };
          for (int32_t i = 0; i < n; ++i) {
            ASSERT_TRUE(near(d.attention[static_cast<size_t>(i)], att[static_cast<size_t>(i)]))
                << "attention, layer " << l << " seq " << s << " head " << h << " slot " << i << ": "
                << d.attention[static_cast<size_t>(i)] << " vs " << att[static_cast<size_t>(i)];
            ASSERT_TRUE(near(d.last[static_cast<size_t>(i)], last[static_cast<size_t>(i)])) << "last, slot " << i;
            ASSERT_TRUE(near(d.fresh[static_cast<size_t>(i)], fresh[static_cast<size_t>(i)])) << "fresh, slot " << i;
          }
          for (size_t i = 0; i < sim.size(); ++i) {
            ASSERT_NEAR(d.similarity[i], sim[i], 2e-5f) << "similarity, layer " << l << " head " << h << " key " << i;
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 4 * sh.n_layer * sh.n_head_kv);

  // A keep queued on one head of sequence 0 only: the rows cannot move (one count per sequence),
  // refused with the compaction's message; sequence 1 stays on the device.
  ASSERT_TRUE(st.keep_tokens(0, 0, 0, random_subset(40, 35, rng)).ok());
  std::vector<std::vector<float>> q;
  std::vector<std::vector<int32_t>> qpos;
  std::vector<std::vector<HeadRoundStats>> dev;
  auto first = st.round_stats(0, make_requests(0, 0, q, qpos), dev);
  ASSERT_FALSE(first.ok());
  EXPECT_NE(first.status().message().find("alike"), std::string::npos) << first.status().message();
  auto second = st.round_stats(1, make_requests(1, 0, q, qpos), dev);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(*second);
  // A round queued on every head of sequence 1 (20 of its 31 rows): the statistics cover the 20
  // kept, and the weights of each query that sees one of them sum to one over them.
  for (int l = 0; l < sh.n_layer; ++l) {
    for (int h = 0; h < sh.n_head_kv; ++h) ASSERT_TRUE(st.keep_tokens(l, 1, h, random_subset(31, 20, rng)).ok());
  }
  const std::vector<RoundStatsRequest> after_keep = make_requests(1, 0, q, qpos);
  auto third = st.round_stats(1, after_keep, dev);
  ASSERT_TRUE(third.ok()) << third.status().message();
  EXPECT_TRUE(*third);
  for (int l = 0; l < sh.n_layer; ++l) {
    for (int h = 0; h < sh.n_head_kv; ++h) {
      const HeadRoundStats& d = dev[static_cast<size_t>(l)][static_cast<size_t>(h)];
      ASSERT_EQ(d.attention.size(), 20u);
      const int32_t* kept = st.positions(l, 1, h);
      int seeing = 0;
      for (int j = 0; j < nq; ++j) {
        seeing += *std::min_element(kept, kept + 20) <= request_pos(after_keep[static_cast<size_t>(l)], j) ? 1 : 0;
      }
      double total = 0;
      for (float x : d.attention) total += x;
      EXPECT_NEAR(total, n_rep * seeing, 1e-3) << "layer " << l << " head " << h;
    }
  }
  std::vector<RoundStatsRequest> short_list = make_requests(1, 0, q, qpos);
  short_list.pop_back();
  EXPECT_EQ(st.round_stats(1, short_list, dev).status().code(), ErrorCode::kInvalidArgument);
}

// The scored policies (snapkv, h2o, tova, rkv) decode on the GPU: every request finishes with the rounds
// it takes on the CPU, and its tokens are the CPU's for most requests. The kept tokens come from
// scores of queries and keys whose values differ from the CPU's by float rounding, so a near-tie in
// a round may keep another token and the generations part from there: not every request must
// agree token for token, but a capture that hands the policies wrong queries (another layer, row
// or sequence) makes nearly all of them differ.
TEST(CudaEviction, ScoredPoliciesDecodeAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  if (!fs::exists(default_model())) GTEST_SKIP() << default_model() << " not present";
  ModelLoadOptions lo;
  auto gmodel = Model::load(default_model());
  lo.cpu_layouts = true;
  auto cmodel = Model::load(default_model(), lo);
  ASSERT_TRUE(gmodel.ok() && cmodel.ok());
  auto tok = Tokenizer::from_gguf((*cmodel)->gguf());
  ASSERT_TRUE(tok.ok());
  auto gpu = make_cuda_backend();
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  auto cpu = make_cpu_backend(CpuBackendOptions{0});
  EngineOptions o;
  o.n_parallel = 4;
  o.n_ctx = 1024;
  o.max_waiting = 100;
  o.telemetry_period_s = 0;
  auto ge = Engine::create(**gmodel, **tok, **gpu, o);
  auto ce = Engine::create(**cmodel, **tok, *cpu, o);
  ASSERT_TRUE(ge.ok()) << ge.status().message();
  ASSERT_TRUE(ce.ok()) << ce.status().message();
  struct Req {
    std::shared_ptr<RequestHandle> g, c;
    std::string what;
  };
  std::vector<Req> reqs;
  for (const char* policy : {"snapkv", "h2o", "tova", "rkv"}) {
    for (int i = 0; i < 6; ++i) {
      eval::TaskOptions to;
      to.length = 256;
      const std::string family = eval::task_family_names()[static_cast<size_t>(i) % eval::task_family_names().size()];
      auto ex = eval::generate_task(family, eval::TaskSplit::kTest, 900 + static_cast<uint64_t>(i), to);
      ASSERT_TRUE(ex.ok());
      auto prompt = (*tok)->encode(ex->prompt);
      ASSERT_TRUE(prompt.ok());
      RequestOptions r;
      r.prompt = *prompt;
      r.sampling.temperature = 0;
      r.max_tokens = 96;
      r.ignore_eos = true;
      KvPolicyOptions kv;
      kv.policy = policy;
      kv.budget = 96;
      kv.buffer = 16;
      r.kv = kv;
      auto g = (*ge)->submit(r);
      auto c = (*ce)->submit(r);
      ASSERT_TRUE(g.ok()) << g.status().message();
      ASSERT_TRUE(c.ok()) << c.status().message();
      reqs.push_back({*g, *c, std::string(policy) + " " + family});
    }
  }
  const auto collect = [](RequestHandle& h, std::vector<TokenId>& toks) {
    RequestUpdate u;
    for (int i = 0; i < 12000; ++i) {
      if (!h.wait(u, 10ms)) continue;
      for (const auto& t : u.tokens) toks.push_back(t.id);
      if (u.done) return u.finished;
    }
    ADD_FAILURE() << "request " << h.id() << " did not finish";
    return FinishedRequest{};
  };
  int same = 0;
  int64_t rounds = 0;
  for (Req& r : reqs) {
    std::vector<TokenId> gt, ct;
    const FinishedRequest gf = collect(*r.g, gt), cf = collect(*r.c, ct);
    EXPECT_EQ(gf.reason, cf.reason) << r.what;
    EXPECT_EQ(gt.size(), ct.size()) << r.what;
    EXPECT_EQ(gf.kv.rounds, cf.kv.rounds) << r.what;
    rounds += gf.kv.rounds;
    size_t common = 0;
    while (common < gt.size() && common < ct.size() && gt[common] == ct[common]) ++common;
    same += gt == ct ? 1 : 0;
    std::printf("%-22s %3zu of %3zu tokens before the first difference, %lld rounds\n", r.what.c_str(), common,
                ct.size(), static_cast<long long>(gf.kv.rounds));
  }
  EXPECT_GT(rounds, 0) << "no eviction round ran";
  EXPECT_GE(2 * same, static_cast<int>(reqs.size())) << same << " of " << reqs.size() << " requests agree";
  std::printf("%d of %zu requests token-identical to the CPU\n", same, reqs.size());
}

}  // namespace
}  // namespace frugal
