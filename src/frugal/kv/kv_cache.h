// KV cache: K and V kept per (layer, sequence, KV head) with a token table of positions, so a
// policy can keep a different set of tokens in every head. Keys are stored after RoPE. Eviction
// compacts a head's rows in place (keep_tokens) and positions keep counting afterwards.
//
// Unquantized caches (F16/F32) live in pages of one shared pool (kv/page_pool.h): a page holds
// `page_tokens` rows of one (layer, KV head), and every sequence has a token table
// (kv/token_table.h) listing the pages of each of its heads. A head takes pages as it grows and
// gives them back when eviction thins it or the sequence ends, so the pool's pages, not a slot per
// sequence, are what a memory budget buys: sequences of very different lengths (or budgets) share
// it. "No free page" is a value (reserve() returns kOverBudget and changes nothing), which the
// engine answers by waiting, evicting or preempting. The storage of the whole pool is reserved at
// once with pages kept out of resident memory until first written (ZeroedAllocator).
//
// Quantized caches (KvCacheOptions::quant, KIVI layout from kv_quant.h) are one sequence's own
// contiguous reservation of `capacity` tokens per head: slots [0, cold) of a head
// hold codes (keys in groups of kKvGroup slots, group g = slots [g * kKvGroup, (g + 1) * kKvGroup));
// the newest slots [cold, size) stay FP16 in a residual area until a whole key group can be
// quantized. `hyquant` keeps 2 * kKvGroup - 1 .. kKvGroup residual tokens (a recent window) and an
// FP16 copy of the tokens with the largest mean attention logit ("vertical lines", a fixed share
// of the head), chosen when their group is quantized (flush()). head_pages()/key_row() are only for
// unquantized caches; read_rows() works for every layout.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "frugal/core/dtype.h"
#include "frugal/core/zeroed_allocator.h"
#include "frugal/core/status.h"
#include "frugal/kv/kv_quant.h"
#include "frugal/kv/kv_view.h"
#include "frugal/kv/token_store.h"

namespace frugal {

// Bytes create() reserves for these options (K and V with their scales, residual and hot rows; for
// an unquantized cache, its pool of pages).
uint64_t kv_reserved_bytes(const KvCacheOptions& o);
// Pages of the pool (unquantized caches): n_pages, or what `capacity` needs in every head.
int64_t kv_pool_pages(const KvCacheOptions& o);
// Bytes of one page: page_tokens rows of K and of V.
uint64_t kv_page_bytes(const KvCacheOptions& o);
// Largest capacity (tokens per head) whose reservation fits in `bytes` for this shape and
// quantization (`o.capacity` is ignored); kOverBudget names the bytes per token when not even
// `min_tokens` fit. The one conversion from a memory budget to tokens (run, eval and serve).
Result<int32_t> kv_tokens_for_memory(const KvCacheOptions& o, uint64_t bytes, int32_t min_tokens = 1);

class KvCache final : public KvTokenStore, public KvView {
 public:
  static Result<KvCache> create(const KvCacheOptions& opts);
  KvCache();
  ~KvCache() override;
  KvCache(KvCache&&) noexcept;
  KvCache& operator=(KvCache&&) noexcept;

  const KvCacheOptions& options() const override { return opts_; }
  // Bytes of K and V storage reserved (what the cache really costs).
  uint64_t reserved_bytes() const;
  // Bytes of K and V rows holding live tokens, of every sequence or of one.
  uint64_t used_bytes() const;
  uint64_t used_bytes(int seq) const override;
  // Bytes of the pages sequences hold (unquantized; the reservation when quantized).
  uint64_t held_bytes() const;

  // Tokens held by one head.
  int32_t size(int layer, int seq, int head) const override;
  // Positions of those tokens, in time order.
  const int32_t* positions(int layer, int seq, int head) const override;
  size_t row_bytes() const { return row_bytes_; }

