#include "frugal/engine/engine.h"

#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "frugal/core/half.h"
#include "frugal/decode/speculative/draft_length.h"
#include "frugal/decode/speculative/chain_verify.h"
#include "frugal/decode/speculative/verify.h"

namespace frugal {

struct Engine::Active {
  Active(SeqId id_, RequestOptions req_, const Tokenizer& tok, StopOptions stop_opts, int32_t n_vocab)
      : id(id_),
        req(std::move(req_)),
        handle(std::make_shared<RequestHandle>(id_)),
        sampler(req.sampling, n_vocab),
        stop(std::move(stop_opts)),
        detok(tok, /*render_special=*/false, /*strip_space_prefix=*/false) {
    if (req.json_schema) {
      matcher.emplace(req.json_schema);
      scratch.emplace(req.json_schema);
    }
  }
  SeqId id;
  RequestOptions req;
  std::shared_ptr<RequestHandle> handle;
  Sampler sampler;
  StopChecker stop;
  Detokenizer detok;
  std::optional<JsonMatcher> matcher;
  std::optional<JsonMatcher> scratch;
  std::unique_ptr<SequenceKv> own;  // its own KV state, or null: rows in the shared slot cache
  std::vector<float> own_logits;    // [n_vocab] the last row of its own forward pass
  // An evicting policy on an unquantized cache runs in the shared pool, in its slot.
  std::unique_ptr<KvEvictor> evictor;
  int64_t preemptions = 0;
  int64_t lent_pages = 0;           // pool pages paying for its evictor's state (charges_side_state)
  uint64_t peak_slot_bytes = 0;     // K+V bytes of its rows in the shared pool, highest seen
  uint64_t peak_held_bytes = 0;     // bytes of the pool pages it held, highest seen
  double arrival = 0, admitted = -1, first_token = -1, last_token = -1;
  int64_t cached = 0, prefill_tokens = 0, decode_forwards = 0, generated = 0;
  telemetry::PhaseRecord prefill_rec, decode_rec;
  // Speculative decoding, when the request has it: the drafter's sampler (the request's transform
  // with a generator of its own, so drafting never moves the target's stream) and draft length.
  std::optional<Sampler> draft_sampler;
  std::optional<speculative::DraftLength> draft_len;
  SpeculativeStats spec;
  double search_ms_at_admission = 0;  // the drafter's search time before this request (search_ms)
  ModelWork own_work;  // with its own KV state: its cache's bytes per position
};

namespace {
constexpr int32_t kMinSlotCapacity = 16;

// Hands each sequence's queries to the attention observer of the request in that slot (the scored
// eviction policies of requests sharing the pool), so one batched pass serves them all.
class SlotObservers final : public AttentionObserver {
 public:
  explicit SlotObservers(const std::vector<AttentionObserver*>& by_slot) : by_slot_(by_slot) {}
  void before_attention(int layer, const int32_t* seq, const int32_t* pos, int64_t n, const float* q,
                        const AttentionParams& p) override {
    const size_t row = static_cast<size_t>(p.n_head) * p.head_dim;
    for_runs(seq, n, [&](AttentionObserver& o, int64_t t, int64_t e) {
      o.before_attention(layer, seq + t, pos + t, e - t, q != nullptr ? q + static_cast<size_t>(t) * row : nullptr, p);
    });
  }
  void after_attention(KvCache& kv, int layer, const int32_t* seq, int64_t n) override {
    for_runs(seq, n, [&](AttentionObserver& o, int64_t t, int64_t e) { o.after_attention(kv, layer, seq + t, e - t); });
  }
  int32_t recent_queries() const override {
    int32_t most = 0;
    for (const AttentionObserver* o : by_slot_) {
      if (o != nullptr) most = std::max(most, o->recent_queries());
    }
    return most;
  }

