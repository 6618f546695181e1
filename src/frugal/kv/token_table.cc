#include "frugal/kv/token_table.h"

#include <algorithm>
#include <cassert>
#include <utility>

namespace frugal {

TokenTable::TokenTable(PagePool& pool, const TokenTableShape& shape)
    : pool_(&pool), shape_(shape), heads_(static_cast<size_t>(shape.n_layer * shape.n_head_kv)) {
  assert(shape.page_tokens > 0);
}

TokenTable::~TokenTable() { release_all(); }

TokenTable::TokenTable(TokenTable&& other) noexcept
    : pool_(other.pool_), shape_(other.shape_), heads_(std::move(other.heads_)),
      block_hash_(std::move(other.block_hash_)) {
  other.heads_.clear();
  other.block_hash_.clear();
}

TokenTable& TokenTable::operator=(TokenTable&& other) noexcept {
  if (this != &other) {
    release_all();
    pool_ = other.pool_;
    shape_ = other.shape_;
    heads_ = std::move(other.heads_);
    block_hash_ = std::move(other.block_hash_);
    other.heads_.clear();
    other.block_hash_.clear();
  }
  return *this;
}

PageRow TokenTable::row(int layer, int head, int32_t slot) const {
  const Head& h = head_at(layer, head);
  return PageRow{h.pages[static_cast<size_t>(slot / shape_.page_tokens)], slot % shape_.page_tokens};
}

int64_t TokenTable::pages_held() const {
  int64_t n = 0;
  for (const Head& h : heads_) n += static_cast<int64_t>(h.pages.size());
  return n;
}

int64_t TokenTable::unused_rows() const {
  int64_t n = 0;
  for (const Head& h : heads_) {
    n += static_cast<int64_t>(h.pages.size()) * shape_.page_tokens - static_cast<int64_t>(h.pos.size());
  }
  return n;
}

void TokenTable::extend_block_hashes(std::span<const int32_t> tokens, size_t n_blocks) {
  const size_t p = static_cast<size_t>(shape_.page_tokens);
  for (size_t b = block_hash_.size(); b < n_blocks; ++b) {
    const PageHash parent = b == 0 ? kRootPageHash : block_hash_[b - 1];
    block_hash_.push_back(chain_block_hash(parent, tokens.subspan(b * p, p)));
  }
}

int32_t TokenTable::reuse_prefix(std::span<const int32_t> tokens) {
  for (const Head& h : heads_) {
    assert(h.pos.empty() && "reuse_prefix on a table holding rows");
    if (!h.pos.empty()) return 0;
  }
  const size_t p = static_cast<size_t>(shape_.page_tokens);
  const size_t n_heads = heads_.size();
  std::vector<PageId> found(n_heads);
  size_t blocks = 0;
  for (;; ++blocks) {
    if ((blocks + 1) * p > tokens.size()) break;
    extend_block_hashes(tokens, blocks + 1);
    // A block is reused only when every head has it: rows of one position must exist in all heads.
    bool all = true;
    for (size_t i = 0; i < n_heads && all; ++i) {
      const auto page = pool_->find(prefix_page_hash(block_hash_[blocks], static_cast<int32_t>(i), shape_.salt));
      if (page) found[i] = *page;
      else all = false;
    }
    if (!all) break;
    for (size_t i = 0; i < n_heads; ++i) {
      const auto page = pool_->acquire_cached(prefix_page_hash(block_hash_[blocks], static_cast<int32_t>(i), shape_.salt));
      assert(page && *page == found[i]);
      Head& h = heads_[i];
      h.pages.push_back(*page);
      for (size_t r = 0; r < p; ++r) h.pos.push_back(static_cast<int32_t>(blocks * p + r));
      h.intact = static_cast<int32_t>(h.pos.size());
    }
  }
  return static_cast<int32_t>(blocks * p);
}

void TokenTable::publish_prefix(std::span<const int32_t> tokens) {
  const size_t p = static_cast<size_t>(shape_.page_tokens);
  extend_block_hashes(tokens, tokens.size() / p);
  for (size_t i = 0; i < heads_.size(); ++i) {
    const Head& h = heads_[i];
    const size_t full = std::min(static_cast<size_t>(h.intact) / p, block_hash_.size());
    for (size_t b = 0; b < full; ++b) {
      if (pool_->hash_of(h.pages[b])) continue;  // reused, or published by an earlier call
      // False when another request published the same block first; this copy then stays private.
      (void)pool_->publish(h.pages[b], prefix_page_hash(block_hash_[b], static_cast<int32_t>(i), shape_.salt));
    }
  }
}

bool TokenTable::next_row_page_is_shared(const Head& h) const {
  const size_t page = h.pos.size() / static_cast<size_t>(shape_.page_tokens);
  return page < h.pages.size() && pool_->ref_count(h.pages[page]) > 1;
}

int32_t TokenTable::pages_to_grow(int32_t kept, int32_t rows, bool adopted) const {
  const int32_t p = shape_.page_tokens;
  int32_t need = 0;
  for (const Head& h : heads_) {
    const int32_t k = std::min(kept, static_cast<int32_t>(h.pos.size()));
    need += std::max(0, pages_for(rows) - pages_for(k));
    if (k % p != 0 && (adopted || pool_->ref_count(h.pages[static_cast<size_t>(k / p)]) > 1)) ++need;
  }
  return need;
}

int32_t TokenTable::pages_needed(int32_t n) const {
  if (n <= 0) return 0;
  int32_t need = 0;
  for (const Head& h : heads_) {
    const int32_t size = static_cast<int32_t>(h.pos.size());
    need += std::max(0, pages_for(size + n) - static_cast<int32_t>(h.pages.size()));
    if (next_row_page_is_shared(h)) ++need;
  }
  return need;
}

Room TokenTable::reserve(int32_t n, std::vector<PageCopy>* copies) {
  if (n <= 0) return Room::kOk;
  // All or nothing: count first, so a refusal leaves every head as it was.
  if (pages_needed(n) > pool_->free_pages()) return Room::kNoFreePage;
  for (Head& h : heads_) {
    const int32_t size = static_cast<int32_t>(h.pos.size());
    const size_t next_page = static_cast<size_t>(size / shape_.page_tokens);
    if (next_page < h.pages.size()) {
      // Rows go into a page already held: it must be private, and it loses any hash (a truncated
      // page that was published full is about to hold other rows).
      const auto w = pool_->make_writable(h.pages[next_page]);
      assert(w && "pages_needed counted this page");
      if (w->copy_from) {
        const int32_t rows = size % shape_.page_tokens;
        if (rows > 0) copies->push_back(PageCopy{*w->copy_from, w->page, rows});
        h.pages[next_page] = w->page;
      }
    }
    while (static_cast<int32_t>(h.pages.size()) < pages_for(size + n)) {
      const auto page = pool_->allocate();
      assert(page && "pages_needed counted this page");
      h.pages.push_back(*page);
    }
  }
  return Room::kOk;
}

void TokenTable::append(int layer, int32_t pos) {
  for (int head = 0; head < shape_.n_head_kv; ++head) {
    Head& h = head_at(layer, head);
    assert(h.pos.size() < h.pages.size() * static_cast<size_t>(shape_.page_tokens) && "append without reserve");
    assert((h.pos.empty() || pos > h.pos.back()) && "positions must increase");
    if (h.intact == static_cast<int32_t>(h.pos.size()) && pos == h.intact) ++h.intact;
    h.pos.push_back(pos);
  }
}

Room TokenTable::keep(int layer, int head, std::span<const int32_t> slots, std::vector<RowMove>* moves) {
  Head& h = head_at(layer, head);
  const int32_t p = shape_.page_tokens;
  const int32_t kept = static_cast<int32_t>(slots.size());
  const int32_t new_pages = pages_for(kept);
  // Rows before the first slot that changes stay where they are; its page and every later page
  // that keeps rows get written.
  int32_t first_changed = 0;
  while (first_changed < kept && slots[static_cast<size_t>(first_changed)] == first_changed) ++first_changed;
  const int32_t first_written_page = first_changed / p;

  int32_t need = 0;
  for (int32_t j = first_written_page; j < new_pages && first_changed < kept; ++j) {
    if (pool_->ref_count(h.pages[static_cast<size_t>(j)]) > 1) ++need;
  }
  if (need > pool_->free_pages()) return Room::kNoFreePage;

  const std::vector<PageId> old_pages = h.pages;
  bool first_page_copied = false;
  for (int32_t j = first_written_page; j < new_pages && first_changed < kept; ++j) {
    const auto w = pool_->make_writable(h.pages[static_cast<size_t>(j)]);
    assert(w && "counted above");
    h.pages[static_cast<size_t>(j)] = w->page;
    if (j == first_written_page && w->copy_from) first_page_copied = true;
  }
  // A fresh copy of the first written page also needs its unchanged leading rows.
  const int32_t first_move = first_page_copied ? first_written_page * p : first_changed;
  for (int32_t i = first_move; i < kept; ++i) {
    const int32_t s = slots[static_cast<size_t>(i)];
    const PageRow from{old_pages[static_cast<size_t>(s / p)], s % p};
    const PageRow to{h.pages[static_cast<size_t>(i / p)], i % p};
    if (!(from == to)) moves->push_back(RowMove{from, to});
  }
  for (int32_t i = first_changed; i < kept; ++i) {
    h.pos[static_cast<size_t>(i)] = h.pos[static_cast<size_t>(slots[static_cast<size_t>(i)])];
  }
  h.pos.resize(static_cast<size_t>(kept));
  h.intact = std::min(h.intact, first_changed);
  release_from(h, static_cast<size_t>(new_pages));
  return Room::kOk;
}

void TokenTable::release_from(Head& h, size_t first_page) {
  // Last page first: of a published prefix, its tail is reclaimed before its head (the pool hands
  // out cached pages in release order), so a shorter shared prefix survives longer.
  while (h.pages.size() > first_page) {
    pool_->release(h.pages.back());
    h.pages.pop_back();
  }
}

void TokenTable::truncate(int32_t pos) {
  for (Head& h : heads_) {
    const auto end = std::lower_bound(h.pos.begin(), h.pos.end(), pos);
    h.pos.erase(end, h.pos.end());
    h.intact = std::min(h.intact, static_cast<int32_t>(h.pos.size()));
    release_from(h, static_cast<size_t>(pages_for(static_cast<int32_t>(h.pos.size()))));
  }
  const size_t blocks = pos > 0 ? static_cast<size_t>(pos / shape_.page_tokens) : 0;
  if (block_hash_.size() > blocks) block_hash_.resize(blocks);
}

TokenTable TokenTable::fork() const {
  TokenTable t(*pool_, shape_);
  t.heads_ = heads_;
  t.block_hash_ = block_hash_;
  for (Head& h : t.heads_) {
    // Reserved room is not shared: reserve() makes only the page of the next row private.
    h.pages.resize(static_cast<size_t>(pages_for(static_cast<int32_t>(h.pos.size()))));
    for (PageId page : h.pages) pool_->retain(page);
  }
  return t;
}

bool TokenTable::share_prefix(const TokenTable& src, int32_t n) {
  if (n <= 0 || src.pool_ != pool_ || src.shape_.salt != shape_.salt || src.heads_.size() != heads_.size()) return false;
  for (size_t i = 0; i < heads_.size(); ++i) {
    if (!heads_[i].pos.empty() || src.heads_[i].intact < n) return false;
  }
  const size_t pages = static_cast<size_t>(pages_for(n));
  for (size_t i = 0; i < heads_.size(); ++i) {
    const Head& from = src.heads_[i];
    Head& h = heads_[i];
    h.pages.assign(from.pages.begin(), from.pages.begin() + static_cast<std::ptrdiff_t>(pages));
    for (PageId page : h.pages) pool_->retain(page);
    h.pos.assign(from.pos.begin(), from.pos.begin() + n);
    h.intact = n;
  }
  return true;
}

bool TokenTable::can_append(int layer) const {
  for (int head = 0; head < shape_.n_head_kv; ++head) {
    const Head& h = head_at(layer, head);
    if (h.pos.size() >= h.pages.size() * static_cast<size_t>(shape_.page_tokens) || next_row_page_is_shared(h)) {
      return false;
    }
  }
  return true;
}

void TokenTable::release_all() {
  for (Head& h : heads_) {
    release_from(h, 0);
    h.pos.clear();
    h.intact = 0;
  }
  block_hash_.clear();
}

}  // namespace frugal
