// What the scored eviction policies read of a head at a round, reduced from the attention
// matrix to vectors over its slots. snapkv and rkv read the attention every slot received from the
// recent queries, tova that of the newest query, h2o that of the queries since the last round,
// rkv also each candidate key's mean cosine similarity to the other candidates. A round of an
// 8B-shaped model computes these for 256 heads; a cache whose rows live on a device computes them
// there (KvTokenStore::round_stats), so only these vectors cross to the host, not the keys. The
// functions here are the host's way, and the reference a device's is tested against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace frugal {

// One layer of one sequence: the recorded queries and what to compute from them.
struct RoundStatsRequest {
  // The recorded queries, after RoPE, in a ring of ring_rows rows of [n_head][head_dim] with their
  // positions beside: the j-th oldest (j < nq) is row (first + j) % ring_rows. Null queries: the
  // store holds them, by position (KvTokenStore::round_stats); the positions are still here.
  const float* queries = nullptr;
  const int32_t* query_pos = nullptr;
  int nq = 0;
  int ring_rows = 0;
  int first = 0;
  int n_head = 0;                      // query heads; n_head / n_head_kv share a KV head
  int head_dim = 0;
  float scale = 0;
  int32_t window = 0;                  // > 0: a query at p sees keys at positions in (p - window, p]
  int32_t fresh_after = -1;            // `fresh` sums the queries at positions above this
  bool attention = false;              // compute attention, last, fresh
  int32_t similarity_candidates = 0;   // > 0: similarity among each head's first this many slots
};

// One KV head. Sums over the group's query heads of the softmax weights each slot received:
// `attention` from every recorded query, `last` from the newest, `fresh` from those after
// fresh_after. `similarity[i]`: the mean cosine similarity of candidate key i to the others.
struct HeadRoundStats {
  std::vector<float> attention, last, fresh, similarity;
};

// The j-th oldest query's row and position.
inline const float* request_query(const RoundStatsRequest& rq, int j) {
  return rq.queries + static_cast<std::size_t>((rq.first + j) % rq.ring_rows) * rq.n_head * rq.head_dim;
}
inline int32_t request_pos(const RoundStatsRequest& rq, int j) { return rq.query_pos[(rq.first + j) % rq.ring_rows]; }

// probs [n_rep][nq][n] (kv/attention_probs.h) -> the three sums (each [n]); the query heads are
// added outer, the queries inner, in order. query_pos[j]: the j-th oldest query's position.
void reduce_attention(const float* probs, int n_rep, int nq, int32_t n, const int32_t* query_pos,
                      int32_t fresh_after, float* attention, float* last, float* fresh);

// keys [n][head_dim] -> out[i] = mean over j != i of cos(k_i, k_j). O(n head_dim): the sum over
// j != i of u_i . u_j is u_i . (sum of all u) - u_i . u_i, with u the unit keys (a zero key has
// u = 0: similarity 0 to everything).
void key_similarity(const float* keys, int32_t n, int head_dim, float* out);

}  // namespace frugal
