// One generation request as the engine sees it: tokens in, per-request sampling and stop rules,
// and a handle the caller (an HTTP handler, a test) reads streamed output from.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "frugal/attention/sparse/prefill_sparsity.h"
#include "frugal/attention/tilemix/tilemix.h"
#include "frugal/decode/sampler.h"
#include "frugal/decode/stop.h"
#include "frugal/engine/json_constraint.h"
#include "frugal/kv/eviction.h"
#include "frugal/telemetry/telemetry.h"

namespace frugal {

using SeqId = int64_t;

// Phase timings of one generation: prefill and decode, as `run --json`, `bench` and eval report them,
// with each phase's energy (measured where a counter exists), work (bytes, FLOPs: the estimate's
// inputs) and sampled hardware telemetry. A forward step that carries several sequences is shared
// among them by their tokens in it: its energy and its weight reads in proportion, its KV reads and
// attention FLOPs as each sequence's own (engine/work.h).
struct Timings {
  double prefill_ms = 0;
  double decode_ms = 0;
  int64_t prefill_tokens = 0;
  int64_t decode_tokens = 0;  // forward passes during decode
  telemetry::PhaseRecord prefill, decode;
  const telemetry::CostModel* cost = nullptr;  // the estimate's constants; null: no estimate
  std::string energy_meter;     // what the meter measures, or why there is none
  uint64_t kv_reserved_bytes = 0;  // KV memory reserved for this generation
  uint64_t kv_peak_bytes = 0;      // the most K/V bytes it held at once
  // Sparse prefill (`frugal run`/`eval`; empty method: not recorded): blocks computed, and the
  // prefill chunks that fell back to dense attention.
  std::string prefill_sparse_method;
  sparse::PrefillSparseStats prefill_sparse;
  bool prefill_sparse_short_prompt = false;  // the prompt had fewer keys than min_blocks blocks: all dense
  // TileMix (`frugal run`/`eval`; fraction 0: not recorded): tiles computed in INT8, and the
  // prefill chunks that fell back to float.
  double tilemix_int8 = 0;
  tilemix::TileMixStats tilemix;
  bool tilemix_short_prompt = false;  // the prompt had fewer keys than min_blocks tiles: all float
  double prefill_tok_s() const { return prefill_ms > 0 ? prefill_tokens * 1000.0 / prefill_ms : 0; }
  double decode_tok_s() const { return decode_ms > 0 ? decode_tokens * 1000.0 / decode_ms : 0; }
};

// Per-request options (the engine's own options are EngineOptions).
struct RequestOptions {
  std::vector<TokenId> prompt;
  SamplingParams sampling;           // seed kSeedFromTime: from the clock (reported back)
  int32_t max_tokens = -1;           // -1: until end of generation or the sequence's context is full
  std::vector<std::string> stop;     // stop strings, not part of the output
  bool ignore_eos = false;
  int32_t logprobs = -1;             // -1: none; 0: the chosen token's; k > 0: and the k most likely
  std::shared_ptr<const JsonSchema> json_schema;  // constrain the output to this schema
  // Eviction policy, KV quantization and memory budget of this sequence; empty: the engine's
  // default (EngineOptions::kv). Anything but a keep-everything unquantized cache gets a KV state
  // of its own (engine/sequence_kv.h) instead of a shared slot.
  std::optional<KvPolicyOptions> kv;
  // Speculative decoding with the engine's drafter (EngineOptions::spec). Empty: when the request
  // allows it (no JSON schema, a keep-everything unquantized KV cache), else plain decoding; true:
  // required, so a request that cannot have it is refused with the reason; false: plain decoding.
  std::optional<bool> speculative;
  // Labels echoed into FinishedRequest for logs and metrics.
  std::string api;                   // "openai.chat", "anthropic.messages", ...
  std::string request_id;
};

// What speculative decoding did for one request (all zero without it).
struct SpeculativeStats {
  std::string method = "none";  // speculative::method_name()
  int32_t candidates = 1;       // drafts per verify pass (spec-candidates)
  std::string rule = "standard";  // how they are verified (speculative::candidate_rule_name())
  int64_t passes = 0;           // verify passes of the target (decode steps with a draft)
  int64_t drafted = 0;          // draft tokens proposed (of every candidate chain)
  int64_t accepted = 0;         // of those, kept
  int64_t emitted = 0;          // tokens those passes produced (accepted + one of the target's each)
  int64_t other_chain = 0;      // passes that kept tokens of a chain other than the first
  double draft_ms = 0;          // time spent drafting (a step's drafting shared by draft tokens)
  // Self-speculation (swift, conflayers): the drafter's skip set when the request ended
  // (speculative::format_skip_set(); --spec-skip-set replays it frozen), and the part of draft_ms
  // its online search took, shared alike by the sequences of the steps it ran in.
  std::string skip_set;
  double search_ms = 0;
  // memspec: the pool's state when the request ended (each draft's passes, kept tokens, loads).
  std::string pool;
  double acceptance_rate() const { return drafted > 0 ? static_cast<double>(accepted) / drafted : 0.0; }
  double tokens_per_pass() const { return passes > 0 ? static_cast<double>(emitted) / passes : 0.0; }
};

// The phase timings of one request: Timings plus what only a server has (queue, time to first
// token, time per output token). timings_json() in timings_json.h writes both with one schema.
struct RequestTimings : Timings {
  double queue_ms = 0;    // arrival to admission into a sequence slot
  double ttft_ms = 0;     // arrival to the first generated token
  double tpot_ms = 0;     // mean time per output token after the first
  double total_ms = 0;    // arrival to finish
  int64_t cached_tokens = 0;  // prompt tokens whose KV came from the prefix cache
};

struct TokenOutput {
  TokenId id = -1;
  std::string piece;  // the token's bytes (may be part of a UTF-8 character)
  float logprob = 0;  // natural log; set when RequestOptions::logprobs >= 0
  std::vector<TokenLogprob> top;
};

// Why a request ended. Values are frozen (logs).
enum class FinishReason : int {
  kEos = 0,        // an end-of-generation token
  kStop = 1,       // a stop string
  kLength = 2,     // max_tokens
  kContext = 3,    // the sequence's context is full
  kCancelled = 4,  // the caller cancelled (client went away)
  kError = 5,      // refused or failed; see FinishedRequest::error
};
// "eos", "stop", "length", "context", "cancelled", "error" (generate()'s stop_reason words).
const char* finish_reason_name(FinishReason r);

struct FinishedRequest {
  SeqId id = -1;
  std::string api;
  std::string request_id;
  FinishReason reason = FinishReason::kError;
  Status error;               // kError: why (kOverBudget for queue limits)
  std::string stop_string;    // kStop: which one
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;  // including a final end-of-generation token
  uint64_t seed = 0;
  RequestTimings timings;
  uint64_t kv_bytes = 0;         // KV for this sequence: the most pool pages it held (its own cache's
                                 // reservation; a device cache: its share of the slots)
  int64_t preemptions = 0;       // times it gave its pages back to be recomputed later
  KvEvictionStats kv;            // eviction rounds and their time, peak live KV bytes
  std::string kv_policy = "full";  // the request's KV policy and quantization
  KvQuant kv_quant = KvQuant::kNone;
  SpeculativeStats speculative;
};

// What a reader gets: text and tokens since the previous read, and the end once there is one.
struct RequestUpdate {
  std::string text;                  // valid UTF-8; never contains (the start of) a stop string
  std::vector<TokenOutput> tokens;
  bool done = false;
  FinishedRequest finished;          // valid when done
};

class RequestHandle {
 public:
  explicit RequestHandle(SeqId id) : id_(id) {}
  SeqId id() const { return id_; }

  // Waits up to `timeout` for news; false when there was none. After the update with done, further
  // calls return false at once.
  bool wait(RequestUpdate& out, std::chrono::milliseconds timeout);
  // Asks the engine to end the request (it frees the sequence at its next step).
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

  // Engine side.
  void push(std::string_view text, TokenOutput* token);
  void finish(FinishedRequest f);

 private:
  SeqId id_;
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  RequestUpdate pending_;
  bool has_news_ = false;
  bool delivered_done_ = false;
};

}  // namespace frugal
