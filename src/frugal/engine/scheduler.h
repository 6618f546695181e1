// Which tokens go into the next forward step: admission of queued requests into sequence slots,
// prefix reuse, continuous batching and chunked prefill. Pure bookkeeping: it knows token ids, slot
// ids and counts, never the model or the KV storage, so every decision is testable on its own.
//
// Memory model. The KV cache is reserved once, at start-up, as n_slots slots of slot_capacity rows
// (the engine sizes them from its memory budget), so the process never allocates KV afterwards. A
// request needs one free slot for its whole life; a request whose prompt cannot fit a slot is
// refused at once, one that finds no free slot waits in FIFO order, and a waiting request is refused
// with a reason once the queue is full (max_waiting) or it has waited queue_timeout_s.
//
// A step. Every decoding sequence gets its one token first (decodes never stall behind a long
// prompt), then prefilling sequences get prompt chunks in admission order, then waiting requests
// are admitted while slots and step budget (max_step_tokens) last.
//
// Memory. With a page pool behind the slots (the engine's KV cache), a slot is not memory: the
// engine passes an admission gate that says whether the pool can take a request's prompt now, and
// when a step cannot get its pages it preempts a sequence, which goes back to the front of the
// queue with its prompt and generated tokens, to be recomputed when it is admitted again.
//
// Prefix caching. A finished sequence leaves its tokens' KV in its slot. A new request takes the
// free slot whose cached tokens share the longest prefix with its prompt (least recently used on
// ties) and keeps those rows; if another slot - running or free - shares a longer prefix by at
// least min_copy_tokens, its rows are copied instead of recomputed (a shared system prompt, or the
// n choices of one request). At least the last prompt token is always recomputed: its logits give
// the first generated token.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "frugal/core/status.h"
#include "frugal/core/token_id.h"

namespace frugal {

using SeqId = int64_t;

struct SchedulerOptions {
  int n_slots = 1;                // sequences that can run at once
  int32_t slot_capacity = 2048;   // KV rows of one slot: prompt + generated tokens of a sequence
  int32_t max_step_tokens = 512;  // tokens per forward step, decodes and prefill chunks together
  int32_t max_waiting = 64;       // queue limit: enqueue refuses beyond it
  double queue_timeout_s = 120;   // a request waiting longer is refused
  bool prefix_cache = true;       // keep finished sequences' KV for reuse
  int32_t min_copy_tokens = 16;   // copy rows from another slot only when it saves this many
};

// The engine applies an admission before running the step: truncate the slot's KV to `reused`
// rows, then, when copy_from >= 0, copy rows [reused, copy_end) from slot copy_from.
struct Admission {
  SeqId id = -1;
  int slot = -1;
  int32_t reused = 0;
  int copy_from = -1;
  int32_t copy_end = 0;
};

// The admission gate's answer (set_admission_gate).
enum class GateAnswer : uint8_t {
  kAdmit,
  kWait,         // the request and everything behind it wait
  kChooseAgain,  // the gate dropped a cached prefix the admission would have read: plan it again
};

// Tokens [begin, end) of sequence `id` (positions begin..end-1) go into this step; `logits` when
// the last of them is the sequence's last token, so a new token gets sampled from it.
struct StepItem {
  SeqId id = -1;
  int slot = -1;
  int32_t begin = 0;
  int32_t end = 0;
  bool logits = false;
};

struct Refusal {
  SeqId id = -1;
  std::string reason;
};

struct StepPlan {
  std::vector<Refusal> refused;
  std::vector<Admission> admitted;
  std::vector<StepItem> items;
  int32_t n_tokens() const;
  bool empty() const { return items.empty() && refused.empty(); }
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerOptions& opts);

  // Queues a request. kInvalidArgument when the prompt is empty or cannot fit a slot (nothing could
  // ever run it), kOverBudget when max_waiting requests already wait. `shares_kv` false: the
  // sequence keeps its KV outside the slots (its own eviction or quantization), so it neither
  // reuses a cached prefix nor offers its rows to others, and its slot caches nothing afterwards.
  Status enqueue(SeqId id, std::vector<TokenId> prompt, double now_s, bool shares_kv = true);

