// An observer of attention: the model calls it around each layer's attention, so the KV components
// that read recent queries (the scored eviction policies snapkv, h2o, tova and rkv; hyquant's choice
// of tokens kept in FP16) get them while neither the model nor the backend knows about eviction.
#pragma once

#include <cstdint>
#include <limits>

#include "frugal/core/attention_params.h"

namespace frugal {

class KvCache;

class AttentionObserver {
 public:
  virtual ~AttentionObserver() = default;
  // Layer `layer` is about to attend: q [n][n_head][head_dim] (after RoPE) are the queries of the
  // batch's tokens, token t of sequence seq[t] at position pos[t]. Called once per layer per
  // forward step, after the step's keys and values were appended to the cache. q is null when the
  // backend kept the queries where its KV rows live (Backend::keeps_queries): an observer records
  // their positions, and the store computes what it needs from them (KvTokenStore::round_stats).
  virtual void before_attention(int layer, const int32_t* seq, const int32_t* pos, int64_t n, const float* q,
                                const AttentionParams& p) = 0;
  // Attention of `layer` has read `kv`; an observer may now change how the cache stores it
  // (quantize the newest rows) but not which tokens it holds.
  virtual void after_attention(KvCache& kv, int layer, const int32_t* seq, int64_t n) = 0;
  // How many of each sequence's newest queries of a step the observer keeps (it holds a ring of
  // recent ones): a backend that runs the pass on a device copies only those back, and the
  // observer then sees only those rows of the step (after the step, layer by layer).
  virtual int32_t recent_queries() const { return std::numeric_limits<int32_t>::max(); }
};

}  // namespace frugal