 private:
  template <typename F>
  void for_runs(const int32_t* seq, int64_t n, F&& f) {
    for (int64_t t = 0; t < n;) {
      int64_t e = t + 1;
      while (e < n && seq[e] == seq[t]) ++e;
      const int32_t s = seq[t];
      if (s >= 0 && static_cast<size_t>(s) < by_slot_.size() && by_slot_[static_cast<size_t>(s)] != nullptr) {
        f(*by_slot_[static_cast<size_t>(s)], t, e);
      }
      t = e;
    }
  }
  const std::vector<AttentionObserver*>& by_slot_;
};
}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(Model& model, const Tokenizer& tok, Backend& backend,
                                               const EngineOptions& asked) {
  EngineOptions opts = asked;  // a device cache's memory budget may lower n_parallel (below)
  const ModelConfig& cfg = model.config();
  if (opts.n_parallel < 1 || opts.n_parallel > 256) {
    return error(ErrorCode::kInvalidArgument, "engine: parallel = {} must be in [1, 256]", opts.n_parallel);
  }
  if (opts.max_step_tokens < opts.n_parallel) {
    return error(ErrorCode::kInvalidArgument, "engine: the step budget ({} tokens) must be at least parallel ({})",
                 opts.max_step_tokens, opts.n_parallel);
  }
  if (opts.max_waiting < 0) return error(ErrorCode::kInvalidArgument, "engine: max_waiting must be >= 0");
  if (opts.kv_dtype != DType::kF16 && opts.kv_dtype != DType::kF32) {
    return error(ErrorCode::kInvalidArgument, "engine: the KV cache type must be f16 or f32");
  }
  FRUGAL_RETURN_IF_ERROR(validate(opts.kv));
  FRUGAL_RETURN_IF_ERROR(backend.set_prefill_sparse(opts.prefill_sparse));
  FRUGAL_RETURN_IF_ERROR(backend.set_tilemix(opts.tilemix));
  const bool paged = backend.name() == "cpu";
  if (!paged) FRUGAL_RETURN_IF_ERROR(device_kv_supports(opts.kv, backend.name()));
  if (opts.batch_invariant && !paged) {
    return error(ErrorCode::kNotSupported,
                 "engine: batch-invariant steps run on the cpu backend; the {} backend's products change kernels "
                 "with the batch size",
                 backend.name());
  }
  const int64_t train = cfg.n_ctx_train > 0 ? cfg.n_ctx_train : 4096;
  int64_t capacity = opts.n_ctx > 0 ? opts.n_ctx : std::min<int64_t>(train, 4096);
  int64_t n_pages = 0;  // 0: every slot can reach its capacity
  if (opts.kv_memory > 0 && paged) {
    // The pool is the budget: sequences take pages as they grow, and the scheduler admits, evicts
    // or preempts against it. One sequence must be able to hold kMinSlotCapacity tokens.
    const KvCacheOptions ko = model.kv_options(opts.n_parallel, static_cast<int>(capacity), opts.kv_dtype);
    const int64_t heads = static_cast<int64_t>(ko.n_layer) * ko.n_head_kv;
    const int64_t min_pages = heads * ((kMinSlotCapacity + ko.page_tokens - 1) / ko.page_tokens);
    n_pages = static_cast<int64_t>(opts.kv_memory / kv_page_bytes(ko));
    if (n_pages < min_pages) {
      return error(ErrorCode::kOverBudget,
                   "engine: kv-memory {} bytes is below the minimum {} bytes: one page of {} tokens ({} bytes) per "
                   "layer and KV head ({} layers x {} KV heads)",
                   opts.kv_memory, static_cast<uint64_t>(min_pages) * kv_page_bytes(ko), ko.page_tokens,
                   kv_page_bytes(ko), ko.n_layer, ko.n_head_kv);
    }
    // A sequence alone can use the whole pool, never more.
    capacity = std::min<int64_t>(capacity, n_pages / heads * ko.page_tokens);
  } else if (opts.kv_memory > 0) {
    // A device-resident cache reserves each slot's whole context, so the budget decides how many
    // sequences run at once, not how long they may grow (vLLM's rule): as many slots of the full
    // context as fit, at most --parallel; the other requests wait in the queue. Only when not one
    // slot fits does the context shrink, over the slots asked for.
    int slots = opts.n_parallel;
    while (slots > 0 &&
           kv_reserved_bytes(model.kv_options(slots, static_cast<int>(capacity), opts.kv_dtype)) > opts.kv_memory) {
      --slots;
    }
    if (slots > 0) {
      opts.n_parallel = slots;
    } else {
      Result<int32_t> fit = kv_tokens_for_memory(model.kv_options(opts.n_parallel, 0, opts.kv_dtype), opts.kv_memory,
                                                 kMinSlotCapacity);
      if (!fit.ok()) {
        return error(ErrorCode::kOverBudget, "engine: {} at parallel {}: raise --kv-memory or lower --parallel",
                     fit.status().message(), opts.n_parallel);
      }
      capacity = std::min<int64_t>(capacity, *fit);
    }
  }
  KvCacheOptions ko = model.kv_options(opts.n_parallel, static_cast<int>(capacity), opts.kv_dtype);
  ko.n_pages = n_pages;
  std::unique_ptr<speculative::Drafter> drafter;
  if (opts.spec.method == speculative::Method::kNone && opts.spec.candidates != 1) {
    return error(ErrorCode::kInvalidArgument,
                 "speculative: spec-candidates = {} needs a drafter (--spec draft or layerskip); plain decoding has "
                 "no drafts",
                 opts.spec.candidates);
  }
  if (opts.spec.method != speculative::Method::kNone) {
    const char* method = speculative::method_name(opts.spec.method);
    if (!paged) {
      // A device-resident cache rolls rejected drafts back itself: the sequence's next step starts
      // at the first position not kept, and the backend drops its rows from there on
      // (CudaBackend::prepare). Verification passes run row-invariant there too. What it cannot
      // do: run the target with layers skipped (it runs passes whole), which the layer-skip
      // drafters and memspec's pool need, or give extra chains rows of their own to share.
      if (opts.spec.method != speculative::Method::kNgram && opts.spec.method != speculative::Method::kDraft) {
        return error(ErrorCode::kNotSupported,
                     "speculative decoding (--spec {}) runs on the cpu backend, not {}: it runs the target with "
                     "layers skipped; --spec draft and --spec ngram run on both",
                     method, backend.name());
      }
      if (opts.spec.candidates > 1) {
        return error(ErrorCode::kNotSupported,
                     "speculative decoding with {} candidates per position runs on the cpu backend, not {} (one "
                     "chain there)",
                     opts.spec.candidates, backend.name());
      }
    }
    if (needs_own_kv(opts.kv)) {
      return error(ErrorCode::kNotSupported,
                   "speculative decoding (--spec {}) needs a keep-everything unquantized KV cache, not kv policy '{}' "
                   "with kv-quant {} and a per-sequence kv-memory of {} bytes: rejected draft tokens cannot be rolled "
                   "back out of an evicted or quantized cache",
                   method, opts.kv.policy, kv_quant_name(opts.kv.quant), opts.kv.memory);
    }
    speculative::DrafterContext dc;
    dc.target = &model;
    dc.backend = &backend;
    dc.draft_on_cpu = !paged;
    // A draft KV sequence per chain of every slot (chain_slot()).
    dc.n_slots = opts.n_parallel * opts.spec.candidates;
    dc.capacity = static_cast<int32_t>(capacity);
    dc.kv_dtype = opts.kv_dtype;
    FRUGAL_ASSIGN_OR_RETURN(drafter, speculative::make_drafter(opts.spec, dc));
    if (opts.spec.candidates > 1) {
      // Chains past the first run in KV slots of their own that share the sequence's pages for
      // one pass; they draw on the pool of the scheduler's slots, which stays the same size.
      ko.n_pages = kv_pool_pages(ko);
      ko.n_seq = opts.n_parallel * opts.spec.candidates;
    }
  }
  FRUGAL_ASSIGN_OR_RETURN(KvCache kv, KvCache::create(ko));
  // A device-resident cache is made ready now (model uploaded, slots allocated), so eviction
  // rounds can read its token tables from the first admission on.
  KvTokenStore* device_kv = nullptr;
  if (!paged) {
    FRUGAL_ASSIGN_OR_RETURN(device_kv, backend.device_kv(model, ko));
  }
  auto engine = std::unique_ptr<Engine>(new Engine(model, tok, backend, opts, std::move(kv),
                                                   static_cast<int32_t>(capacity), std::move(drafter)));
  engine->device_kv_ = device_kv;
  return engine;
}

Engine::Engine(Model& model, const Tokenizer& tok, Backend& backend, const EngineOptions& opts, KvCache kv,
               int32_t slot_capacity, std::unique_ptr<speculative::Drafter> drafter)
    : model_(model),
      tok_(tok),
      backend_(backend),
      opts_(opts),
      kv_(std::move(kv)),
      slot_capacity_(slot_capacity),
      sched_(SchedulerOptions{opts.n_parallel, slot_capacity, opts.max_step_tokens, std::max(opts.max_waiting, 1),
                              opts.queue_timeout_s, opts.prefix_cache, 16}),
      t0_(std::chrono::steady_clock::now()) {
  t0_steady_ = std::chrono::duration<double>(t0_.time_since_epoch()).count();
  telemetry::TelemetryOptions to;
  to.backend = backend.name();
  to.sample_period_s = opts.telemetry_period_s;
  tel_ = telemetry::Telemetry::open(to);
  work_ = model_work(model, opts.kv_dtype);
  const auto n_vocab = static_cast<size_t>(model.config().n_vocab);
  pieces_.resize(n_vocab);
  blocked_.assign(n_vocab, 0);
  for (size_t v = 0; v < n_vocab; ++v) {
    const auto id = static_cast<TokenId>(v);
    pieces_[v] = tok.piece(id, false);
    blocked_[v] = (tok.is_control(id) && !tok.is_eog(id)) || (pieces_[v].empty() && !tok.is_eog(id));
  }
  greedy_.resize(static_cast<size_t>(opts.n_parallel));
  drafter_ = std::move(drafter);
  // A speculating sequence asks for logits at its last token and at each of up to k drafts per chain.
  const size_t rows_per_slot =
      drafter_ ? 1 + static_cast<size_t>(opts.spec.k) * static_cast<size_t>(opts.spec.candidates) : 1;
  logits_.resize(static_cast<size_t>(opts.n_parallel) * rows_per_slot * n_vocab);
  drafts_.assign(static_cast<size_t>(opts.n_parallel),
                 std::vector<speculative::Draft>(drafter_ ? static_cast<size_t>(opts.spec.candidates) : 1));
  spec_probs_.resize(n_vocab);
  masked_.resize(n_vocab);
  const auto& ko = kv_.options();
  kbuf_.resize(static_cast<size_t>(ko.n_head_kv) * ko.head_dim);
  vbuf_.resize(kbuf_.size());
  stats_.n_slots = opts.n_parallel;
  stats_.slot_capacity = slot_capacity;
  stats_.kv_rows_total = static_cast<int64_t>(opts.n_parallel) * slot_capacity;
  stats_.kv_bytes = kv_.reserved_bytes();
  stats_.kv_pages_total = kv_.total_pages();
  slot_observers_.assign(static_cast<size_t>(opts.n_parallel), nullptr);
  if (uses_pool()) {
    // Admission against the pool: a request enters when the pages its prompt (and one decode
    // token) takes beyond the prefix it reuses or shares fit in the free pages left after this
    // step's earlier admissions. Cached prefixes nobody runs are dropped first when that makes the
    // difference, the ones this admission reads last (then it is planned again without them).
    sched_.set_admission_gate([this](const Admission& a, int32_t tokens) {
      auto found = active_.find(a.id);
      if (found == active_.end() || found->second->own) return GateAnswer::kAdmit;
      const bool shares = a.copy_from >= 0 && opts_.share_prefix_pages;
      const int from = shares ? a.copy_from : a.slot;
      const int64_t need = kv_.pages_to_grow(from, shares, shares ? a.copy_end : a.reused, tokens + 1) +
                           side_pages(*found->second) - found->second->lent_pages;
      // (copy_from is a running slot or one admitted earlier in this plan, never a cached one:
      // a free slot sharing more would have been chosen as the slot itself.)
      while (kv_.free_pages() - promised_pages_ < need) {
        if (drop_cached_prefix(a.slot, a.copy_from)) continue;
        return drop_cached_prefix() ? GateAnswer::kChooseAgain : GateAnswer::kWait;
      }
      promised_pages_ += need;
      return GateAnswer::kAdmit;
    });
  }
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() { shutdown(); }

void Engine::shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

double Engine::now_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

Result<std::shared_ptr<RequestHandle>> Engine::submit(RequestOptions req) {
  if (req.prompt.empty()) return error(ErrorCode::kInvalidArgument, "the prompt is empty (no tokens)");
  if (static_cast<int64_t>(req.prompt.size()) >= slot_capacity_) {
    return error(ErrorCode::kInvalidArgument,
                 "the prompt has {} tokens but the context of a sequence holds {} (prompt and output together)",
                 req.prompt.size(), slot_capacity_);
  }
  const auto n_vocab = static_cast<int32_t>(model_.config().n_vocab);
  for (TokenId t : req.prompt) {
    if (t < 0 || t >= n_vocab) {
      return error(ErrorCode::kInvalidArgument, "prompt token id {} is outside the vocabulary [0, {})", t, n_vocab);
    }
  }
  FRUGAL_RETURN_IF_ERROR(validate(req.sampling));
  if (req.max_tokens == 0 || req.max_tokens < -1) {
    return error(ErrorCode::kInvalidArgument, "max_tokens = {} must be at least 1 (or -1: no limit)", req.max_tokens);
  }
  StopOptions so;
  so.stop = req.stop;
  so.max_tokens = req.max_tokens;
  if (!req.ignore_eos) so.is_eog = [this](TokenId id) { return tok_.is_eog(id); };
  FRUGAL_RETURN_IF_ERROR(validate(so));
  if (req.logprobs > 20) {
    return error(ErrorCode::kInvalidArgument, "logprobs: at most 20 alternatives per token, not {}", req.logprobs);
  }
  const KvPolicyOptions kv = req.kv ? *req.kv : opts_.kv;
  FRUGAL_RETURN_IF_ERROR(validate(kv));
  std::unique_ptr<SequenceKv> own;
  std::unique_ptr<KvEvictor> evictor;
  const int32_t prompt_len = static_cast<int32_t>(req.prompt.size());
  const int32_t trace_len =
      req.max_tokens >= 0 ? std::min<int32_t>(slot_capacity_, prompt_len + req.max_tokens) : slot_capacity_;
  if (needs_own_kv(kv) && kv.quant == KvQuant::kNone && kv.memory == 0) {
    // Eviction alone: the sequence runs in its slot of the shared pool (or of the device's
    // cache), batched with the others, and what its rounds free goes back to them.
    if (!uses_pool()) FRUGAL_RETURN_IF_ERROR(device_kv_supports(kv, backend_.name()));
    FRUGAL_ASSIGN_OR_RETURN(evictor, KvEvictor::create(kv, trace_len, prompt_len));
    if (charges_side_state()) {
      // The recorded queries are paid from the pool beside the sequence's rows: both must fit.
      const uint64_t rings = ring_bytes(*evictor);
      const int64_t ring_pages = pages_for(rings);
      const int64_t row_pages = kv_.pages_to_grow(0, false, 0, std::min(prompt_len + 1, slot_capacity_));
      if (ring_pages + row_pages > kv_.total_pages()) {
        return error(ErrorCode::kOverBudget,
                     "kv policy '{}' records the newest {} queries of every layer ({} bytes a sequence), which with "
                     "the {}-token prompt's rows ({} bytes) does not fit kv-memory {} bytes: raise --kv-memory, lower "
                     "kv-buffer or choose a policy that records no queries (random, window)",
                     kv.policy, kv.buffer, rings, prompt_len, static_cast<uint64_t>(row_pages) * kv_.page_bytes(),
                     opts_.kv_memory);
      }
    }
  } else if (needs_own_kv(kv)) {
    if (!uses_pool()) FRUGAL_RETURN_IF_ERROR(device_kv_supports(kv, backend_.name()));
    // Built now, so an impossible budget is the submitter's error, not a failure mid-run.
    SequenceKvShape shape;
    shape.prompt_len = prompt_len;
    shape.n_ctx = slot_capacity_;
    shape.trace_len = trace_len;
    shape.n_batch = opts_.max_step_tokens;
    shape.dtype = opts_.kv_dtype;
    FRUGAL_ASSIGN_OR_RETURN(own, make_sequence_kv(model_, kv, shape));
  }
  bool speculate = false;
  if (req.speculative.value_or(true)) {
    const std::string why = speculation_refusal(req, own != nullptr, evictor != nullptr);
    speculate = why.empty();
    // Asked for explicitly, a refusal is the request's error; by default it decodes plainly.
    if (!speculate && req.speculative.value_or(false)) {
      return error(ErrorCode::kInvalidArgument, "speculative: {}", why);
    }
  }
  const SeqId id = next_id_.fetch_add(1);
  auto act = std::make_unique<Active>(id, std::move(req), tok_, std::move(so), n_vocab);
  if (speculate) {
    SamplingParams dp = act->req.sampling;
    dp.seed = act->sampler.seed() ^ 0x5bd1e9955bd1e995ull;
    if (dp.seed == kSeedFromTime) dp.seed = 0;
    act->draft_sampler.emplace(dp, n_vocab);
    // The cost ratio is weight bytes read per draft pass, which the chains of a sequence share
    // (one batched pass per draft position for all of them).
    act->draft_len.emplace(opts_.spec.k, drafter_->cost_ratio());
    act->spec.method = speculative::method_name(drafter_->method());
    act->spec.candidates = opts_.spec.candidates;
    act->spec.rule = speculative::candidate_rule_name(opts_.spec.rule);
    act->search_ms_at_admission = drafter_->search_ms();
  }
  act->prefill_rec.energy.source = tel_->meter().source();
  act->decode_rec.energy.source = tel_->meter().source();
  act->own_work = model_work(model_, opts_.kv_dtype, kv.quant);
  if (own) {
    act->own = std::move(own);
    act->own_logits.resize(static_cast<size_t>(n_vocab));
  }
  act->evictor = std::move(evictor);
  act->arrival = now_s();
  auto handle = act->handle;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) return error(ErrorCode::kOverBudget, "the engine is shutting down");
    if (n_waiting_.load() + static_cast<int>(incoming_.size()) >= opts_.max_waiting) {
      return error(ErrorCode::kOverBudget, "the server is busy: {} requests are already waiting (queue limit {})",
                   n_waiting_.load() + static_cast<int>(incoming_.size()), opts_.max_waiting);
    }
    incoming_.push_back(std::move(act));
  }
  cv_.notify_all();
  return handle;
}

