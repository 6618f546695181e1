// Sparse prefill: a method looks at one prefill chunk of one sequence for one KV head (its query
// heads and every key of the sequence so far) and chooses, per block of 64 queries, the blocks of
// 64 keys whose scores are computed; attention then runs over those blocks only. Dense is the
// method that keeps every causal block. Whatever a method returns, select_blocks() adds the
// diagonal block (a query always sees itself and its nearest keys) and the first block (the
// attention sink) of every query block, and removes blocks past the causal diagonal.
//
// Blocks are numbered by position: key block b holds positions [64b, 64b + 64), query block b the
// queries at those positions. A method therefore needs a cache where key slot j holds position j
// (no eviction before prefill ends); the backend checks it and runs dense otherwise.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "frugal/core/status.h"

namespace frugal::sparse {

inline constexpr int kSparseBlock = 64;  // queries and keys per block

enum class Method { kNone, kMInference, kFlexPrefill, kCrisp };

const char* method_name(Method m);
// "none", "minference", "flexprefill" or "crisp"; anything else is refused with a message listing them.
Result<Method> parse_method(const std::string& value);

struct PrefillSparseOptions {
  Method method = Method::kNone;
  // A chunk whose sequence has fewer keys than min_blocks blocks runs dense (the blocks the
  // method must keep anyway are most of a short prompt).
  int32_t min_blocks = 4;
  // MInference, FlexPrefill, CRISP: queries at the end of the chunk whose attention is estimated.
  int32_t last_q = 64;
  // MInference: vertical (key) and slash (diagonal offset) indices kept per query head; 0 scales
  // the paper's 1000 and 6096 at 128k keys to the sequence's length (at least 30 and 50).
  int32_t vertical_size = 0;
  int32_t slash_size = 0;
  // FlexPrefill: the share of the estimated attention the chosen indices or blocks cover (gamma),
  // and the square-root Jensen-Shannon divergence below which a head is query-aware (tau).
  float flex_gamma = 0.9f;
  float flex_tau = 0.1f;
  // FlexPrefill: per query head, the fewest and most tokens of key blocks and of diagonal blocks
  // (each rounded up to whole 64-token blocks, as the reference's min_budget / max_budget); 0: no
  // bound. Query-aware heads keep min of each as well, as the reference does.
  int32_t flex_min_budget = 0;
  int32_t flex_max_budget = 0;
  // CRISP: the share of the non-sink mass covered at most (gamma), the multiple of the uniform
  // background an index or block needs to be kept (floor), and the structural mass C_struct from
  // which a head is vertical-slash (route).
  float crisp_gamma = 1.f;
  float crisp_floor = 4.f;
  float crisp_route = 0.5f;
};

// What sparse prefill did, summed over attention calls (one per layer and prefill chunk).
struct PrefillSparseStats {
  int64_t sparse_calls = 0;   // (layer, chunk) pairs attended through a block mask
  int64_t dense_calls = 0;    // prefill pairs that fell back to dense (too short, or evicted/windowed keys)
  int64_t blocks_kept = 0;    // (query block, key block, KV head) triples computed by the sparse calls
  int64_t blocks_causal = 0;  // the triples dense attention would have computed in those calls
  double select_ms = 0;       // time spent choosing the blocks (keys read back plus the method)
  // FlexPrefill and CRISP: query heads routed each way, and the time the routing took (summed over
  // the threads that ran it, so up to threads x the wall time it took).
  int64_t heads_vertical_slash = 0;
  int64_t heads_query_aware = 0;
  double route_ms = 0;
  double kept_fraction() const { return blocks_causal > 0 ? static_cast<double>(blocks_kept) / blocks_causal : 1.0; }
};

// Option names as the CLI spells them (without "--"): prefill-sparse, sparse-min-blocks,
// sparse-last-q, sparse-vertical, sparse-slash, flex-gamma, flex-tau, flex-min-budget, flex-max-budget,
// crisp-gamma, crisp-floor,
// crisp-route.
std::vector<std::string> option_names();
bool is_option(const std::string& name);
// Sets one option from its text; `label` names it in messages ("--sparse-slash: ...").
Status set_option(PrefillSparseOptions& o, const std::string& name, const std::string& value,
                  const std::string& label);

// One KV head's view of a prefill chunk. Query i of the chunk (position q_pos0 + i), query head h
// of the group (0 <= h < n_rep) is at q + i * token_stride + h * head_dim. Keys are the sequence's
// positions [0, n_k) as floats, [n_k][head_dim]; the chunk is the newest tokens: n_k = q_pos0 + n_q.
struct HeadInput {
  const float* q = nullptr;
  int64_t token_stride = 0;
  int n_rep = 1;
  int32_t n_q = 0;
  int32_t q_pos0 = 0;
  const float* k = nullptr;
  int32_t n_k = 0;
  int head_dim = 0;
  float scale = 1.f;
};

// The chunk's rows of a block mask: row r is query block qb0 + r and has n_kb bytes, one per key
// block (1: computed); n_kb is the number of key blocks of the sequence.
struct BlockMask {
  uint8_t* bits = nullptr;
  int32_t qb0 = 0;
  int32_t n_qb = 0;
  int32_t n_kb = 0;
  uint8_t* row(int32_t r) const { return bits + static_cast<int64_t>(r) * n_kb; }
  int64_t bytes() const { return static_cast<int64_t>(n_qb) * n_kb; }
};

// The shape of the mask of a chunk of n_q queries starting at position q_pos0 (bits unset).
BlockMask mask_shape(int32_t q_pos0, int32_t n_q);

// Reused buffers of one worker: a method grows them as it needs, so a steady state allocates
// nothing. The counters are the worker's routing tallies; the backend sums and clears them.
struct Scratch {
  std::vector<float> f;
  std::vector<int32_t> i;
  std::vector<uint8_t> b;
  int64_t heads_vertical_slash = 0;
  int64_t heads_query_aware = 0;
  double route_ms = 0;
};

class PrefillSparsity {
 public:
  virtual ~PrefillSparsity() = default;
  virtual Method method() const = 0;
  // Sets mask bits (cleared on entry) for the blocks to compute. Called concurrently for
  // different heads, each with its own scratch.
  virtual void select(const HeadInput& in, Scratch& scratch, const BlockMask& mask) const = 0;
};

// Clears the mask, runs the method, then adds the diagonal and sink blocks and clears every block
// past the diagonal. Returns the blocks kept.
int64_t select_blocks(const PrefillSparsity& m, const HeadInput& in, Scratch& scratch, const BlockMask& mask);

// Blocks on or below the diagonal of a mask's rows (what dense computes).
int64_t causal_blocks(const BlockMask& mask);

// The method of `o` (dense for kNone: it keeps every causal block).
std::unique_ptr<PrefillSparsity> make_prefill_sparsity(const PrefillSparseOptions& o);

}  // namespace frugal::sparse