  // Decides the next step; admissions and refusals take effect now, the items once commit() says
  // the forward pass succeeded.
  StepPlan plan(double now_s);
  void commit(const StepPlan& plan);

  // A token sampled for `id` (after a step whose item asked for logits). False, and nothing
  // appended, when the slot has no row left for it: the sequence has reached its context.
  bool append(SeqId id, TokenId token);
  // The first `n_kv` tokens of `id` have rows in its slot (speculative decoding: appended draft
  // tokens the target kept were computed in the verify pass). Never moves backwards, never past the
  // tokens; false when `id` is not running.
  bool set_computed(SeqId id, int32_t n_kv);
  // The sequence ended (finished, cancelled or failed): its slot becomes free and keeps the
  // computed rows as a cached prefix (unless prefix caching is off).
  void release(SeqId id);
  // Forgets what slot `slot` caches (its KV rows are no longer trustworthy).
  void drop_cache(int slot);
  // Removes a waiting request or releases a running one; false when `id` is unknown.
  bool cancel(SeqId id);
  // Stops a running sequence and queues it first, its prompt and generated tokens as the prompt to
  // recompute (its slot caches nothing). False when `id` is not running.
  bool preempt(SeqId id, double now_s);
  // Asked before each admission with the admission it would make (slot, reused and shared rows)
  // and the request's prompt length, so a gate counts only the rows the request does not take
  // from a cached or running prefix. Unset: slots are the only limit.
  void set_admission_gate(std::function<GateAnswer(const Admission&, int32_t)> gate) { gate_ = std::move(gate); }
  // A free slot that caches a prefix, other than `keep_a` and `keep_b`, or -1.
  int cached_free_slot(int keep_a = -1, int keep_b = -1) const;

  bool is_running(SeqId id) const { return running_.count(id) > 0; }
  bool is_waiting(SeqId id) const;
  int n_running() const { return static_cast<int>(running_.size()); }
  int n_waiting() const { return static_cast<int>(waiting_.size()); }
  // Prompt and generated tokens of a running sequence.
  std::span<const TokenId> tokens(SeqId id) const;
  int32_t n_prompt(SeqId id) const;
  int32_t n_computed(SeqId id) const;  // rows of `id` in its slot
  int slot_of(SeqId id) const;
  // KV rows held by running sequences, and by all slots (running plus cached prefixes).
  int64_t running_rows() const;
  int64_t cached_rows() const;
  const SchedulerOptions& options() const { return opts_; }
  // Tokens whose rows slot `slot` holds (a free slot's cached prefix, or a running sequence's
  // computed tokens).
  std::span<const TokenId> slot_tokens(int slot) const;

 private:
  struct Slot {
    SeqId owner = -1;
    std::vector<TokenId> tokens;  // running: prompt + generated; free: the cached prefix
    int32_t n_kv = 0;             // rows in the KV cache
    uint64_t last_used = 0;
    bool shares_kv = true;        // false while owned by a sequence whose KV lives elsewhere
  };
  struct Waiting {
    SeqId id;
    std::vector<TokenId> prompt;
    double arrival_s;
    bool shares_kv;
  };
  struct Running {
    int slot;
    int32_t n_prompt;
    uint64_t order;  // admission order
  };

  // Where `w` would go and what it would reuse (no side effects); admit() makes it so.
  Admission choose(const Waiting& w) const;
  Admission admit(Waiting& w, const Admission& a);
  int32_t shared_prefix(int slot, std::span<const TokenId> prompt) const;
  const Slot& slot_of_seq(SeqId id) const;

  SchedulerOptions opts_;
  std::vector<Slot> slots_;
  std::deque<Waiting> waiting_;
  std::unordered_map<SeqId, Running> running_;
  uint64_t tick_ = 0;
  std::function<GateAnswer(const Admission&, int32_t)> gate_;
};

}  // namespace frugal