void Engine::loop() {
  for (;;) {
    std::vector<std::unique_ptr<Active>> fresh;
    {
      std::unique_lock<std::mutex> lk(mu_);
      if (active_.empty()) {
        if (tel_->sampler() != nullptr) tel_->sampler()->set_busy(false);
        cv_.wait(lk, [&] { return stop_ || !incoming_.empty(); });
      }
      if (stop_) break;
      fresh.swap(incoming_);
      // Until step() recounts the scheduler's queue, the requests taken here still wait: submit()
      // must see them, or a request arriving in between passes a full queue.
      n_waiting_.fetch_add(static_cast<int>(fresh.size()));
    }
    for (auto& a : fresh) {
      const SeqId id = a->id;
      std::vector<TokenId> prompt = a->req.prompt;
      // Only keep-everything sequences in the pool share prefixes (an evicted slot is no prefix).
      const bool shares_kv = a->own == nullptr && a->evictor == nullptr;
      active_[id] = std::move(a);
      Status st = sched_.enqueue(id, std::move(prompt), now_s(), shares_kv);
      if (!st.ok()) finish(id, FinishReason::kError, st);
    }
    step();
  }
  // Shutting down: nobody will run what is left.
  std::vector<std::unique_ptr<Active>> left;
  {
    std::lock_guard<std::mutex> lk(mu_);
    left.swap(incoming_);
  }
  for (auto& a : left) active_[a->id] = std::move(a);
  std::vector<SeqId> ids;
  for (const auto& [id, a] : active_) ids.push_back(id);
  for (SeqId id : ids) finish(id, FinishReason::kCancelled);
}