  KvHeadPages head_pages(int layer, int seq, int head) const override;
  // One row (unquantized caches only; nullptr otherwise or out of range).
  const void* key_row(int layer, int seq, int head, int32_t slot) const;
  const void* value_row(int layer, int seq, int head, int32_t slot) const;

  // The pool (unquantized caches; quantized ones report 0 pages).
  int64_t total_pages() const;
  int64_t free_pages() const;
  uint64_t page_bytes() const { return kv_page_bytes(opts_); }
  // Pages reserve(seq, n) would take now.
  int64_t pages_needed(int seq, int32_t n) const;
  // Pages `seq` holds (a page shared with another sequence counts for both).
  int64_t pages_held(int seq) const;
  // Pages a sequence takes from the pool to hold `rows` rows per head once it keeps rows [0, kept)
  // of `from` (itself after truncate(), or another sequence through share_prefix()); see
  // TokenTable::pages_to_grow.
  int64_t pages_to_grow(int from, bool adopted, int32_t kept, int32_t rows) const;
  // Pages the sequences `seqs` hold together, a page shared among them once.
  int64_t pages_held(const std::vector<int>& seqs) const;
  // Pages saved by sharing: references sequences hold beyond one per used page (the sum of
  // pages_held() over sequences minus the pool's used pages).
  int64_t shared_pages() const;
  // Unquantized caches: `dst`, emptied first, holds rows [0, n) of `src` in the same pages instead
  // of a copy (TokenTable::share_prefix; the first write into a shared page copies it).
  // kInvalidArgument when `src` does not hold positions 0..n-1 in every head.
  Status share_prefix(int src, int dst, int32_t n);
  // Lending. Pages taken out of the pool for memory held elsewhere on behalf of the sequences (the
  // KV policies' recorded queries and round scratch), so that memory is paid from the same budget
  // as K and V. A lent page's storage is given back to the system while it is lent (its system
  // pages wholly inside it; with page_tokens x row bytes a multiple of the system page, all of it),
  // so the resident pool shrinks by what is lent. kOverBudget (nothing taken) when fewer than `n`
  // pages are free; a cached prefix page may be reclaimed, as by a sequence.
  Status lend_pages(int64_t n);
  // Gives back up to `n` lent pages (newest first).
  void return_pages(int64_t n);
  int64_t lent_pages() const;
  // Checks that every page a sequence holds is held (never free) with a reference count equal to
  // the number of its holders (a lent page: one), and the pool's own bookkeeping; for tests.
  Status audit_pages() const;
  // Room for `n` more tokens in every head of `seq`: pages from the pool, or kOverBudget (nothing
  // changed) when the pool has too few free pages or a head would pass `capacity`. append() takes
  // room itself when none was reserved; reserving first makes a step all-or-nothing.
  Status reserve(int seq, int32_t n);
  // Every row of one head as floats, [size][head_dim] each (either pointer may be null): FP16/F32
  // rows converted, quantized rows dequantized (FP16 copies where kept). Thread-safe.
  void read_rows(int layer, int seq, int head, float* k, float* v) const override;
  // Rows [begin, end) only, written from k[0] / v[0] ([end - begin][head_dim]); quantized caches.
  void read_rows(int layer, int seq, int head, int32_t begin, int32_t end, float* k, float* v) const override;
  KvQuantHeadView quant_view(int layer, int seq, int head) const override;
  // Tokens of one head held in FP16 (residual and hot rows); 0 when not quantized.
  int32_t fp16_tokens(int layer, int seq, int head) const;
  // hyquant: quantizes the residual of every head of (layer, seq) down to the recent window,
  // scoring the flushed tokens with `qmean` ([n_head_kv][head_dim], the mean recent query of each
  // head's group; null: no scores, no new FP16 copies). A no-op for other layouts.
  void flush(int layer, int seq, const float* qmean);

