// One sequence's token tables over the shared page pool: for every (layer, KV head) the pages that
// hold its K/V rows and the position of each row. A page holds `page_tokens` rows of one layer and
// one KV head, so when an eviction policy keeps different tokens in different heads, every head
// shrinks to the pages it still needs and the pages it frees go to other requests.
//
// Slot s of a head (its s-th row in time order) lives in row s % page_tokens of page
// pages(layer, head)[s / page_tokens]. The table decides where rows go and tells the storage owner
// which rows to copy or move; it never touches K/V bytes, so it is tested without a model.
//
// A step. Before a forward step the engine calls reserve(n) for the tokens it will add; that is the
// only call besides keep() that takes pages, and when the pool cannot give them it returns
// Room::kNoFreePage with nothing changed. append() then places the tokens in the reserved rows.
//
// Prefix sharing. reuse_prefix() adopts the published pages of an identical token prefix; after
// prefill, publish_prefix() offers this sequence's own full pages to later requests. Only pages
// whose rows are exactly positions 0, 1, 2, ... in order can be published: once a head evicted a
// token, its later pages hold a thinned trace that no other request computes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "frugal/kv/page_pool.h"

namespace frugal {

struct TokenTableShape {
  int n_layer = 0;
  int n_head_kv = 0;
  int32_t page_tokens = 16;  // rows of one (layer, KV head) per page
  uint64_t salt = 0;         // what else page contents depend on (storage layout): pages of tables
                             // with different salts are never shared
};

// Whether the pool could give the pages an operation needed; on kNoFreePage nothing changed.
enum class [[nodiscard]] Room : uint8_t { kOk, kNoFreePage };

// Where a row lives.
struct PageRow {
  PageId page = -1;
  int32_t row = 0;
  friend bool operator==(const PageRow&, const PageRow&) = default;
};

// Copy on write: before writing into `to`, copy rows [0, rows) of page `from` into it.
struct PageCopy {
  PageId from = -1;
  PageId to = -1;
  int32_t rows = 0;
};

// Compaction: copy row `from` to row `to`. Moves are listed in the order they must be applied (a
// move may read a row an earlier move has left and write a row a later move no longer reads).
struct RowMove {
  PageRow from;
  PageRow to;
};

class TokenTable {
 public:
  // The pool must outlive the table; the table releases its pages when destroyed.
  TokenTable(PagePool& pool, const TokenTableShape& shape);
  ~TokenTable();
  TokenTable(TokenTable&& other) noexcept;
  TokenTable& operator=(TokenTable&& other) noexcept;
  TokenTable(const TokenTable&) = delete;
  TokenTable& operator=(const TokenTable&) = delete;

  const TokenTableShape& shape() const { return shape_; }
  int32_t size(int layer, int head) const { return static_cast<int32_t>(head_at(layer, head).pos.size()); }
  // Positions of the rows, increasing.
  std::span<const int32_t> positions(int layer, int head) const { return head_at(layer, head).pos; }
  std::span<const PageId> pages(int layer, int head) const { return head_at(layer, head).pages; }
  PageRow row(int layer, int head, int32_t slot) const;
  // Pages held by all heads together (a page shared with another table counts here too).
  int64_t pages_held() const;
  // Rows held but not filled: the last page's tail of every head, plus reserved room.
  int64_t unused_rows() const;

  // On an empty table: adopts, page by page, the published pages of the longest prefix of `tokens`
  // (token ids of positions 0, 1, ...) that every head has published; returns the tokens reused (a
  // multiple of page_tokens). Pass at most the tokens whose rows may be reused.
  int32_t reuse_prefix(std::span<const int32_t> tokens);
  // Publishes every full page holding positions 0..k-1 untouched by eviction, where `tokens` are
  // this sequence's token ids from position 0 (the same ids every call; a prefix is enough).
  void publish_prefix(std::span<const int32_t> tokens);

  // Pages a table would take from the pool to hold `rows` rows in every head after it keeps the
  // first `kept` rows of this one: itself truncated (`adopted` false) or another table sharing
  // them (share_prefix, `adopted` true). A shared page row `kept` goes into counts one more (its
  // private copy); pages beyond `kept` that truncation would free are not counted.
  int32_t pages_to_grow(int32_t kept, int32_t rows, bool adopted) const;
  // Pages reserve(n) would take from the pool now.
  int32_t pages_needed(int32_t n) const;
  // Room for `n` more rows in every head: new pages, and a private copy of a shared page that rows
  // will be written into (each listed in `copies`, to be applied before writing).
  Room reserve(int32_t n, std::vector<PageCopy>* copies);
  // Places a token at `pos` (larger than any held) in every head of `layer`, in reserved room; its
  // rows are row(layer, head, size(layer, head) - 1).
  void append(int layer, int32_t pos);

  // Keeps only rows `slots` (ascending slot indices) of one head, compacted to the front, and
  // releases the pages no longer needed (reserved room included). A shared page that rows move
  // into is replaced by a fresh one, which is why this can need a page. `moves` lists the rows to
  // copy, in order; apply them before the next call into the pool.
  Room keep(int layer, int head, std::span<const int32_t> slots, std::vector<RowMove>* moves);
  // Drops rows at positions >= pos in every head (rollback).
  void truncate(int32_t pos);
  // A second table holding the same rows in the same pages (a fork of the request); the first write
  // into a shared page copies it.
  TokenTable fork() const;
  // On an empty table: holds rows 0..n-1 of `src` (positions 0..n-1, untouched by eviction) in the
  // same pages, one more reference each, so a request sharing a prompt prefix with a running or
  // cached sequence takes no page for it. A partial last page is shared too and made private by
  // whichever table writes into it first (reserve()), as fork() does. False, nothing changed, when
  // this table holds rows or a head of `src` does not hold positions 0..n-1 in order.
  bool share_prefix(const TokenTable& src, int32_t n);
  // Whether the next row of every head of `layer` has room in a page this table holds alone.
  bool can_append(int layer) const;
  // Releases every page; the table is empty afterwards.
  void release_all();

 private:
  struct Head {
    std::vector<PageId> pages;
    std::vector<int32_t> pos;  // [size]
    int32_t intact = 0;        // leading rows holding positions 0, 1, 2, ... (publishable)
  };
  const Head& head_at(int layer, int head) const {
    return heads_[static_cast<size_t>(layer * shape_.n_head_kv + head)];
  }
  Head& head_at(int layer, int head) { return heads_[static_cast<size_t>(layer * shape_.n_head_kv + head)]; }
  int32_t pages_for(int32_t rows) const { return (rows + shape_.page_tokens - 1) / shape_.page_tokens; }
  // The page the next row of `h` goes into when it is already held and must be made private.
  bool next_row_page_is_shared(const Head& h) const;
  void release_from(Head& h, size_t first_page);
  // Chain hashes of the first `n_blocks` page-sized blocks of `tokens`, computed once.
  void extend_block_hashes(std::span<const int32_t> tokens, size_t n_blocks);

  PagePool* pool_;
  TokenTableShape shape_;
  std::vector<Head> heads_;          // [layer * n_head_kv + head]
  std::vector<PageHash> block_hash_; // chain hash of token block b (positions b*P .. b*P+P-1)
};

}  // namespace frugal