void Engine::step() {
  std::vector<SeqId> gone;
  for (const auto& [id, a] : active_) {
    if (a->handle->cancelled()) gone.push_back(id);
  }
  for (SeqId id : gone) finish(id, FinishReason::kCancelled);

  const double now = now_s();
  promised_pages_ = 0;
  StepPlan plan = sched_.plan(now);
  for (const auto& r : plan.refused) finish(r.id, FinishReason::kError, Status(ErrorCode::kOverBudget, r.reason));
  for (const auto& a : plan.admitted) apply_admission(a, now);
  // The queue as it is now, before this step emits tokens: a client that saw its request start
  // must not find it still counted as waiting.
  n_waiting_.store(sched_.n_waiting());

  // Sequences evicting in the pool: a round before a decode step, as a sequence run alone has.
  for (const auto& it : plan.items) {
    if (!sched_.is_running(it.id)) continue;
    Active& r = *active_.at(it.id);
    if (!r.evictor || it.begin < sched_.n_prompt(it.id)) continue;
    const Status st = r.evictor->step(kv_store(), it.slot);
    if (!st.ok()) {
      kv_.release(it.slot);
      finish(it.id, FinishReason::kError, st);
    }
  }
  if (charges_side_state()) charge_side_state(plan);
  if (uses_pool()) reserve_pages(plan);
  if (drafter_) draft(plan);

  // Sequences in the shared slot cache go through one forward pass together; a sequence with a
  // KV state of its own (eviction, quantization) through one pass on its own cache.
  batch_.clear();
  std::vector<StepItem> items;
  std::vector<const float*> rows;  // per item: its logits row, once its pass has run
  items.reserve(plan.items.size());
  bool observed = false;
  // When every row that asks for logits only needs its greedy token, the step returns token ids
  // (on a device backend no logits leave the device).
  bool greedy_step = true;
  int64_t step_tokens = 0;
  for (const auto& it : plan.items) {
    if (!sched_.is_running(it.id)) continue;  // failed while being admitted, or preempted
    items.push_back(it);
    step_tokens += it.end - it.begin;
    Active& r = *active_.at(it.id);
    if (r.own) continue;
    if (it.logits && !wants_greedy_token(r)) greedy_step = false;
    AttentionObserver* obs = r.evictor ? r.evictor->attention_observer() : nullptr;
    slot_observers_[static_cast<size_t>(it.slot)] = obs;
    observed = observed || obs != nullptr;
    const auto toks = sched_.tokens(it.id);
    for (int32_t p = it.begin; p < it.end; ++p) {
      batch_.add(toks[static_cast<size_t>(p)], p, it.slot, it.logits && p + 1 == it.end);
    }
    // A draft continues the sequence in the same pass, with the target's logits at every token.
    // Every other chain continues a copy of the sequence (its KV slot shares the rows before the
    // last token) from the last token on, whose row there needs no logits: it is row 0's.
    const std::vector<speculative::Draft>& chains = drafts_[static_cast<size_t>(it.slot)];
    for (size_t c = 0; c < chains.size(); ++c) {
      const std::vector<TokenId>& drafted = chains[c].tokens;
      if (drafted.empty()) continue;
      const int kv_slot = chain_slot(it.slot, static_cast<int>(c));
      if (c > 0) batch_.add(toks[static_cast<size_t>(it.end - 1)], it.end - 1, kv_slot, false);
      for (size_t j = 0; j < drafted.size(); ++j) batch_.add(drafted[j], it.end + static_cast<int32_t>(j), kv_slot, true);
    }
    step_tokens += static_cast<int64_t>(draft_rows(it.slot));
  }
  // The step's energy: one counter interval around all of its passes (none when nothing runs or
  // there is no counter), shared among its sequences by tokens below.
  const bool metered = !items.empty() && tel_->meter().source() != telemetry::EnergySource::kUnavailable;
  if (!items.empty() && tel_->sampler() != nullptr) tel_->sampler()->set_busy(true);
  telemetry::IntervalMeter step_meter(metered ? &tel_->meter() : nullptr);
  // A step carrying drafts computes every row as one-token decoding would (Batch::row_invariant),
  // so greedy verification keeps exactly plain decoding's tokens.
  bool any_drafts = false;
  for (size_t slot = 0; slot < drafts_.size(); ++slot) any_drafts |= has_drafts(static_cast<int>(slot));
  batch_.row_invariant = opts_.batch_invariant || any_drafts;
  // Verification reads whole logits rows, one per drafted token.
  if (any_drafts) greedy_step = false;
  Status shared_st = ok_status();
  if (batch_.size() > 0) {
    SlotObservers observers(slot_observers_);
    shared_st = greedy_step
                    ? model_.forward_greedy(batch_, kv_, backend_, greedy_.data(), observed ? &observers : nullptr)
                    : model_.forward(batch_, kv_, backend_, logits_.data(), observed ? &observers : nullptr);
  }
  std::fill(slot_observers_.begin(), slot_observers_.end(), nullptr);
  const auto n_vocab = static_cast<size_t>(model_.config().n_vocab);
  size_t row = 0;
  std::vector<SeqId> failed;
  std::vector<TokenId> chosen;  // per item: its greedy token from a greedy step, else -1
  for (const auto& it : items) {
    Active& r = *active_.at(it.id);
    const bool own = r.own != nullptr;
    const Status st = own ? forward_own(r, it) : shared_st;
    TokenId picked = -1;
    const float* out = nullptr;
    if (own) {
      out = r.own_logits.data();
    } else if (it.logits && greedy_step) {
      picked = greedy_[row++];
    } else if (it.logits) {
      out = logits_.data() + row * n_vocab;
      row += 1;
      for (const auto& d : drafts_[static_cast<size_t>(it.slot)]) row += d.tokens.size();
    }
    if (!st.ok()) {
      finish(it.id, FinishReason::kError, st);  // `r` is gone from here on
      if (!own) {
        kv_.clear(it.slot);
        sched_.drop_cache(it.slot);
      }
      out = nullptr;
      picked = -1;
    }
    rows.push_back(out);
    chosen.push_back(picked);
  }
  const telemetry::EnergyDelta step_energy = metered ? step_meter.stop() : telemetry::EnergyDelta{};
  sched_.commit(plan);  // items of finished sequences are skipped
  for (size_t i = 0; i < items.size(); ++i) {
    const StepItem& it = items[i];
    auto found = active_.find(it.id);
    if (found == active_.end()) continue;
    Active& r = *found->second;
    const bool prefill = it.begin < sched_.n_prompt(it.id);
    if (prefill) {
      r.prefill_tokens += it.end - it.begin;
    } else {
      ++r.decode_forwards;
    }
    if (!r.own && uses_pool()) {
      r.peak_slot_bytes = std::max(r.peak_slot_bytes, kv_.used_bytes(it.slot));
      r.peak_held_bytes = std::max(r.peak_held_bytes, static_cast<uint64_t>(kv_.pages_held(it.slot)) * kv_.page_bytes());
    } else if (!r.own) {
      r.peak_slot_bytes = std::max(r.peak_slot_bytes, kv_store().used_bytes(it.slot));
    }
    // A sequence on its own KV state ran a pass of its own: all of that pass's weight reads are its.
    const auto n_drafted = static_cast<int32_t>(draft_rows(it.slot));
    const double share =
        static_cast<double>(it.end - it.begin + n_drafted) / static_cast<double>(std::max<int64_t>(step_tokens, 1));
    telemetry::PhaseRecord& rec = prefill ? r.prefill_rec : r.decode_rec;
    rec.work.merge(r.own ? r.own_work.chunk(it.begin, it.end, 1.0) : work_.chunk(it.begin, it.end + n_drafted, share));
    if (metered) rec.energy.add(step_energy, share);
    if (it.logits && n_drafted > 0) {
      verify(r, it, rows[i]);
    } else if (it.logits && (rows[i] != nullptr || chosen[i] >= 0)) {
      on_logits(r, rows[i], chosen[i]);
    }
  }
  {
    std::unique_lock<std::mutex> lk(mu_);
    stats_.running = sched_.n_running();
    stats_.waiting = sched_.n_waiting();
    stats_.kv_rows_running = sched_.running_rows();
    stats_.kv_rows_cached = sched_.cached_rows();
    stats_.kv_pages_free = kv_.free_pages();
    std::vector<int> running_slots;
    uint64_t side = 0;
    for (const auto& [id, a] : active_) {
      if (!a->own && sched_.is_running(id)) running_slots.push_back(sched_.slot_of(id));
      if (a->evictor != nullptr) side += a->evictor->state_bytes();
      if (a->own != nullptr) side += a->own->evictor->state_bytes() + a->own->cache.reserved_bytes();
    }
    stats_.kv_side_bytes = side;
    stats_.kv_pages_lent = kv_.lent_pages();
    stats_.kv_pages_lent_peak = std::max(stats_.kv_pages_lent_peak, stats_.kv_pages_lent);
    stats_.kv_side_bytes_peak = std::max(stats_.kv_side_bytes_peak, side);
    stats_.kv_pages_running = kv_.pages_held(running_slots);
    stats_.kv_pages_shared = kv_.shared_pages();
    stats_.kv_pages_used_peak = std::max(stats_.kv_pages_used_peak, kv_.total_pages() - kv_.free_pages());
    if (!items.empty()) ++stats_.steps;
    n_waiting_.store(sched_.n_waiting());
    if (items.empty() && !active_.empty() && !stop_) {
      // Nothing could run (only waiting requests, all refused or cancelled): do not spin.
      cv_.wait_for(lk, std::chrono::milliseconds(5));
    }
  }
}