  // Writes one token's K and V ([n_head_kv][head_dim] floats each) into every head of `layer`.
  // Fails with kOverBudget when a head is full.
  Status append(int layer, int seq, int32_t pos, const float* k, const float* v);
  // Most recent position written for `seq` (-1 when empty).
  int32_t max_pos(int seq) const;
  // Drops tokens with position >= pos in every layer and head of `seq` (rollback).
  void truncate(int seq, int32_t pos);
  void clear(int seq) { truncate(seq, 0); }
  // Drops every token of `seq` and gives its pages back to the pool.
  void release(int seq);
  // Keeps only the given slots (ascending indices into the head's rows) and compacts them to the
  // front, giving pages no longer needed back to the pool; used by eviction policies. kOverBudget
  // only when rows must move into a page shared with another sequence and no page is free.
  Status keep_tokens(int layer, int seq, int head, const std::vector<int32_t>& slots) override;

  // One float per token kept beside its row and compacted with it (H2O's accumulated attention).
  // Allocated on first call; a token starts at 0 when appended.
  bool enable_token_stats() override;
  bool has_token_stats() const { return !stats_.empty(); }
  float* token_stats(int layer, int seq, int head) override {
    return stats_[static_cast<size_t>(index(layer, seq, head))].data();
  }
  KvStoreShape store_shape() const override {
    return KvStoreShape{opts_.n_layer, opts_.n_seq, opts_.n_head_kv, opts_.head_dim};
  }

 private:
  int index(int layer, int seq, int head) const {
    return (layer * opts_.n_seq + seq) * opts_.n_head_kv + head;
  }
  // The pool and the sequences' token tables over it (kv_cache.cc).
  struct Paged;
  void apply_copies();
  void q_append(int idx, const float* k, const float* v);
  void q_flush_group(int idx, const float* qmean);
  void q_keep(int idx, const std::vector<int32_t>& slots);

  KvCacheOptions opts_;
  size_t row_bytes_ = 0;
  // Quantized layout (empty otherwise); cb = code bytes of a row, vg = value groups of a row.
  int bits_ = 0, cb_ = 0, vg_ = 0, res_cap_ = 0, hot_cap_ = 0;
  int hbq_words_ = 0;  // hbq: params (uint16) of one row, key or value; 0 for the KIVI formats
  // The code and row buffers are reserved for the whole capacity at once; ZeroedAllocator keeps
  // their pages out of resident memory until tokens are written into them.
  std::vector<uint8_t, ZeroedAllocator<uint8_t>> kq_, vq_;     // [head][capacity][cb]
  std::vector<uint16_t> kp_;         // [head][capacity / kKvGroup rounded up][head_dim][2] (step, min)
                                     // hbq: [head][capacity][hbq_words] (per token)
  std::vector<uint16_t> vp_;         // [head][capacity][vg][2]; hbq: [head][capacity][hbq_words]
  std::vector<uint16_t> rk_, rv_;    // [head][res_cap][head_dim] FP16 rows of slots [cold, size)
  std::vector<uint16_t> hk_, hv_;    // [head][hot_cap][head_dim] FP16 copies of hot slots
  std::vector<int32_t> hot_slot_;    // [head][hot_cap]: slot of each hot row
  std::vector<float> hot_score_;     // [head][hot_cap]
  std::vector<int32_t> hot_n_;       // [head]
  std::vector<int32_t> cold_;        // [head]: slots [0, cold) are quantized (a multiple of kKvGroup)
  std::vector<uint8_t, ZeroedAllocator<uint8_t>> k_;  // unquantized: [page][page_tokens][head_dim]
  std::vector<uint8_t, ZeroedAllocator<uint8_t>> v_;  // same
  std::unique_ptr<Paged> paged_;  // unquantized
  std::vector<int32_t> pos_;     // quantized: [layer][seq][head][capacity]
  std::vector<int32_t> len_;     // quantized: [layer][seq][head]
  std::vector<std::vector<float>> stats_;  // [layer][seq][head][size] or empty
};

}  // namespace frugal
