// The eviction round driver: decides when a round fires, builds each head's view for the policy
// (attention statistics only when the policy asks for them), keeps the top-scoring candidates
// plus the recency buffer (and the prompt, when protected) in time order, and compacts the cache.
// The schedule is Random Attention's: during decode, once a head holds budget + buffer tokens,
// every head of every layer is cut back to `budget` tokens, so rounds come every `buffer` steps.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "frugal/core/status.h"
#include "frugal/core/zeroed_allocator.h"
#include "frugal/kv/attention_observer.h"
#include "frugal/kv/kv_cache.h"
#include "frugal/kv/policies/policy.h"
#include "frugal/kv/round_stats.h"

namespace frugal {

// What a fractional kv-budget is a fraction of.
enum class KvBudgetBase {
  kTrace,      // the whole trace: prompt + tokens to generate
  kGenerated,  // the generated part: budget = prompt + fraction x tokens to generate (the prompt
               // fits, so with prompt protection only the generated trace is thinned, as in the
               // Random Attention paper's reasoning traces)
};

struct KvPolicyOptions {
  std::string policy = "full";  // a name from kv_policy_names()
  double budget = 0;            // >= 1: tokens per (layer, KV head); in (0, 1): that fraction of the
                                // trace or of its generated part (budget_base); 0: none (only `full`)
  KvBudgetBase budget_base = KvBudgetBase::kTrace;
  int32_t buffer = 64;          // newest tokens never evicted; also the round period in steps
  bool protect_prompt = false;  // prompt tokens are kept, counted inside the budget
  uint64_t seed = 0;            // for `random`
  KvQuant quant = KvQuant::kNone;  // storage of the cache (combinable with every policy)
  uint64_t memory = 0;          // > 0: bytes for K and V; sets the capacity (and, for an evicting
                                // policy, budget = capacity - buffer; with kv-budget too, the
                                // smaller wins)
};

// Checks the name and the numbers without a model (fails at configuration, not mid-run).
Status validate(const KvPolicyOptions& o);
// "trace" / "generated" <-> KvBudgetBase.
Result<KvBudgetBase> parse_kv_budget_base(const std::string& name);
const char* kv_budget_base_name(KvBudgetBase b);

struct KvEvictionStats {
  int32_t budget = 0;            // tokens per (layer, KV head), resolved from a fraction
  int64_t rounds = 0;            // each over every layer and head of one sequence
  double round_ms = 0;           // all rounds, everything included
  double stats_ms = 0;           // of which: attention statistics for scored policies
  uint64_t peak_used_bytes = 0;  // K+V bytes of the sequence's live tokens, highest seen between decode steps
  int32_t memory_tokens = 0;     // capacity kv-memory resolved to (0: not given)
};

class KvEvictor final : public AttentionObserver {
 public:
  // trace_len: prompt plus tokens to generate; with prompt_len, the base of a fractional budget.
  static Result<std::unique_ptr<KvEvictor>> create(const KvPolicyOptions& o, int32_t trace_len,
                                                   int32_t prompt_len);
  ~KvEvictor() override;

  bool evicts() const { return needs_.evicts; }
  const KvPolicy& policy() const { return *policy_; }
  int32_t budget() const { return stats_.budget; }
  // Tokens per head the cache must hold for this prompt: the whole context without eviction,
  // else max(prompt, budget + buffer), so memory follows the budget, not the trace.
  int32_t capacity(int32_t prompt_len, int32_t n_ctx) const;
  // Starts `seq` (call after creating the cache, before prefill). An empty cache whose layout
  // disagrees with kv-quant / kv-memory is re-created with the right one; a memory budget that
  // cannot hold the prompt is reported by the next step() or round().
  // `stream` (default: seq) is what the random policy mixes into its seed for this sequence, so a
  // request in any slot of a shared cache can draw as it would alone (stream 0).
  void begin(KvCache& kv, int seq, int32_t prompt_len, int64_t stream = -1);
  // The same for a cache whose rows live elsewhere (a backend's device-resident cache): no
  // re-creation; a policy that needs what the store does not keep (H2O's per-token statistics)
  // is reported by the next step() or round().
  void begin(KvTokenStore& kv, int seq, int32_t prompt_len, int64_t stream = -1);
  // Resolves kv-memory for this cache shape and prompt: the capacity to allocate (tokens per
  // head), updating the budget of an evicting policy; kOverBudget says why it cannot fit.
  // `trace_len` is what a non-evicting policy must hold.
  Result<int32_t> fit_memory(const KvCacheOptions& shape, int32_t prompt_len, int32_t trace_len);
  // What to pass to Model::forward as its attention observer: this evictor when the policy reads
  // attention (or hyquant chooses FP16 tokens with it), else nullptr (nothing to record).
  AttentionObserver* attention_observer();
  // Between decode steps: one round on `seq` if its heads hold budget + buffer tokens or more.
  Status step(KvTokenStore& kv, int seq);
  // One round on `seq` now (every layer and head holding more than `budget` tokens).
  Status round(KvTokenStore& kv, int seq);
  const KvEvictionStats& stats() const { return stats_; }
  // Host bytes this evictor holds beside the KV cache: its sequences' recorded queries and their
  // positions, and the scratch of its rounds (grown to the largest round so far). Ordinary heap
  // memory; the engine pays for it with pages lent from its pool when --kv-memory is its budget.
  uint64_t state_bytes() const;
  // Of those, the rounds' scratch (state_bytes() less the recorded queries).
  uint64_t scratch_bytes() const { return state_bytes() - ring_bytes_; }
  // Bytes one sequence's recorded queries reach on a model of this shape once its rings are full:
  // `buffer` queries of every layer, [n_head][head_dim] floats and a position each (0 when the
  // policy records none). Known before the first step, so a memory budget can pay for them then.
  uint64_t ring_bytes_per_sequence(int n_layer, int n_head, int head_dim);
  // Frees the recorded queries and the scratch (a sequence preempted or finished: it would
  // otherwise keep them while it waits); the next begin() starts afresh and they grow again.
  void release_state();