void Engine::apply_admission(const Admission& a, double now) {
  Active& r = *active_.at(a.id);
  kv_.truncate(a.slot, a.reused);
  if (a.copy_from >= 0) {
    const Status st = share_or_copy_rows(a);
    if (!st.ok()) {
      kv_.clear(a.slot);
      sched_.drop_cache(a.slot);
      finish(a.id, FinishReason::kError, st);
      return;
    }
  }
  const bool first_admission = r.admitted < 0;  // a preempted sequence keeps its first admission
  if (first_admission) r.admitted = now;
  r.cached = a.copy_end;
  // Stream 0: the random policy draws as it would for the request run alone, whatever its slot.
  if (r.evictor && device_kv_ != nullptr) {
    r.evictor->begin(*device_kv_, a.slot, static_cast<int32_t>(r.req.prompt.size()), 0);
  } else if (r.evictor) {
    r.evictor->begin(kv_, a.slot, static_cast<int32_t>(r.req.prompt.size()), 0);
  }
  // The gate counted these pages in; should they be gone, charge_side_state() takes them later.
  if (const int64_t more = side_pages(r) - r.lent_pages; more > 0 && kv_.lend_pages(more).ok()) {
    r.lent_pages += more;
  }
  if (tel_->sampler() != nullptr) (void)tel_->sampler()->sample_now(t0_steady_ + now, false);
  if (!first_admission) return;
  std::lock_guard<std::mutex> lk(mu_);
  stats_.prompt_tokens += r.req.prompt.size();
  stats_.prefix_hit_tokens += static_cast<uint64_t>(a.copy_end);
}

// The prefix [0, copy_end) of slot copy_from for the admitted slot. A device-resident cache (cuda)
// copies rows itself. In the host pool the slot takes the source's pages by reference instead: full
// pages are shared for good, and the partial last page is shared too and made private by whichever
// sequence writes into it first. That is what TokenTable::reserve already does for any shared page
// (the writer gets a fresh page and the rows it holds), so sharing the tail needs no copy code of
// its own, costs nothing when the source never writes it again (a cached prefix), and the copy is
// taken through reserve(), where "no free page" is answered by making room like any other step.
// The slot's own reused rows go: the source holds the same tokens at the same positions.
Status Engine::share_or_copy_rows(const Admission& a) {
  FRUGAL_ASSIGN_OR_RETURN(const bool copied, backend_.copy_kv_rows(a.copy_from, a.slot, a.reused, a.copy_end));
  if (copied) return ok_status();
  if (!opts_.share_prefix_pages) return copy_rows(a.copy_from, a.slot, a.reused, a.copy_end);
  return kv_.share_prefix(a.copy_from, a.slot, a.copy_end);
}

// Copies KV rows [begin, end) of slot `src` into slot `dst`, which holds exactly `begin` rows of the
// same prefix. Rows are stored after RoPE at their positions, which the copy keeps, so they are
// exactly what recomputing the prefix would write (f16 -> f32 -> f16 is lossless).
Status Engine::copy_rows(int src, int dst, int32_t begin, int32_t end) {
  const KvCacheOptions& o = kv_.options();
  for (int l = 0; l < o.n_layer; ++l) {
    for (int h = 0; h < o.n_head_kv; ++h) {
      if (kv_.size(l, dst, h) != begin || kv_.size(l, src, h) < end || kv_.positions(l, src, h)[end - 1] != end - 1) {
        return error(ErrorCode::kInvalidArgument, "kv copy: slot {} does not hold positions [0, {}) in order", src, end);
      }
    }
  }
  const size_t hd = static_cast<size_t>(o.head_dim);
  for (int l = 0; l < o.n_layer; ++l) {
    for (int32_t p = begin; p < end; ++p) {
      for (int h = 0; h < o.n_head_kv; ++h) {
        const auto* k = static_cast<const uint8_t*>(kv_.key_row(l, src, h, p));
        const auto* v = static_cast<const uint8_t*>(kv_.value_row(l, src, h, p));
        float* kd = kbuf_.data() + h * hd;
        float* vd = vbuf_.data() + h * hd;
        if (o.dtype == DType::kF32) {
          std::memcpy(kd, k, hd * 4);
          std::memcpy(vd, v, hd * 4);
        } else {
          for (size_t i = 0; i < hd; ++i) {
            uint16_t kh, vh;
            std::memcpy(&kh, k + 2 * i, 2);
            std::memcpy(&vh, v + 2 * i, 2);
            kd[i] = fp16_to_f32(kh);
            vd[i] = fp16_to_f32(vh);
          }
        }
      }
      FRUGAL_RETURN_IF_ERROR(kv_.append(l, dst, p, kbuf_.data(), vbuf_.data()));
    }
  }
  return ok_status();
}

