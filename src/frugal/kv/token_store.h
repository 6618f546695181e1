// What an eviction round reads and thins: the token tables of a KV cache, wherever its rows live.
// The host KvCache (kv/kv_cache.h) is one; a backend that keeps its own device-resident cache
// (backend/cuda) exposes another, so the same KvEvictor and the same policies decide which tokens
// a GPU sequence keeps. Rows of one (layer, sequence, KV head) are in time order; keep_tokens()
// compacts the kept ones to the front in that order.
#pragma once

#include <cstdint>
#include <vector>

#include "frugal/core/status.h"
#include "frugal/kv/round_stats.h"

namespace frugal {

struct KvStoreShape {
  int n_layer = 0;
  int n_seq = 0;
  int n_head_kv = 0;
  int head_dim = 0;
};

class KvTokenStore {
 public:
  virtual ~KvTokenStore() = default;
  virtual KvStoreShape store_shape() const = 0;
  // Tokens held by one head, and their positions (increasing).
  virtual int32_t size(int layer, int seq, int head) const = 0;
  virtual const int32_t* positions(int layer, int seq, int head) const = 0;
  // Every row of one head as floats, [size][head_dim] each (either pointer may be null).
  virtual void read_rows(int layer, int seq, int head, float* k, float* v) const = 0;
  // Keeps only the given slots (ascending indices into the head's rows), compacted to the front.
  virtual Status keep_tokens(int layer, int seq, int head, const std::vector<int32_t>& slots) = 0;
  // Bytes of K and V rows holding live tokens of one sequence.
  virtual uint64_t used_bytes(int seq) const = 0;
  // One float per token kept beside its row (H2O's accumulated attention), allocated by
  // enable_token_stats(); a store that keeps none returns false there and null here.
  virtual bool enable_token_stats() { return false; }
  virtual float* token_stats(int layer, int seq, int head) {
    (void)layer, (void)seq, (void)head;
    return nullptr;
  }
  // The statistics a scored round reads (kv/round_stats.h) for every KV head of every layer of one
  // sequence, computed where the rows are: layers[l] is layer l's request; out[l] gets one entry per
  // KV head, each vector sized to the head's tokens (similarity: to similarity_candidates). false:
  // this store does not compute them (the round reads the rows and computes them on the host); a
  // store that has its rows on a device does, all layers in one exchange with the device. A request
  // whose `queries` is null names queries the store kept itself (Backend::keeps_queries): the j-th
  // oldest is the one at position request_pos(rq, j).
  virtual Result<bool> round_stats(int seq, const std::vector<RoundStatsRequest>& layers,
                                   std::vector<std::vector<HeadRoundStats>>& out) {
    (void)seq, (void)layers, (void)out;
    return false;
  }
};

}  // namespace frugal
