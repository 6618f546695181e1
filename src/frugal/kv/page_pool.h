// The shared pool of KV pages (the model is vLLM's block pool). The pool knows page ids, reference
// counts, prefix hashes and the order in which free pages are handed out: nothing about models,
// tensors or what a page stores. Whoever owns the storage maps a PageId to its bytes.
//
// Life of a page. allocate() hands out a free page with one reference; retain() and release() count
// holders (sequences sharing a prompt prefix, forks of one request). A page whose last holder
// releases it becomes free again. "No free page" is a value (an empty optional), never an exception
// or an abort: the scheduler decides whether to wait, evict or preempt.
//
// Prefix sharing. A full page can be published under a hash of everything its content depends on
// (prefix_page_hash: the chain of token ids up to and including its tokens, the layer and KV head,
// the storage layout). A later request looks its own prefix up and retains the same pages instead
// of computing them again. A published page that nobody holds stays cached: it is free (it counts
// in free_pages() and can be handed out) but keeps its hash until it is reused by a lookup or
// reclaimed by allocate(). Free pages without a hash are handed out first; cached pages are
// reclaimed least recently released first, so the pages most likely to be asked for again live
// longest.
//
// Copy on write. A holder about to write into a page calls make_writable(): if others hold the page
// too, the holder gets a fresh page (its reference moves there) and must copy the rows it still
// needs from the old one; a page held alone is written in place and loses its hash (its content no
// longer matches it).
//
// Not thread-safe: one scheduler thread owns the pool.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "frugal/core/status.h"

namespace frugal {

using PageId = int32_t;
using PageHash = uint64_t;

// Hash of the block of token ids `tokens` following the prefix whose hash is `parent` (kRootPageHash
// for the first block): equal chains of token ids give equal hashes.
inline constexpr PageHash kRootPageHash = 0;
PageHash chain_block_hash(PageHash parent, std::span<const int32_t> tokens);
// The hash a page is published under: its block's chain hash, where the page sits (layer and KV
// head, as `head_index` = layer * n_head_kv + head) and `salt` (anything else its bytes depend on,
// such as the storage layout), so pages of different heads or layouts never stand in for each other.
PageHash prefix_page_hash(PageHash block_hash, int32_t head_index, uint64_t salt);

struct PagePoolCounters {
  int64_t allocated = 0;        // pages handed out by allocate() (including copies on write)
  int64_t reclaimed_cached = 0; // of which were cached prefix pages whose hash was dropped
  int64_t prefix_hits = 0;      // pages reused through acquire_cached()
  int64_t copies_on_write = 0;  // fresh pages given by make_writable()
  int64_t no_free_page = 0;     // allocations refused
};

// What make_writable() gives: the page to write into, and the page whose rows must first be copied
// into it (nullopt when the page is written in place).
struct WritablePage {
  PageId page = -1;
  std::optional<PageId> copy_from;
};

class PagePool {
 public:
  explicit PagePool(int32_t n_pages);

  int32_t total_pages() const { return static_cast<int32_t>(ref_.size()); }
  // Pages allocate() can hand out: never used, released, and cached prefix pages.
  int32_t free_pages() const { return n_plain_free_ + n_cached_free_; }
  // Of those, the ones still published under a hash.
  int32_t cached_free_pages() const { return n_cached_free_; }
  // Pages with at least one holder; used_pages() + free_pages() == total_pages().
  int32_t used_pages() const { return total_pages() - free_pages(); }

  // A free page with one reference, or nullopt when none is free.
  std::optional<PageId> allocate();
  // One more holder of a held page.
  void retain(PageId page);
  // One holder less; at zero the page becomes free (cached if it is published).
  void release(PageId page);
  int32_t ref_count(PageId page) const { return ref_[static_cast<size_t>(page)]; }

  // Publishes a held, full page under `hash`. False (nothing changes) when another page is already
  // published under it (two requests computed the same prefix: the first one stays the shared
  // one) or this page already has a hash.
  bool publish(PageId page, PageHash hash);
  std::optional<PageHash> hash_of(PageId page) const;
  // The page published under `hash`, held or cached, without taking a reference.
  std::optional<PageId> find(PageHash hash) const;
  // find() and retain(): a cached page comes back from the free pages.
  std::optional<PageId> acquire_cached(PageHash hash);
  // Drops the page's hash (its content is about to change); a no-op without one.
  void unpublish(PageId page);

  // Prepares a held page for writing: in place when the caller is its only holder (dropping its
  // hash), else a fresh page that takes over the caller's reference (nullopt, nothing changed,
  // when no page is free).
  std::optional<WritablePage> make_writable(PageId page);

  const PagePoolCounters& counters() const { return counters_; }
  // Checks the internal bookkeeping (free lists, counts, hash registry); for tests.
  Status audit() const;

 private:
  enum class State : uint8_t { kHeld, kPlainFree, kCachedFree };
  // A doubly linked list threaded through next_/prev_, so a cached page leaves the middle of the
  // free order in O(1) when a lookup revives it.
  struct List {
    PageId head = -1;
    PageId tail = -1;
  };
  void push_back(List& list, PageId page);
  void unlink(List& list, PageId page);
  PageId pop_front(List& list);

  std::vector<int32_t> ref_;      // [page] holders
  std::vector<State> state_;      // [page]
  std::vector<PageId> next_, prev_;  // [page] links of the free list the page is on
  std::vector<PageHash> hash_;    // [page] valid where has_hash_
  std::vector<uint8_t> has_hash_; // [page]
  List plain_free_;   // free pages without a hash, in release order
  List cached_free_;  // free published pages, least recently released first
  int32_t n_plain_free_ = 0;
  int32_t n_cached_free_ = 0;
  std::unordered_map<PageHash, PageId> published_;
  PagePoolCounters counters_;
};

}  // namespace frugal