// One pass of sequence `r` on its own KV state, as slot 0 of its cache. Its evictor acts between
// decode steps (a round when a head holds budget + buffer tokens), exactly where it acts in a
// sequence run alone, so a policy gives the same tokens whatever else the engine runs.
Status Engine::forward_own(Active& r, const StepItem& it) {
  SequenceKv& s = *r.own;
  if (it.begin >= sched_.n_prompt(it.id)) FRUGAL_RETURN_IF_ERROR(s.evictor->step(s.cache, 0));
  const auto toks = sched_.tokens(it.id);
  own_batch_.clear();
  for (int32_t p = it.begin; p < it.end; ++p) {
    own_batch_.add(toks[static_cast<size_t>(p)], p, 0, it.logits && p + 1 == it.end);
  }
  return model_.forward(own_batch_, s.cache, backend_, r.own_logits.data(), s.observer());
}

void Engine::reserve_pages(const StepPlan& plan) {
  for (const auto& it : plan.items) {
    if (!sched_.is_running(it.id) || active_.at(it.id)->own) continue;
    const int32_t n = it.end - it.begin;
    Status st = kv_.reserve(it.slot, n);
    // Only a lack of free pages is answered by making room (a full sequence is not).
    while (!st.ok() && kv_.pages_needed(it.slot, n) > kv_.free_pages() && make_room(it.id)) {
      if (!sched_.is_running(it.id)) break;  // it was the one preempted
      st = kv_.reserve(it.slot, n);
    }
    if (!st.ok() && sched_.is_running(it.id)) {
      kv_.release(it.slot);
      finish(it.id, FinishReason::kError, st);
    }
  }
}

uint64_t Engine::ring_bytes(KvEvictor& e) const {
  const ModelConfig& mc = model_.config();
  return e.ring_bytes_per_sequence(static_cast<int>(mc.n_layer), static_cast<int>(mc.n_head),
                                   static_cast<int>(mc.head_dim));
}

int64_t Engine::pages_for(uint64_t bytes) const {
  return static_cast<int64_t>((bytes + kv_.page_bytes() - 1) / kv_.page_bytes());
}

int64_t Engine::side_pages(Active& r) {
  if (!charges_side_state() || !r.evictor) return 0;
  return pages_for(ring_bytes(*r.evictor) + r.evictor->scratch_bytes());
}

void Engine::charge_side_state(const StepPlan& plan) {
  for (const auto& it : plan.items) {
    if (!sched_.is_running(it.id)) continue;
    Active& r = *active_.at(it.id);
    if (r.own || !r.evictor) continue;
    int64_t more = side_pages(r) - r.lent_pages;
    while (more > 0 && kv_.free_pages() < more && make_room(it.id)) {
      if (!sched_.is_running(it.id)) break;  // it was the one preempted (its state is freed)
    }
    if (!sched_.is_running(it.id)) continue;
    if (more > 0 && !kv_.lend_pages(more).ok()) {
      // Alone in the pool and still short: its rounds' scratch beside its rows exceeds the budget.
      const uint64_t state = r.evictor->state_bytes();
      kv_.release(it.slot);
      release_side_state(r);
      finish(it.id, FinishReason::kError,
             error(ErrorCode::kOverBudget,
                   "kv policy '{}': its recorded queries and round scratch ({} bytes) beside the sequence's rows "
                   "exceed kv-memory {} bytes",
                   r.evictor->policy().name(), state, opts_.kv_memory));
      continue;
    }
    if (more > 0) r.lent_pages += more;
  }
}

void Engine::release_side_state(Active& r) {
  if (!r.evictor || r.own) return;
  r.evictor->release_state();
  // The rounds' scratch came from the heap, which keeps freed blocks resident: hand whole free
  // pages back, so what the pool lent is not held twice.
  if (r.lent_pages > 0) malloc_trim(0);
  kv_.return_pages(r.lent_pages);
  r.lent_pages = 0;
}

// First what nobody runs: a cached prefix. Then the newest sequence of the pool (the one that has
// done least work), which may be `for_id` itself, unless it runs alone.
bool Engine::make_room(SeqId for_id) {
  if (drop_cached_prefix()) return true;
  SeqId victim = -1;
  double newest = -1;
  for (const auto& [id, a] : active_) {
    if (a->own || !sched_.is_running(id) || kv_.pages_held(sched_.slot_of(id)) == 0) continue;
    if (victim < 0 || a->admitted > newest || (a->admitted == newest && id > victim)) {
      victim = id;
      newest = a->admitted;
    }
  }
  if (victim < 0 || (victim == for_id && sched_.n_running() == 1)) return false;
  preempt(victim);
  return true;
}

bool Engine::drop_cached_prefix(int keep_a, int keep_b) {
  const int slot = sched_.cached_free_slot(keep_a, keep_b);
  if (slot < 0) return false;
  kv_.release(slot);
  sched_.drop_cache(slot);
  return true;
}

void Engine::preempt(SeqId id) {
  Active& r = *active_.at(id);
  const int slot = sched_.slot_of(id);
  r.peak_slot_bytes = std::max(r.peak_slot_bytes, kv_.used_bytes(slot));
  kv_.release(slot);
  release_side_state(r);
  sched_.preempt(id, now_s());
  ++r.preemptions;
  std::lock_guard<std::mutex> lk(mu_);
  ++stats_.preemptions;
}

TokenId Engine::pick_token(Active& r, const float* logits) {
  const auto history = sched_.tokens(r.id);
  if (!r.matcher) return r.sampler.sample(logits, history);
  JsonMatcher& m = *r.matcher;
  JsonMatcher& scratch = *r.scratch;
  const auto allowed = [&](TokenId t) {
    if (tok_.is_eog(t)) return m.complete();
    if (blocked_[static_cast<size_t>(t)] || m.complete()) return false;
    return m.accepts(pieces_[static_cast<size_t>(t)], scratch);
  };
  // Sampling first and masking only on a miss draws from exactly the masked distribution.
  const TokenId first = r.sampler.sample(logits, history);
  if (allowed(first)) return first;
  const auto n_vocab = static_cast<size_t>(model_.config().n_vocab);
  bool any = false;
  for (size_t v = 0; v < n_vocab; ++v) {
    const bool ok = allowed(static_cast<TokenId>(v));
    masked_[v] = ok ? logits[v] : -std::numeric_limits<float>::infinity();
    any = any || ok;
  }
  if (!any) return tok_.eos() >= 0 ? tok_.eos() : first;
  return r.sampler.sample(masked_.data(), history);
}

bool Engine::wants_greedy_token(const Active& r) {
  return picks_greedy_token(r.req.sampling) && !r.matcher && r.req.logprobs < 0;
}

void Engine::on_logits(Active& r, const float* logits, TokenId chosen) {
  (void)emit(r, chosen >= 0 ? chosen : pick_token(r, logits), logits);
}

