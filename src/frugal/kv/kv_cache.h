// KV cache: K and V kept per (layer, sequence, KV head) with a token table of positions, so a
// policy can keep a different set of tokens in every head. Keys are stored after RoPE. This is
// the keep-everything cache; eviction compacts a head's rows in place (keep_tokens) and positions
// keep counting afterwards.
#pragma once

#include <cstdint>
#include <vector>

#include "frugal/core/dtype.h"
#include "frugal/core/status.h"

namespace frugal {

struct KvCacheOptions {
  int n_layer = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int n_seq = 1;        // sequences that can be live at once (slot ids 0..n_seq-1)
  int capacity = 0;     // tokens per (layer, sequence, head)
  DType dtype = DType::kF16;  // kF16 (as llama.cpp) or kF32
};

class KvCache {
 public:
  static Result<KvCache> create(const KvCacheOptions& opts);

  const KvCacheOptions& options() const { return opts_; }
  // Bytes of K and V storage reserved (what the cache really costs).
  uint64_t reserved_bytes() const;
  // Bytes of K and V rows holding live tokens.
  uint64_t used_bytes() const;

  // Tokens held by one head.
  int32_t size(int layer, int seq, int head) const { return len_[index(layer, seq, head)]; }
  // Positions of those tokens, in time order.
  const int32_t* positions(int layer, int seq, int head) const {
    return pos_.data() + static_cast<size_t>(index(layer, seq, head)) * opts_.capacity;
  }
  // Rows [size][head_dim] in options().dtype.
  const void* keys(int layer, int seq, int head) const { return k_.data() + row_offset(layer, seq, head); }
  const void* values(int layer, int seq, int head) const { return v_.data() + row_offset(layer, seq, head); }
  size_t row_bytes() const { return row_bytes_; }

  // Writes one token's K and V ([n_head_kv][head_dim] floats each) into every head of `layer`.
  // Fails with kOverBudget when a head is full.
  Status append(int layer, int seq, int32_t pos, const float* k, const float* v);
  // Most recent position written for `seq` (-1 when empty).
  int32_t max_pos(int seq) const;
  // Drops tokens with position >= pos in every layer and head of `seq` (rollback).
  void truncate(int seq, int32_t pos);
  void clear(int seq) { truncate(seq, 0); }
  // Keeps only the given slots (ascending indices into the head's rows) and compacts them to the
  // front; used by eviction policies.
  void keep_tokens(int layer, int seq, int head, const std::vector<int32_t>& slots);

  // One float per token kept beside its row and compacted with it (H2O's accumulated attention).
  // Allocated on first call; a token starts at 0 when appended.
  void enable_token_stats();
  bool has_token_stats() const { return !stats_.empty(); }
  float* token_stats(int layer, int seq, int head) {
    return stats_.data() + static_cast<size_t>(index(layer, seq, head)) * opts_.capacity;
  }

 private:
  int index(int layer, int seq, int head) const {
    return (layer * opts_.n_seq + seq) * opts_.n_head_kv + head;
  }
  size_t row_offset(int layer, int seq, int head) const {
    return static_cast<size_t>(index(layer, seq, head)) * opts_.capacity * row_bytes_;
  }
  KvCacheOptions opts_;
  size_t row_bytes_ = 0;
  std::vector<uint8_t> k_;       // [layer][seq][head][capacity][head_dim]
  std::vector<uint8_t> v_;       // same
  std::vector<int32_t> pos_;     // [layer][seq][head][capacity]
  std::vector<int32_t> len_;     // [layer][seq][head]
  std::vector<float> stats_;     // [layer][seq][head][capacity] or empty
};

}  // namespace frugal
