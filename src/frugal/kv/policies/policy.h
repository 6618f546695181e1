// KV eviction policies. A policy has one job: given a read-only view of one (layer, sequence,
// KV head) at an eviction round, write a score per candidate token; the cache driver
// (frugal/kv/eviction.h) keeps the highest-scoring candidates plus the recency buffer, in time
// order, and compacts the head. Top-k, prompt pinning, gather and compaction live in the driver,
// so a policy never touches storage. A policy declares what it reads (KvPolicyNeeds) so the
// driver computes attention statistics only for the policies that ask, and only when a round fires.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "frugal/core/status.h"

namespace frugal {

struct KvPolicyNeeds {
  bool evicts = true;        // false: the cache is never compacted (`full`)
  bool keys = false;         // K rows as floats
  bool attention = false;    // attention the slots received from the recent queries of the head's group
  bool accumulated = false;  // attention each token received since it entered the cache (H2O)
  bool similarity = false;   // each candidate key's mean cosine similarity to the other candidates
  // With attention: only the newest query's (attention_last) is read, so a round computes the
  // softmax of that query alone (attention and attention_last are then the same vector).
  bool newest_query_only = false;
};

// One head at a round. Slots [0, n_cand) are candidates; slots [n_cand, n) are the newest tokens
// (the buffer), always kept. Pointers not asked for in needs() are null. Attention comes reduced
// to vectors over the slots (kv/round_stats.h), not as the matrix: that is all the policies read,
// and a cache whose rows are on a device computes the vectors there.
struct KvHeadView {
  int layer = 0;
  int seq = 0;
  int head = 0;
  int32_t n = 0;                       // tokens held
  int32_t n_cand = 0;                  // candidates
  int32_t n_keep = 0;                  // candidates that will survive
  const int32_t* positions = nullptr;  // [n], increasing
  int head_dim = 0;
  const float* keys = nullptr;         // [n][head_dim], post-RoPE (needs.keys)
  // needs.attention, over the n_rep query heads sharing this KV head and the n_queries most recent
  // queries; each query's weights are its softmax over the slots it could see (position <= the
  // query's, inside the sliding window), 0 elsewhere.
  int n_rep = 0;
  int n_queries = 0;
  const float* attention = nullptr;       // [n]: weights summed over the heads and queries
  const float* attention_last = nullptr;  // [n]: weights of the newest query, summed over the heads
  const float* accumulated = nullptr;     // [n] (needs.accumulated), summed over the group's heads
  const float* similarity = nullptr;      // [n_cand] (needs.similarity)
  uint64_t seed = 0;                      // distinct per (seed, sequence, round, layer, head)
};

class KvPolicy {
 public:
  virtual ~KvPolicy() = default;
  virtual std::string_view name() const = 0;
  virtual KvPolicyNeeds needs() const = 0;
  // scores[0, view.n_cand): higher is kept. Ties keep the older slot.
  virtual void score(const KvHeadView& view, float* scores) const = 0;
};

// Policies by name: full, window, random, h2o, tova, snapkv, rkv.
Result<std::unique_ptr<KvPolicy>> make_kv_policy(std::string_view name);
std::vector<std::string> kv_policy_names();

// One factory per policy file; the registry (registry.cc) lists them.
std::unique_ptr<KvPolicy> make_full_policy();
std::unique_ptr<KvPolicy> make_window_policy();
std::unique_ptr<KvPolicy> make_random_policy();
std::unique_ptr<KvPolicy> make_h2o_policy();
std::unique_ptr<KvPolicy> make_tova_policy();
std::unique_ptr<KvPolicy> make_snapkv_policy();
std::unique_ptr<KvPolicy> make_rkv_policy();

}  // namespace frugal

namespace frugal {
// SnapKV's score, shared with R-KV: mean attention of the recent queries, 1-D average pooling
// (kernel 5, zero padded) along the candidate slots, mean over the query heads of the group.
void snapkv_scores(const KvHeadView& view, float* scores);
}  // namespace frugal