bool Engine::emit(Active& r, TokenId t, const float* logits) {
  const double now = now_s();
  if (r.first_token < 0) {
    r.first_token = now;
    if (tel_->sampler() != nullptr) (void)tel_->sampler()->sample_now(t0_steady_ + now, false);
  }
  r.last_token = now;
  TokenOutput out;
  out.id = t;
  out.piece = pieces_[static_cast<size_t>(t)];
  if (r.req.logprobs >= 0) {
    const std::span<const float> row(logits, static_cast<size_t>(model_.config().n_vocab));
    out.logprob = token_logprob(row, t);
    if (r.req.logprobs > 0) out.top = top_logprobs(row, r.req.logprobs);
  }
  ++r.generated;
  {
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.generated_tokens;
  }
  const bool eog = tok_.is_eog(t) && !r.req.ignore_eos;
  if (r.matcher && !eog) r.matcher->feed(out.piece);
  StopUpdate u = r.stop.push(t, r.detok.push(t));
  if (u.reason != StopReason::kNone) {
    if (u.reason != StopReason::kStopString) u.text += r.detok.finish();
    r.handle->push(u.text, &out);
    const FinishReason fr = u.reason == StopReason::kEog          ? FinishReason::kEos
                            : u.reason == StopReason::kStopString ? FinishReason::kStop
                                                                  : FinishReason::kLength;
    finish(r.id, fr);
    return false;
  }
  if (!sched_.append(r.id, t)) {
    StopUpdate rest = r.stop.finish();
    r.handle->push(u.text + rest.text + r.detok.finish(), &out);
    finish(r.id, FinishReason::kContext);
    return false;
  }
  r.handle->push(u.text, &out);
  return true;
}

std::string Engine::speculation_refusal(const RequestOptions& req, bool own_kv, bool evicts) const {
  if (!drafter_) return "this engine runs without a drafter (start it with --spec draft or --spec ngram)";
  if (req.json_schema) {
    return "speculative decoding does not run under a JSON schema constraint (drafts are not masked by the grammar); "
           "send \"speculative\": false or drop the schema";
  }
  if (own_kv || evicts) {
    const KvPolicyOptions& kv = req.kv ? *req.kv : opts_.kv;
    return fmt::format(
        "speculative decoding needs a keep-everything unquantized KV cache, not kv policy '{}' with kv-quant {}: "
        "rejected draft tokens cannot be rolled back out of an evicted or quantized cache",
        kv.policy, kv_quant_name(kv.quant));
  }
  return {};
}

size_t Engine::draft_rows(int slot) const {
  const std::vector<speculative::Draft>& chains = drafts_[static_cast<size_t>(slot)];
  size_t rows = 0;
  for (size_t c = 0; c < chains.size(); ++c) {
    if (chains[c].tokens.empty()) continue;
    rows += chains[c].tokens.size() + (c > 0 ? 1 : 0);
  }
  return rows;
}

bool Engine::has_drafts(int slot) const {
  for (const auto& d : drafts_[static_cast<size_t>(slot)]) {
    if (!d.tokens.empty()) return true;
  }
  return false;
}

void Engine::draft(const StepPlan& plan) {
  const int n_chains = static_cast<int>(drafts_.empty() ? 1 : drafts_.front().size());
  for (size_t slot = 0; slot < drafts_.size(); ++slot) {
    for (auto& d : drafts_[slot]) {
      d.tokens.clear();
      d.q.clear();
    }
    // Chain slots are emptied after their verify pass; one whose pass failed is emptied here.
    for (int c = 1; c < n_chains; ++c) {
      if (kv_.max_pos(chain_slot(static_cast<int>(slot), c)) >= 0) kv_.release(chain_slot(static_cast<int>(slot), c));
    }
  }
  std::vector<speculative::DraftSequence> seqs;
  std::vector<std::pair<int, int>> where;  // per seqs[i]: (slot, chain)
  std::vector<Active*> owners;
  int32_t budget = opts_.max_step_tokens - plan.n_tokens();
  for (const auto& it : plan.items) {
    if (!sched_.is_running(it.id)) continue;
    Active& r = *active_.at(it.id);
    // Decoding steps only: one token, the last sampled, whose logits pick the next.
    if (!r.draft_len || !it.logits || it.end - it.begin != 1 || it.begin < sched_.n_prompt(it.id)) continue;
    const auto toks = sched_.tokens(it.id);
    int32_t k = r.draft_len->next();
    k = std::min<int32_t>(k, slot_capacity_ - static_cast<int32_t>(toks.size()));  // rows for every draft
    if (r.req.max_tokens >= 0) k = std::min<int32_t>(k, r.req.max_tokens - static_cast<int32_t>(r.generated) - 1);
    k = std::min(k, budget);
    if (k <= 0) continue;
    // Drafts only use free pages: they never preempt or drop a cached prefix.
    if (uses_pool() && !kv_.reserve(it.slot, 1 + k).ok()) continue;
    // As many chains as the step's token budget takes (each k rows, and the last token again).
    int chains = n_chains;
    while (chains > 1 && static_cast<int64_t>(chains) * k + (chains - 1) > budget) --chains;
    budget -= chains * k + (chains - 1);
    for (int c = 0; c < chains; ++c) {
      seqs.push_back({chain_slot(it.slot, c), toks, k, &*r.draft_sampler, c});
      where.emplace_back(it.slot, c);
      owners.push_back(&r);
    }
  }
  if (seqs.empty()) return;
  std::vector<speculative::Draft> out(seqs.size());
  const double t0 = now_s();
  const Status st = drafter_->propose(seqs, out);
  const double draft_ms = (now_s() - t0) * 1e3;
  int64_t proposed = 0;
  for (const auto& d : out) proposed += static_cast<int64_t>(d.tokens.size());
  for (size_t i = 0; i < out.size() && st.ok(); ++i) {
    owners[i]->spec.draft_ms += proposed > 0 ? draft_ms * static_cast<double>(out[i].tokens.size()) / proposed
                                             : draft_ms / static_cast<double>(out.size());
  }
  if (!st.ok()) {
    // The draft model failed (a broken draft file, not the request): its sequences end with why.
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (where[i].second != 0) continue;
      auto found = std::find_if(active_.begin(), active_.end(),
                                [&](const auto& a) { return sched_.slot_of(a.first) == where[i].first; });
      if (found == active_.end()) continue;
      finish(found->first, FinishReason::kError, st.with_context("speculative drafter"));
    }
    return;
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (static_cast<int32_t>(out[i].tokens.size()) > seqs[i].max_tokens) {
      out[i].tokens.resize(static_cast<size_t>(seqs[i].max_tokens));
      out[i].q.resize(out[i].q.empty() ? 0 : out[i].tokens.size() * static_cast<size_t>(model_.config().n_vocab));
    }
    const auto [slot, c] = where[i];
    if (c > 0 && !out[i].tokens.empty()) {
      // The chain's KV slot takes the sequence's rows before its last token (shared pages) and
      // room for the last token and the chain; without free pages the chain is dropped.
      const int32_t before_last = static_cast<int32_t>(seqs[i].tokens.size()) - 1;
      const int kv_slot = chain_slot(slot, c);
      if (!kv_.share_prefix(slot, kv_slot, before_last).ok() ||
          !kv_.reserve(kv_slot, 1 + static_cast<int32_t>(out[i].tokens.size())).ok()) {
        kv_.release(kv_slot);
        continue;
      }
    }
    drafts_[static_cast<size_t>(slot)][static_cast<size_t>(c)] = std::move(out[i]);
  }
}

