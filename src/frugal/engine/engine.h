// The serving engine: a request queue and a step loop on its own thread that runs many sequences
// through one Model::forward per step (continuous batching: sequences join and leave between
// steps), with chunked prefill, prefix reuse and admission decided by the Scheduler. Each request
// has its own sampler (seeded), stop rules, optional JSON-schema constraint, phase timings and KV
// policy: a keep-everything request shares the slot cache (and its prefixes), any other (eviction,
// KV quantization, a memory budget) runs on a KV state of its own (sequence_kv.h). `frugal run` and
// `frugal eval` drive it too, as a batch of one (generate.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "frugal/backend/backend.h"
#include "frugal/decode/speculative/drafter.h"
#include "frugal/engine/request.h"
#include "frugal/engine/scheduler.h"
#include "frugal/engine/sequence_kv.h"
#include "frugal/engine/work.h"
#include "frugal/kv/kv_cache.h"
#include "frugal/model/model.h"
#include "frugal/tokenize/tokenizer.h"

namespace frugal {

struct EngineOptions {
  int n_parallel = 4;             // sequence slots (sequences decoded together)
  int32_t n_ctx = 0;              // context per sequence; 0: min(training context, 4096)
  uint64_t kv_memory = 0;         // KV bytes to reserve; 0: n_parallel x n_ctx rows. The cpu backend's
                                  // page pool is this size; a device cache runs as many full-context
                                  // slots as fit (at most n_parallel), shrinking the context only
                                  // when not one fits.
  DType kv_dtype = DType::kF16;
  int32_t max_step_tokens = 512;  // tokens per forward step (decodes + prefill chunks)
  int32_t max_waiting = 64;       // requests allowed to wait for a slot
  double queue_timeout_s = 120;   // longest wait for a slot before refusal
  bool prefix_cache = true;
  // Every step computes each token as a pass of its own would (Batch::row_invariant): a request's
  // output no longer depends on which other requests share its steps (the products otherwise take
  // faster batched kernels whose rounding differs with the batch's size). Slower; for
  // reproducible serving and for tests that compare outputs token for token.
  bool batch_invariant = false;
  // A prompt prefix another slot holds is taken by sharing its pages (copy on write) in the host
  // pool; false copies the rows instead (the old path, kept as a measurement baseline). A
  // device-resident cache (cuda) always copies on the device.
  bool share_prefix_pages = true;
  // KV policy of a request that names none (eviction, quantization; memory is per sequence).
  KvPolicyOptions kv;
  // Called on the engine thread once per request, whatever its end (metrics, request log).
  std::function<void(const FinishedRequest&)> on_finish;
  // Hardware sampling period of each request's phases (0: no sampler thread). The energy meter
  // is the backend's (telemetry/telemetry.h: NVML on cuda, RAPL on the CPU).
  double telemetry_period_s = 0.05;
  // Speculative decoding (cpu backend, keep-everything unquantized KV): a drafter proposes up to
  // spec.k tokens per decoding sequence and step, verified in the step's one forward pass.
  speculative::SpeculativeOptions spec;
  // Sparse prefill attention, set on the backend when the engine is made (none: dense).
  sparse::PrefillSparseOptions prefill_sparse;
  // TileMix INT8 score tiles, set on the backend when the engine is made (fraction 0: float).
  tilemix::TileMixOptions tilemix;
};

struct EngineStats {
  int running = 0;
  int waiting = 0;
  int n_slots = 0;
  int32_t slot_capacity = 0;
  int64_t kv_rows_running = 0;   // rows held by running sequences
  int64_t kv_rows_cached = 0;    // rows held by all slots (running + cached prefixes)
  int64_t kv_rows_total = 0;
  uint64_t kv_bytes = 0;         // reserved KV memory
  int64_t kv_pages_total = 0;    // the pool (0: the cache lives on the device)
  int64_t kv_pages_free = 0;
  int64_t kv_pages_running = 0;  // held by running sequences (a page they share counts once)
  int64_t kv_pages_shared = 0;   // pages saved by sharing: references beyond one per used page
  int64_t kv_pages_used_peak = 0;  // most pages in use after a step
  // Host memory the KV policies of the engine's requests hold beside the shared cache, after a
  // step: the scored policies' recorded queries and round scratch (KvEvictor::state_bytes), and the
  // caches of requests that run on a KV cache of their own (quantized, or a per-request
  // kv-memory), which are built when the request is submitted, so waiting ones count too. Not part
  // of kv_bytes. With --kv-memory on the cpu backend the evictors' part is paid from the pool:
  // the sequences borrow pages for it (kv_pages_lent, counted in the pages in use), whose storage
  // is given back while lent; the caches of their own are outside the budget.
  uint64_t kv_side_bytes = 0;
  uint64_t kv_side_bytes_peak = 0;
  int64_t kv_pages_lent = 0;       // pool pages lent to the KV policies' state after the last step
  int64_t kv_pages_lent_peak = 0;
  uint64_t preemptions = 0;      // sequences sent back to the queue for want of pages
  uint64_t steps = 0;
  uint64_t prompt_tokens = 0;    // prompt tokens of admitted requests
  uint64_t prefix_hit_tokens = 0;  // of those, reused from cached KV
  uint64_t generated_tokens = 0;
};

class Engine {
 public:
  // Reserves the KV cache and starts the loop thread.
  static Result<std::unique_ptr<Engine>> create(Model& model, const Tokenizer& tok, Backend& backend,
                                                const EngineOptions& opts);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates and queues. kInvalidArgument for a bad request (empty or too long prompt, bad
  // sampling or stop options), kOverBudget when the queue is full or the engine is shutting down.
  Result<std::shared_ptr<RequestHandle>> submit(RequestOptions req);

  EngineStats stats() const;
  int32_t context_per_sequence() const { return slot_capacity_; }
  // The KV policy of a request that names none (EngineOptions::kv).
  const KvPolicyOptions& default_kv() const { return opts_.kv; }
  const Tokenizer& tokenizer() const { return tok_; }
  const Model& model() const { return model_; }
  // What the energy meter measures, or why it measures nothing.
  const std::string& energy_meter() const { return tel_->meter().describe(); }
  // Stops the loop; running and waiting requests finish as cancelled.
  void shutdown();

 private:
  struct Active;
  Engine(Model& model, const Tokenizer& tok, Backend& backend, const EngineOptions& opts, KvCache kv,
         int32_t slot_capacity, std::unique_ptr<speculative::Drafter> drafter);
  void loop();
  void step();
  void take_incoming(double now);
  void apply_admission(const Admission& a, double now);
  // The request's next token: picked from `logits`, or `chosen` when the step already picked it
  // (a greedy step, see wants_greedy_token; `logits` is then null).
  void on_logits(Active& r, const float* logits, TokenId chosen = -1);
  // Sends token `t` (chosen from `logits`) to the request and its stop rules; false once the
  // request has ended (then `r` is gone).
  bool emit(Active& r, TokenId t, const float* logits);
  // Why request `r` cannot be decoded speculatively, or empty when it can.
  std::string speculation_refusal(const RequestOptions& req, bool own_kv, bool evicts) const;
  // Drafts for the decoding sequences of the plan that speculate (drafts_ by slot).
  void draft(const StepPlan& plan);
  // Verifies slot `it.slot`'s draft against the target's rows from `logits` (1 + draft rows),
  // rolls rejected tokens out of the KV cache and emits what was kept.
  void verify(Active& r, const StepItem& it, const float* logits);
  TokenId pick_token(Active& r, const float* logits);
  // Whether the request's token is the greedy token of its raw logits and nothing else reads them
  // (no constraint, no log-probabilities): its row may come back as a token id alone.
  static bool wants_greedy_token(const Active& r);
  void finish(SeqId id, FinishReason reason, Status error = {});
  Status forward_own(Active& r, const StepItem& it);
  Status share_or_copy_rows(const Admission& a);
  Status copy_rows(int src, int dst, int32_t begin, int32_t end);
  // The host page pool is the memory budget (cpu); a device-resident cache keeps its own slots.
  bool uses_pool() const { return backend_.name() == "cpu"; }
  // Where eviction rounds find the rows: the backend's device-resident cache, or the host pool.
  KvTokenStore& kv_store() { return device_kv_ != nullptr ? *device_kv_ : static_cast<KvTokenStore&>(kv_); }
  // Pages for every item of the plan, dropping cached prefixes and preempting the newest
  // sequences when the pool runs out.
  void reserve_pages(const StepPlan& plan);
  // With --kv-memory the pool is the budget of the KV policies' host state too (recorded queries,
  // round scratch): a sequence borrows pool pages for it (KvCache::lend_pages), the rings' full
  // size when it is admitted, more when its rounds' scratch grows, all of them back when it is
  // preempted or finishes (its state freed then). Pages a sequence's state needs now.
  bool charges_side_state() const { return uses_pool() && opts_.kv_memory > 0; }
  int64_t side_pages(Active& r);
  // One sequence's full query rings under evictor `e` on this model; pool pages holding `bytes`.
  uint64_t ring_bytes(KvEvictor& e) const;
  int64_t pages_for(uint64_t bytes) const;
  // Lends each running sequence the pages its state has grown to, making room as for KV rows.
  void charge_side_state(const StepPlan& plan);
  // A preempted or finished sequence's state and lent pages go back.
  void release_side_state(Active& r);
  void preempt(SeqId id);
  // Gives the pages of one idle slot's cached prefix (not slot keep_a or keep_b) back to the pool;
  // false when none caches one.
  bool drop_cached_prefix(int keep_a = -1, int keep_b = -1);
  // Frees pages for sequence `for_id`: a cached prefix, else a preempted sequence; false when
  // nothing can be given back.
  bool make_room(SeqId for_id);
  double now_s() const;

  Model& model_;
  const Tokenizer& tok_;
  Backend& backend_;
  EngineOptions opts_;
  KvCache kv_;
  KvTokenStore* device_kv_ = nullptr;  // the backend's own cache (cuda), else null
  int32_t slot_capacity_;
  Scheduler sched_;
  std::vector<std::string> pieces_;    // [n_vocab] token bytes, for constrained decoding
  std::vector<uint8_t> blocked_;       // [n_vocab] tokens never allowed under a constraint
  std::vector<float> logits_;          // [n_slots][n_vocab]
  std::vector<int32_t> greedy_;        // [n_slots] tokens of a step run with Model::forward_greedy
  std::vector<float> masked_;          // [n_vocab]
  std::vector<float> kbuf_, vbuf_;     // [n_head_kv * head_dim] for copying rows
  Batch batch_;
  Batch own_batch_;                    // one sequence with a KV state of its own
  std::unique_ptr<speculative::Drafter> drafter_;  // null: no speculation
  // [slot][chain] this step's drafts (chain 0 only, unless spec.candidates > 1; empty: none).
  // Chain 0 runs in the slot itself, chain c > 0 in the KV slot chain_slot(slot, c), which shares
  // the slot's rows (pages) for the pass and is emptied after it.
  std::vector<std::vector<speculative::Draft>> drafts_;
  std::vector<TokenId> spec_history_;       // tokens + a draft, for the sampler's penalties
  std::vector<float> spec_probs_;           // [n_vocab] the target's distribution at one position
  speculative::CandidateScratch spec_scratch_;
  // The KV (and draft) slot of chain c of sequence slot `slot`: past the scheduler's slots.
  int chain_slot(int slot, int c) const {
    return c == 0 ? slot : opts_.n_parallel + slot * (opts_.spec.candidates - 1) + (c - 1);
  }
  // Target rows the slot's drafts add to the pass: each chain's tokens, and the sequence's last
  // token once more in every other chain's KV slot.
  size_t draft_rows(int slot) const;
  bool has_drafts(int slot) const;
  std::vector<AttentionObserver*> slot_observers_;  // [slot] during a step's forward pass
  int64_t promised_pages_ = 0;         // pages admissions of the current plan will need
  std::chrono::steady_clock::time_point t0_;
  double t0_steady_ = 0;               // t0_ in telemetry::steady_seconds()
  std::unique_ptr<telemetry::Telemetry> tel_;
  ModelWork work_;                     // bytes and FLOPs of a pass (shared slot cache)

  // Shared with submitters.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Active>> incoming_;
  bool stop_ = false;
  std::atomic<int> n_waiting_{0};
  std::atomic<SeqId> next_id_{1};
  EngineStats stats_;  // guarded by mu_

  // Loop thread only.
  std::unordered_map<SeqId, std::unique_ptr<Active>> active_;
  std::thread thread_;
};

}  // namespace frugal