  // AttentionObserver: keeps the latest `buffer` queries ([n][n_head][head_dim], post-RoPE) of
  // each (layer, seq); tests may call it directly.
  void before_attention(int layer, const int32_t* seq, const int32_t* pos, int64_t n, const float* q,
                        const AttentionParams& p) override;
  // hyquant: after attention ran on `layer`, quantizes its residual, scoring tokens with the mean
  // recent query of each KV head's group.
  void after_attention(KvCache& kv, int layer, const int32_t* seq, int64_t n) override;
  int32_t recent_queries() const override { return opts_.buffer; }

 private:
  struct Ring {
    // [buffer][n_head * head_dim], unless on_store. A mapping of its own when large, so freeing it
    // (release_state) gives the memory back to the system, not to the heap.
    std::vector<float, ZeroedAllocator<float>> q;
    std::vector<int32_t> pos;    // [buffer]
    int64_t count = 0;           // queries ever recorded
    bool on_store = false;       // the queries stayed with the store's rows (observer got null)
  };
  KvEvictor() = default;
  Ring& ring(int layer, int seq) { return rings_[static_cast<size_t>(layer) * n_seq_ + seq]; }
  void begin_sequence(KvTokenStore& kv, int seq, int32_t prompt_len, int64_t stream);
  Status round_layer(KvTokenStore& kv, int layer, int seq);
  Status check_queries(const KvStoreShape& ko, int layer, int seq);
  RoundStatsRequest stats_request(const KvTokenStore& kv, int layer, int seq);
  void attention_probs(const KvTokenStore& kv, const RoundStatsRequest& rq, int layer, int seq, int head, int32_t n);
  const std::vector<int32_t>& select(const KvHeadView& v, int32_t pinned);

  KvPolicyOptions opts_;
  std::unique_ptr<KvPolicy> policy_;
  KvPolicyNeeds needs_;
  KvEvictionStats stats_;
  int n_seq_ = 0;
  std::vector<int32_t> prompt_len_;   // [seq]
  std::vector<uint64_t> stream_;      // [seq]
  std::vector<int64_t> round_no_;     // [seq]
  std::vector<int32_t> acc_pos_;      // [layer][seq]: newest query already accumulated (H2O)
  std::vector<Ring> rings_;           // [layer][seq]
  uint64_t ring_bytes_ = 0;           // what rings_' vectors hold (state_bytes, kept up to date)
  AttentionParams attn_;              // as the model last ran attention
  const KvCache* cache_ = nullptr;    // the cache begun: hyquant flushes only that one
  Status deferred_ = ok_status();     // a begin() failure, reported by step()/round()
  int32_t trace_len_ = 0;
  std::vector<float> qmean_;
  // Scratch reused across rounds.
  std::vector<float> keys_, probs_, scores_, sel_, probs_scratch_, attn_sum_, attn_last_, attn_fresh_, sim_;
  std::vector<const float*> qrows_;         // attention_probs: the query rows of a head group
  std::vector<int32_t> qrow_pos_;
  std::vector<RoundStatsRequest> requests_;                // [layer] of the round running
  std::vector<std::vector<HeadRoundStats>> layer_stats_;  // [layer][head] from the store
  bool on_store_ = false;                                  // this round's statistics came from the store
  std::vector<int32_t> keep_;
  std::vector<uint32_t> sel_keys_;  // kth_largest's scratch
};

}  // namespace frugal