void Engine::verify(Active& r, const StepItem& it, const float* logits) {
  std::vector<speculative::Draft>& chains = drafts_[static_cast<size_t>(it.slot)];
  const auto n_vocab = static_cast<size_t>(model_.config().n_vocab);
  const auto toks = sched_.tokens(r.id);
  const auto n_tok = static_cast<int32_t>(toks.size());  // == it.end: the last token was just computed
  int32_t chain = 0, accepted = 0;
  TokenId next = -1;
  // rows[c][d]: the target's row after the sequence and chain c's first d tokens, in the order
  // the batch gave them (chain 0 from the slot's last token on, then each other chain's tokens).
  std::vector<std::vector<const float*>> rows(chains.size());
  const float* at = logits;
  for (size_t c = 0; c < chains.size(); ++c) {
    if (c == 0) {
      rows[c].push_back(at);
      at += n_vocab;
    } else {
      rows[c].push_back(logits);  // the same prefix: chain 0's first row
    }
    for (size_t j = 0; j < chains[c].tokens.size(); ++j) {
      rows[c].push_back(at);
      at += n_vocab;
    }
  }
  if (opts_.spec.candidates == 1) {
    const speculative::Draft& d = chains[0];
    spec_history_.assign(toks.begin(), toks.end());
    spec_history_.insert(spec_history_.end(), d.tokens.begin(), d.tokens.end());
    const speculative::Verdict v = speculative::verify_draft(logits, n_vocab, spec_history_, d, r.sampler, spec_probs_);
    accepted = v.accepted;
    next = v.next;
  } else {
    // Chains left empty (no pages, or no budget) take no part.
    std::vector<speculative::Draft> live;
    std::vector<std::vector<const float*>> live_rows;
    std::vector<int32_t> live_chain;
    for (size_t c = 0; c < chains.size(); ++c) {
      if (chains[c].tokens.empty()) continue;
      live.push_back(std::move(chains[c]));
      live_rows.push_back(rows[c]);
      live_chain.push_back(static_cast<int32_t>(c));
    }
    const speculative::ChainVerdict v = speculative::verify_chains(live_rows, n_vocab, toks, live, opts_.spec.rule,
                                                                   r.sampler, spec_probs_, spec_scratch_);
    for (size_t i = 0; i < live.size(); ++i) chains[static_cast<size_t>(live_chain[i])] = std::move(live[i]);
    chain = live_chain[static_cast<size_t>(v.chain)];
    accepted = v.accepted;
    next = v.next;
  }
  const speculative::Draft& d = chains[static_cast<size_t>(chain)];
  // Rows of rejected drafts go: positions < n_tok + accepted are the sequence's tokens so far.
  // When another chain holds them, the slot takes that chain's rows (its pages, shared).
  bool kept_rows = true;
  if (chain == 0) {
    kv_.truncate(it.slot, n_tok + accepted);
  } else {
    kept_rows = kv_.share_prefix(chain_slot(it.slot, chain), it.slot, n_tok + accepted).ok();
  }
  for (size_t c = 1; c < chains.size(); ++c) kv_.release(chain_slot(it.slot, static_cast<int>(c)));
  if (!kept_rows) {
    // Not reached: the chain's slot holds positions [0, n_tok + accepted) by construction.
    kv_.clear(it.slot);
    sched_.drop_cache(it.slot);
    finish(r.id, FinishReason::kError,
           error(ErrorCode::kCorrupt, "speculative: the kept chain's KV rows could not be taken over"));
    return;
  }
  const auto n_drafted = static_cast<int32_t>(d.tokens.size());
  r.draft_len->update(n_drafted, accepted);
  ++r.spec.passes;
  for (const auto& c : chains) r.spec.drafted += static_cast<int64_t>(c.tokens.size());
  r.spec.accepted += accepted;
  if (chain != 0 && accepted > 0) ++r.spec.other_chain;
  const SeqId id = r.id;
  const std::vector<const float*>& path = rows[static_cast<size_t>(chain)];
  for (int32_t j = 0; j <= accepted; ++j) {
    const TokenId t = j < accepted ? d.tokens[static_cast<size_t>(j)] : next;
    ++r.spec.emitted;
    if (!emit(r, t, path[static_cast<size_t>(j)])) {
      // Ended (`r` is gone): the slot keeps, as after plain decoding, the rows of the tokens before
      // the last one emitted, not those of kept drafts nobody will read.
      kv_.truncate(it.slot, n_tok + j);
      return;
    }
    // A kept draft's row is in the cache already; the target's own token is fed next step.
    if (j < accepted) sched_.set_computed(id, n_tok + j + 1);
  }
}

void Engine::finish(SeqId id, FinishReason reason, Status err) {
  auto it = active_.find(id);
  if (it == active_.end()) return;
  Active& r = *it->second;
  const double now = now_s();
  FinishedRequest f;
  f.id = id;
  f.api = r.req.api;
  f.request_id = r.req.request_id;
  f.reason = reason;
  f.error = std::move(err);
  if (reason == FinishReason::kStop) f.stop_string = std::string(r.stop.matched_stop());
  f.prompt_tokens = static_cast<int64_t>(r.req.prompt.size());
  f.generated_tokens = r.generated;
  f.seed = r.sampler.seed();
  f.speculative = r.spec;
  if (r.draft_len && drafter_) {
    f.speculative.skip_set = drafter_->skip_set();
    f.speculative.pool = drafter_->pool_report();
    f.speculative.search_ms = drafter_->search_ms() - r.search_ms_at_admission;
  }
  RequestTimings& t = f.timings;
  const double admitted = r.admitted >= 0 ? r.admitted : now;
  t.queue_ms = (admitted - r.arrival) * 1e3;
  if (r.first_token >= 0) {
    t.prefill_ms = (r.first_token - admitted) * 1e3;
    t.decode_ms = (r.last_token - r.first_token) * 1e3;
    t.ttft_ms = (r.first_token - r.arrival) * 1e3;
    t.tpot_ms = r.generated > 1 ? t.decode_ms / static_cast<double>(r.generated - 1) : 0;
  }
  t.total_ms = (now - r.arrival) * 1e3;
  t.prefill_tokens = r.prefill_tokens;
  // Decode tokens: one per plain pass, and what each verify pass produced.
  t.decode_tokens = r.decode_forwards - r.spec.passes + r.spec.emitted;
  t.cached_tokens = r.cached;
  t.prefill = r.prefill_rec;
  t.decode = r.decode_rec;
  t.cost = &tel_->cost();
  t.energy_meter = tel_->meter().describe();
  if (telemetry::HardwareSampler* hs = tel_->sampler(); hs != nullptr && r.first_token >= 0) {
    if (r.last_token > r.first_token) (void)hs->sample_now(t0_steady_ + r.last_token, false);
    t.prefill.hw = hs->summarize(t0_steady_ + admitted, t0_steady_ + r.first_token);
    t.decode.hw = hs->summarize(t0_steady_ + r.first_token, t0_steady_ + r.last_token);
  }
  if (r.own) {
    // Counts the last token in the peak (and the round it may complete), as a run alone would.
    if (r.admitted >= 0 && reason != FinishReason::kError) (void)r.own->evictor->step(r.own->cache, 0);
    f.kv = r.own->evictor->stats();
    f.kv_bytes = r.own->cache.reserved_bytes();
    f.kv_policy = r.own->evictor->policy().name();
    f.kv_quant = r.own->cache.options().quant;
  } else {
    const int slot = sched_.slot_of(id);
    if (r.evictor) {
      // Counts the last token in the peak (and the round it may complete), as a run alone would.
      if (slot >= 0 && r.admitted >= 0 && reason != FinishReason::kError) (void)r.evictor->step(kv_store(), slot);
      f.kv = r.evictor->stats();
      f.kv_policy = r.evictor->policy().name();
    }
    if (slot >= 0) r.peak_slot_bytes = std::max(r.peak_slot_bytes, kv_store().used_bytes(slot));
    f.kv.peak_used_bytes = r.peak_slot_bytes;
    f.preemptions = r.preemptions;
    f.kv_bytes = uses_pool() ? r.peak_held_bytes
                             : kv_.reserved_bytes() / static_cast<uint64_t>(std::max(opts_.n_parallel, 1));
    // An evicted slot is no prefix for anyone: its pages go back now.
    if (slot >= 0 && (r.evictor || !opts_.prefix_cache)) kv_.release(slot);
    release_side_state(r);
  }
  f.timings.kv_reserved_bytes = f.kv_bytes;
  f.timings.kv_peak_bytes = f.kv.peak_used_bytes;
  sched_.cancel(id);
  if (opts_.on_finish) opts_.on_finish(f);
  r.handle->finish(std::move(f));
  active_.erase(it);
}

}  // namespace frugal
