#include "frugal/kv/page_pool.h"

#include <cassert>

#include "frugal/core/hash.h"

namespace frugal {

PageHash chain_block_hash(PageHash parent, std::span<const int32_t> tokens) {
  // The length goes in first, so a block is never confused with a shorter one that a different
  // parent happens to extend into the same value.
  PageHash h = hash_combine(parent, tokens.size());
  for (int32_t t : tokens) h = hash_combine(h, static_cast<uint32_t>(t));
  return h;
}

PageHash prefix_page_hash(PageHash block_hash, int32_t head_index, uint64_t salt) {
  return hash_combine(hash_combine(block_hash, static_cast<uint32_t>(head_index)), salt);
}

PagePool::PagePool(int32_t n_pages) {
  const size_t n = n_pages > 0 ? static_cast<size_t>(n_pages) : 0;
  ref_.assign(n, 0);
  state_.assign(n, State::kPlainFree);
  next_.assign(n, -1);
  prev_.assign(n, -1);
  hash_.assign(n, 0);
  has_hash_.assign(n, 0);
  // Pages are handed out in id order at first, which keeps tests' expected ids simple.
  for (PageId p = 0; p < static_cast<PageId>(n); ++p) push_back(plain_free_, p);
  n_plain_free_ = static_cast<int32_t>(n);
}

void PagePool::push_back(List& list, PageId page) {
  prev_[static_cast<size_t>(page)] = list.tail;
  next_[static_cast<size_t>(page)] = -1;
  if (list.tail >= 0) next_[static_cast<size_t>(list.tail)] = page;
  else list.head = page;
  list.tail = page;
}

void PagePool::unlink(List& list, PageId page) {
  const PageId p = prev_[static_cast<size_t>(page)], n = next_[static_cast<size_t>(page)];
  if (p >= 0) next_[static_cast<size_t>(p)] = n;
  else list.head = n;
  if (n >= 0) prev_[static_cast<size_t>(n)] = p;
  else list.tail = p;
  prev_[static_cast<size_t>(page)] = next_[static_cast<size_t>(page)] = -1;
}

PageId PagePool::pop_front(List& list) {
  const PageId page = list.head;
  if (page >= 0) unlink(list, page);
  return page;
}

std::optional<PageId> PagePool::allocate() {
  PageId page = pop_front(plain_free_);
  if (page >= 0) {
    --n_plain_free_;
  } else {
    page = pop_front(cached_free_);
    if (page < 0) {
      ++counters_.no_free_page;
      return std::nullopt;
    }
    --n_cached_free_;
    ++counters_.reclaimed_cached;
    published_.erase(hash_[static_cast<size_t>(page)]);
    has_hash_[static_cast<size_t>(page)] = 0;
  }
  state_[static_cast<size_t>(page)] = State::kHeld;
  ref_[static_cast<size_t>(page)] = 1;
  ++counters_.allocated;
  return page;
}

void PagePool::retain(PageId page) {
  assert(state_[static_cast<size_t>(page)] == State::kHeld && "retain of a free page");
  ++ref_[static_cast<size_t>(page)];
}

void PagePool::release(PageId page) {
  const size_t i = static_cast<size_t>(page);
  assert(state_[i] == State::kHeld && ref_[i] > 0 && "release of a free page");
  if (state_[i] != State::kHeld || ref_[i] <= 0) return;  // never corrupt the free lists
  if (--ref_[i] > 0) return;
  if (has_hash_[i]) {
    state_[i] = State::kCachedFree;
    push_back(cached_free_, page);
    ++n_cached_free_;
  } else {
    state_[i] = State::kPlainFree;
    push_back(plain_free_, page);
    ++n_plain_free_;
  }
}

bool PagePool::publish(PageId page, PageHash hash) {
  const size_t i = static_cast<size_t>(page);
  assert(state_[i] == State::kHeld && "publish of a free page");
  if (has_hash_[i] || state_[i] != State::kHeld) return false;
  if (!published_.emplace(hash, page).second) return false;
  hash_[i] = hash;
  has_hash_[i] = 1;
  return true;
}

std::optional<PageHash> PagePool::hash_of(PageId page) const {
  const size_t i = static_cast<size_t>(page);
  if (!has_hash_[i]) return std::nullopt;
  return hash_[i];
}

std::optional<PageId> PagePool::find(PageHash hash) const {
  const auto it = published_.find(hash);
  if (it == published_.end()) return std::nullopt;
  return it->second;
}

std::optional<PageId> PagePool::acquire_cached(PageHash hash) {
  const std::optional<PageId> page = find(hash);
  if (!page) return std::nullopt;
  const size_t i = static_cast<size_t>(*page);
  if (state_[i] == State::kCachedFree) {
    unlink(cached_free_, *page);
    --n_cached_free_;
    state_[i] = State::kHeld;
  }
  ++ref_[i];
  ++counters_.prefix_hits;
  return page;
}

void PagePool::unpublish(PageId page) {
  const size_t i = static_cast<size_t>(page);
  if (!has_hash_[i]) return;
  published_.erase(hash_[i]);
  has_hash_[i] = 0;
  if (state_[i] == State::kCachedFree) {  // a free page without a hash is a plain free page
    unlink(cached_free_, page);
    --n_cached_free_;
    state_[i] = State::kPlainFree;
    push_back(plain_free_, page);
    ++n_plain_free_;
  }
}

std::optional<WritablePage> PagePool::make_writable(PageId page) {
  const size_t i = static_cast<size_t>(page);
  assert(state_[i] == State::kHeld && "make_writable of a free page");
  if (ref_[i] == 1) {
    unpublish(page);
    return WritablePage{page, std::nullopt};
  }
  const std::optional<PageId> fresh = allocate();
  if (!fresh) return std::nullopt;
  release(page);  // others still hold it: it stays held, content and hash unchanged
  ++counters_.copies_on_write;
  return WritablePage{*fresh, page};
}

Status PagePool::audit() const {
  const int32_t n = total_pages();
  std::vector<uint8_t> seen(static_cast<size_t>(n), 0);
  auto walk = [&](const List& list, State state, int32_t expected, const char* name) -> Status {
    int32_t count = 0;
    PageId prev = -1;
    for (PageId p = list.head; p >= 0; p = next_[static_cast<size_t>(p)]) {
      if (p >= n || seen[static_cast<size_t>(p)]) {
        return error(ErrorCode::kCorrupt, "page pool: page {} appears twice on the free lists", p);
      }
      seen[static_cast<size_t>(p)] = 1;
      if (prev_[static_cast<size_t>(p)] != prev) {
        return error(ErrorCode::kCorrupt, "page pool: {} list: page {} has a wrong back link", name, p);
      }
      if (state_[static_cast<size_t>(p)] != state || ref_[static_cast<size_t>(p)] != 0) {
        return error(ErrorCode::kCorrupt, "page pool: page {} on the {} list is not free (refs {})", p,
                     name, ref_[static_cast<size_t>(p)]);
      }
      if ((state == State::kCachedFree) != static_cast<bool>(has_hash_[static_cast<size_t>(p)])) {
        return error(ErrorCode::kCorrupt, "page pool: page {} on the {} list has the wrong hash state", p, name);
      }
      prev = p;
      ++count;
    }
    if (prev != list.tail) return error(ErrorCode::kCorrupt, "page pool: {} list has a wrong tail", name);
    if (count != expected) {
      return error(ErrorCode::kCorrupt, "page pool: {} list holds {} pages, counted {}", name, count, expected);
    }
    return ok_status();
  };
  FRUGAL_RETURN_IF_ERROR(walk(plain_free_, State::kPlainFree, n_plain_free_, "plain free"));
  FRUGAL_RETURN_IF_ERROR(walk(cached_free_, State::kCachedFree, n_cached_free_, "cached free"));
  size_t hashed = 0;
  for (PageId p = 0; p < n; ++p) {
    const size_t i = static_cast<size_t>(p);
    if (!seen[i] && (state_[i] != State::kHeld || ref_[i] <= 0)) {
      return error(ErrorCode::kCorrupt, "page pool: page {} is neither free nor held (refs {})", p, ref_[i]);
    }
    if (has_hash_[i]) {
      ++hashed;
      const auto it = published_.find(hash_[i]);
      if (it == published_.end() || it->second != p) {
        return error(ErrorCode::kCorrupt, "page pool: page {} has a hash the registry does not map to it", p);
      }
    }
  }
  if (hashed != published_.size()) {
    return error(ErrorCode::kCorrupt, "page pool: {} hashes registered, {} pages carry one",
                 published_.size(), hashed);
  }
  return ok_status();
}

}  // namespace frugal
