// Prefix sharing by page in the KV cache (TokenTable::share_prefix, KvCache::share_prefix): a
// sequence adopts another's pages instead of copying rows, the first write into a shared page
// copies it (before the write), and releasing either holder leaves the other's rows intact. Every
// row's value is a function of the tokens that produced it (the chain of token ids up to its
// position) and its (layer, head), as a real model's rows are, so a row written while shared, a
// copy taken after the write, or a row read from the wrong page shows up as a wrong value.
#include "frugal/kv/kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "frugal/core/hash.h"
#include "frugal/kv/page_pool.h"
#include "frugal/kv/token_table.h"

namespace frugal {
namespace {

constexpr int kLayers = 2;
constexpr int kHeads = 2;
constexpr int kDim = 4;
constexpr int32_t kPageTokens = 4;
constexpr int64_t kHeadsAll = kLayers * kHeads;

KvCacheOptions share_opts(int n_seq, int64_t n_pages) {
  KvCacheOptions o;
  o.n_layer = kLayers;
  o.n_head_kv = kHeads;
  o.head_dim = kDim;
  o.n_seq = n_seq;
  o.capacity = 64;
  o.page_tokens = kPageTokens;
  o.n_pages = n_pages;
  o.dtype = DType::kF32;  // values survive exactly
  return o;
}

// A value standing for row content: exact in f32 (below 2^24).
float row_value(uint64_t prefix_hash, int layer, int head, int i) {
  const uint64_t h = hash_combine(hash_combine(prefix_hash, static_cast<uint64_t>(layer * kHeads + head)), i);
  return static_cast<float>(h % 16777216u);
}

// What a sequence holds, kept without the cache: the chain hash of its tokens at every position,
// and per (layer, head) the positions it still holds (eviction thins heads differently).
struct Want {
  std::vector<uint64_t> prefix;             // [pos]
  std::vector<std::vector<int32_t>> kept =  // [layer * kHeads + head] positions, increasing
      std::vector<std::vector<int32_t>>(kHeadsAll);

  int32_t n() const { return static_cast<int32_t>(prefix.size()); }
  void push(int32_t token) {
    prefix.push_back(hash_combine(prefix.empty() ? 0x9e3779b97f4a7c15ull : prefix.back(), static_cast<uint64_t>(token)));
    for (auto& k : kept) k.push_back(n() - 1);
  }
  // Rollback: positions >= pos go from every head.
  void truncate(int32_t pos) {
    prefix.resize(static_cast<size_t>(std::min(pos, n())));
    for (auto& k : kept) k.erase(std::lower_bound(k.begin(), k.end(), pos), k.end());
  }
  // Leading positions 0, 1, 2, ... every head still holds: what another sequence may share.
  int32_t intact() const {
    int32_t m = n();
    for (const auto& k : kept) {
      int32_t i = 0;
      while (i < static_cast<int32_t>(k.size()) && k[static_cast<size_t>(i)] == i) ++i;
      m = std::min(m, i);
    }
    return m;
  }
  bool evicted() const {
    for (const auto& k : kept) {
      if (static_cast<int32_t>(k.size()) != n()) return true;
    }
    return false;
  }
  // The first n positions, whole in every head (what share_prefix(., ., n) gives).
  Want first(int32_t n_rows) const {
    Want w;
    w.prefix.assign(prefix.begin(), prefix.begin() + n_rows);
    for (auto& k : w.kept) {
      for (int32_t p = 0; p < n_rows; ++p) k.push_back(p);
    }
    return w;
  }
};

Want tokens(int n, int32_t base) {
  Want w;
  for (int i = 0; i < n; ++i) w.push(base + i);
  return w;
}

void row_of(const Want& w, int32_t pos, int layer, std::vector<float>& k, std::vector<float>& v) {
  for (int h = 0; h < kHeads; ++h) {
    for (int i = 0; i < kDim; ++i) {
      const float x = row_value(w.prefix[static_cast<size_t>(pos)], layer, h, i);
      k[static_cast<size_t>(h * kDim + i)] = x;
      v[static_cast<size_t>(h * kDim + i)] = -x;
    }
  }
}

// Writes positions [from, w.n()) of `seq` (w must hold every head whole from `from` on): reserve
// first (all or nothing), else through append() alone, which takes the room and the copy on write
// itself. The status is the reservation's (or the first failed append's).
Status write(KvCache& kv, int seq, const Want& w, int32_t from, bool reserve_first = true) {
  const int32_t n = w.n() - from;
  if (n <= 0) return ok_status();
  if (reserve_first) FRUGAL_RETURN_IF_ERROR(kv.reserve(seq, n));
  std::vector<float> k(kHeads * kDim), v(kHeads * kDim);
  for (int32_t p = from; p < w.n(); ++p) {
    for (int l = 0; l < kLayers; ++l) {
      row_of(w, p, l, k, v);
      FRUGAL_RETURN_IF_ERROR(kv.append(l, seq, p, k.data(), v.data()));
    }
  }
  return ok_status();
}

::testing::AssertionResult holds(const KvCache& kv, int seq, const Want& w) {
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 0; h < kHeads; ++h) {
      const std::vector<int32_t>& kept = w.kept[static_cast<size_t>(l * kHeads + h)];
      if (kv.size(l, seq, h) != static_cast<int32_t>(kept.size())) {
        return ::testing::AssertionFailure() << "seq " << seq << " layer " << l << " head " << h << " holds "
                                             << kv.size(l, seq, h) << " rows, not " << kept.size();
      }
      for (int32_t s = 0; s < kv.size(l, seq, h); ++s) {
        const int32_t pos = kept[static_cast<size_t>(s)];
        if (kv.positions(l, seq, h)[s] != pos) {
          return ::testing::AssertionFailure() << "seq " << seq << " layer " << l << " head " << h << " row " << s
                                               << " holds position " << kv.positions(l, seq, h)[s] << ", not " << pos;
        }
        const auto* k = static_cast<const float*>(kv.key_row(l, seq, h, s));
        const auto* v = static_cast<const float*>(kv.value_row(l, seq, h, s));
        for (int i = 0; i < kDim; ++i) {
          const float want = row_value(w.prefix[static_cast<size_t>(pos)], l, h, i);
          if (k[i] != want || v[i] != -want) {
            return ::testing::AssertionFailure() << "seq " << seq << " layer " << l << " head " << h << " row " << s
                                                 << " (position " << pos << ") holds another row's K/V";
          }
        }
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// Checks the page bookkeeping: every page holding rows belongs to one (layer, head) index whoever
// holds it, no sequence holds a page twice, no more pages hold rows than the pool counts used, and
// the pool's reference counts equal the holders (audit_pages).
::testing::AssertionResult pages_consistent(const KvCache& kv, int n_seq) {
  std::map<PageId, int> head_of;  // page -> layer * kHeads + head
  for (int s = 0; s < n_seq; ++s) {
    std::map<PageId, int> mine;
    for (int l = 0; l < kLayers; ++l) {
      for (int h = 0; h < kHeads; ++h) {
        const KvHeadPages hp = kv.head_pages(l, s, h);
        for (int32_t j = 0; j < (hp.size + kPageTokens - 1) / kPageTokens; ++j) {
          const PageId p = hp.pages[j];
          if (p < 0 || p >= kv.total_pages()) return ::testing::AssertionFailure() << "page id " << p;
          if (++mine[p] > 1) return ::testing::AssertionFailure() << "seq " << s << " holds page " << p << " twice";
          const auto [it, fresh] = head_of.emplace(p, l * kHeads + h);
          if (!fresh && it->second != l * kHeads + h) {
            return ::testing::AssertionFailure() << "page " << p << " holds rows of two heads";
          }
        }
      }
    }
  }
  if (static_cast<int64_t>(head_of.size()) > kv.total_pages() - kv.free_pages()) {
    return ::testing::AssertionFailure() << head_of.size() << " pages hold rows but only "
                                         << kv.total_pages() - kv.free_pages() << " are used";
  }
  const Status audit = kv.audit_pages();
  if (!audit.ok()) return ::testing::AssertionFailure() << audit.message();
  return ::testing::AssertionSuccess();
}

// --- The token table over the pool: exact page ids and reference counts. ---

TokenTableShape table_shape() {
  TokenTableShape s;
  s.n_layer = 1;
  s.n_head_kv = 2;
  s.page_tokens = 4;
  return s;
}

void fill(TokenTable& t, int32_t from, int32_t to, std::vector<PageCopy>* copies) {
  ASSERT_EQ(t.reserve(to - from, copies), Room::kOk);
  for (int32_t pos = from; pos < to; ++pos) t.append(0, pos);
}

std::vector<PageId> pages_of(const TokenTable& t, int head) {
  const auto p = t.pages(0, head);
  return {p.begin(), p.end()};
}

TEST(TableShare, RetainsThePagesOfThePrefixOnlyAndCopiesTheTailOnTheFirstWrite) {
  PagePool pool(16);
  TokenTable a(pool, table_shape()), b(pool, table_shape());
  std::vector<PageCopy> copies;
  fill(a, 0, 10, &copies);
  ASSERT_EQ(a.reserve(4, &copies), Room::kOk);  // room past the rows: pages 6 and 7, no row yet
  EXPECT_EQ(pages_of(a, 0), (std::vector<PageId>{0, 1, 2, 6}));
  EXPECT_EQ(pool.free_pages(), 8);
  ASSERT_TRUE(b.share_prefix(a, 10));
  EXPECT_EQ(pages_of(b, 0), (std::vector<PageId>{0, 1, 2})) << "reserved room is not shared";
  EXPECT_EQ(pages_of(b, 1), (std::vector<PageId>{3, 4, 5}));
  for (PageId p : {0, 1, 2, 3, 4, 5}) EXPECT_EQ(pool.ref_count(p), 2) << "page " << p;
  EXPECT_EQ(pool.ref_count(6), 1);
  EXPECT_EQ(pool.free_pages(), 8) << "sharing took a page";
  EXPECT_FALSE(b.share_prefix(a, 4)) << "share_prefix into a table holding rows";
  EXPECT_EQ(pool.ref_count(0), 2);
  EXPECT_EQ(b.pages_needed(1), 2) << "the next row of each head lands in a shared page";
  EXPECT_EQ(a.pages_to_grow(10, 11, /*adopted=*/true), 2);
  EXPECT_EQ(a.pages_to_grow(8, 13, /*adopted=*/true), 4) << "a page-aligned prefix needs no copy";

  // b writes first: each head gets a fresh page and is told to copy the 2 rows it keeps, before
  // its write; a's page is a's alone again.
  copies.clear();
  ASSERT_EQ(b.reserve(1, &copies), Room::kOk);
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0].from, 2);
  EXPECT_EQ(copies[1].from, 5);
  for (const PageCopy& c : copies) {
    EXPECT_EQ(c.rows, 2);
    EXPECT_EQ(pool.ref_count(c.to), 1);
  }
  EXPECT_EQ(pages_of(b, 0), (std::vector<PageId>{0, 1, copies[0].to}));
  EXPECT_EQ(pages_of(b, 1), (std::vector<PageId>{3, 4, copies[1].to}));
  EXPECT_EQ(pool.ref_count(2), 1);
  EXPECT_EQ(pool.ref_count(5), 1);
  EXPECT_EQ(pool.free_pages(), 6);
  b.append(0, 10);
  copies.clear();
  ASSERT_EQ(a.reserve(1, &copies), Room::kOk);
  EXPECT_TRUE(copies.empty()) << "a holds its tail alone and writes it in place";
  EXPECT_EQ(pool.free_pages(), 6);

  // Freeing: the source first, then the sharer; a page is free when its last holder goes.
  a.release_all();
  EXPECT_EQ(pool.ref_count(0), 1);
  EXPECT_EQ(pool.ref_count(2), 0);
  EXPECT_EQ(pool.free_pages(), 6 + 4) << "a's own tail pages and its room come back, the shared ones stay";
  b.release_all();
  EXPECT_EQ(pool.free_pages(), 16);
  ASSERT_TRUE(pool.audit().ok());
}

TEST(TableShare, ThreeHoldersFreeInAnyOrder) {
  // Every order of releasing a source and two sharers (one of a shorter prefix) gives every page
  // back exactly when its last holder goes.
  std::vector<int> order = {0, 1, 2};
  do {
    PagePool pool(32);
    std::vector<TokenTable> t;
    for (int i = 0; i < 3; ++i) t.emplace_back(pool, table_shape());
    std::vector<PageCopy> copies;
    fill(t[0], 0, 9, &copies);              // 3 pages per head
    ASSERT_TRUE(t[1].share_prefix(t[0], 9));
    ASSERT_TRUE(t[2].share_prefix(t[1], 5));  // pages 0 and 1 of each head: three holders
    EXPECT_EQ(pool.ref_count(t[0].pages(0, 0)[0]), 3);
    EXPECT_EQ(pool.ref_count(t[0].pages(0, 0)[2]), 2);
    std::vector<bool> live = {true, true, true};
    for (int who : order) {
      t[static_cast<size_t>(who)].release_all();
      live[static_cast<size_t>(who)] = false;
      // Pages of head 0 block j are held by the live tables holding block j.
      int32_t want_free = 32;
      for (int j = 0; j < 3; ++j) {
        const bool held = live[0] || live[1] || (j < 2 && live[2]);
        if (held) want_free -= 2;  // one page per head
      }
      EXPECT_EQ(pool.free_pages(), want_free) << "after releasing " << who;
      ASSERT_TRUE(pool.audit().ok());
    }
  } while (std::next_permutation(order.begin(), order.end()));
}

TEST(TableShare, NoFreePageForTheCopyIsAValueAndChangesNothing) {
  PagePool pool(6);
  TokenTable a(pool, table_shape()), b(pool, table_shape());
  std::vector<PageCopy> copies;
  fill(a, 0, 10, &copies);  // all 6 pages
  ASSERT_TRUE(b.share_prefix(a, 10));
  EXPECT_EQ(b.reserve(1, &copies), Room::kNoFreePage);
  EXPECT_EQ(a.reserve(1, &copies), Room::kNoFreePage) << "the source needs its own copy as well";
  EXPECT_EQ(pages_of(a, 0), pages_of(b, 0));
  EXPECT_EQ(pool.ref_count(a.pages(0, 0)[2]), 2);
  EXPECT_EQ(pool.free_pages(), 0);
  ASSERT_TRUE(pool.audit().ok());
  b.release_all();  // the sharer goes: the source writes in place again
  copies.clear();
  EXPECT_EQ(a.reserve(1, &copies), Room::kOk);
  EXPECT_TRUE(copies.empty());
}

// --- The cache: K/V contents. ---

// 10 rows: two full pages shared, the third (2 rows) shared until one writes into it.
TEST(KvShare, SharesFullPagesAndCopiesTheTailOnFirstWrite) {
  auto kv = KvCache::create(share_opts(2, 16 * kHeadsAll));
  ASSERT_TRUE(kv.ok());
  Want a = tokens(10, 100);
  ASSERT_TRUE(write(*kv, 0, a, 0).ok());
  EXPECT_EQ(kv->free_pages(), 13 * kHeadsAll);
  ASSERT_TRUE(kv->share_prefix(0, 1, 10).ok());
  Want b = a;
  EXPECT_EQ(kv->free_pages(), 13 * kHeadsAll) << "sharing took pages";
  EXPECT_EQ(kv->shared_pages(), 3 * kHeadsAll);
  EXPECT_EQ(kv->pages_held(1), 3 * kHeadsAll);
  EXPECT_EQ(kv->pages_held(std::vector<int>{0, 1}), 3 * kHeadsAll) << "a page both hold counts once";
  EXPECT_EQ(kv->pages_needed(1, 1), kHeadsAll) << "the copy of the shared tail";
  EXPECT_EQ(kv->pages_to_grow(0, true, 10, 11), kHeadsAll);
  EXPECT_TRUE(pages_consistent(*kv, 2));
  // b writes first: its partial page is copied, a's stays where it was.
  b.push(7);
  ASSERT_TRUE(write(*kv, 1, b, 10).ok());
  EXPECT_EQ(kv->free_pages(), 12 * kHeadsAll);
  EXPECT_EQ(kv->shared_pages(), 2 * kHeadsAll);
  a.push(8);
  ASSERT_TRUE(write(*kv, 0, a, 10).ok());
  EXPECT_EQ(kv->free_pages(), 12 * kHeadsAll) << "a held its tail page alone and writes it in place";
  EXPECT_EQ(kv->pages_held(std::vector<int>{0, 1}), 4 * kHeadsAll);
  EXPECT_EQ(kv->pages_held(std::vector<int>{1}), 3 * kHeadsAll);
  EXPECT_TRUE(holds(*kv, 0, a));
  EXPECT_TRUE(holds(*kv, 1, b));
  EXPECT_TRUE(pages_consistent(*kv, 2));
}

// The source writes first, through append() alone (no reservation): the copy is still taken
// before the write, and the sharer keeps the source's old rows.
TEST(KvShare, TheSourceWritingFirstThroughAppendCopiesToo) {
  auto kv = KvCache::create(share_opts(2, 16 * kHeadsAll));
  ASSERT_TRUE(kv.ok());
  Want a = tokens(11, 100);
  ASSERT_TRUE(write(*kv, 0, a, 0).ok());
  kv->truncate(0, 6);  // a rollback into the second page; rows 6.. of it were written once
  a.truncate(6);
  ASSERT_TRUE(kv->share_prefix(0, 1, 6).ok());
  Want b = a;
  a.push(1);
  a.push(2);
  ASSERT_TRUE(write(*kv, 0, a, 6, /*reserve_first=*/false).ok());
  b.push(3);
  ASSERT_TRUE(write(*kv, 1, b, 6, /*reserve_first=*/false).ok());
  EXPECT_TRUE(holds(*kv, 0, a));
  EXPECT_TRUE(holds(*kv, 1, b));
  EXPECT_EQ(kv->shared_pages(), kHeadsAll) << "only the first pages are still shared";
  EXPECT_TRUE(pages_consistent(*kv, 2));
}

// The source goes (finished, preempted or evicted from the cache): the sharer keeps its rows, grows
// past them, and at the end every page is free again.
TEST(KvShare, ReleasingTheSourceKeepsTheSharersRowsAndEveryPageComesBack) {
  auto kv = KvCache::create(share_opts(3, 12 * kHeadsAll));
  ASSERT_TRUE(kv.ok());
  Want a = tokens(9, 1);
  ASSERT_TRUE(write(*kv, 0, a, 0).ok());
  ASSERT_TRUE(kv->share_prefix(0, 1, 8).ok());
  ASSERT_TRUE(kv->share_prefix(1, 2, 5).ok());
  Want b = a.first(8), c = a.first(5);
  EXPECT_EQ(kv->shared_pages(), (2 + 2) * kHeadsAll);
  kv->release(0);
  EXPECT_EQ(kv->free_pages(), (12 - 2) * kHeadsAll) << "the pages b and c share stay held";
  for (int32_t t = 0; t < 9; ++t) b.push(50 + t);
  ASSERT_TRUE(write(*kv, 1, b, 8).ok());
  c.push(3);
  ASSERT_TRUE(write(*kv, 2, c, 5).ok());
  EXPECT_TRUE(holds(*kv, 1, b));
  EXPECT_TRUE(holds(*kv, 2, c));
  EXPECT_TRUE(pages_consistent(*kv, 3));
  kv->truncate(1, 3);  // a rollback into the shared first page
  b.truncate(3);
  b.push(9);
  ASSERT_TRUE(write(*kv, 1, b, 3).ok());
  EXPECT_TRUE(holds(*kv, 1, b));
  EXPECT_TRUE(holds(*kv, 2, c));
  kv->release(1);
  kv->release(2);
  EXPECT_EQ(kv->free_pages(), kv->total_pages());
  EXPECT_EQ(kv->shared_pages(), 0);
  EXPECT_TRUE(pages_consistent(*kv, 3));
}

TEST(KvShare, RefusesAPrefixTheSourceDoesNotHoldAndKeepsTheTarget) {
  auto kv = KvCache::create(share_opts(3, 64));
  ASSERT_TRUE(kv.ok());
  ASSERT_TRUE(write(*kv, 0, tokens(6, 1), 0).ok());
  const Want other = tokens(3, 40);
  ASSERT_TRUE(write(*kv, 1, other, 0).ok());
  EXPECT_EQ(kv->share_prefix(0, 1, 7).code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(holds(*kv, 1, other)) << "a refused share emptied its target";
  EXPECT_EQ(kv->share_prefix(0, 0, 3).code(), ErrorCode::kInvalidArgument);
  // Evicted rows are no prefix: slot 2 is gone from head 0 of layer 0.
  ASSERT_TRUE(kv->keep_tokens(0, 0, 0, {0, 1, 3, 4, 5}).ok());
  EXPECT_EQ(kv->share_prefix(0, 2, 4).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(kv->pages_held(2), 0);
  EXPECT_TRUE(kv->share_prefix(0, 2, 2).ok());
  EXPECT_TRUE(holds(*kv, 2, tokens(6, 1).first(2)));
  EXPECT_TRUE(pages_consistent(*kv, 3));
}

// Eviction compacting a head whose pages are shared writes into fresh pages: the other holder's
// rows stay, the compacted head holds exactly the kept rows. Without a free page it is refused
// as a value and nothing changes.
TEST(KvShare, CompactingASharedHeadCopiesTheWrittenPagesOnly) {
  auto kv = KvCache::create(share_opts(2, 3 * kHeadsAll + 2));
  ASSERT_TRUE(kv.ok());
  const Want a = tokens(12, 7);
  ASSERT_TRUE(write(*kv, 0, a, 0).ok());
  ASSERT_TRUE(kv->share_prefix(0, 1, 12).ok());
  Want b = a;
  const std::vector<int32_t> keep = {0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11};  // slot 4 goes
  EXPECT_EQ(kv->free_pages(), 2);
  // Layer 1, head 1: pages 1 and 2 get written (page 0 keeps its rows where they are).
  ASSERT_TRUE(kv->keep_tokens(1, 1, 1, keep).ok());
  auto& kb = b.kept[1 * kHeads + 1];
  kb.erase(kb.begin() + 4);
  EXPECT_EQ(kv->free_pages(), 0);
  EXPECT_EQ(kv->shared_pages(), 3 * kHeadsAll - 2);
  EXPECT_EQ(kv->head_pages(1, 1, 1).pages[0], kv->head_pages(1, 0, 1).pages[0]) << "page 0 stays shared";
  EXPECT_TRUE(holds(*kv, 0, a));
  EXPECT_TRUE(holds(*kv, 1, b));
  EXPECT_TRUE(pages_consistent(*kv, 2));
  // Another head, no free page left: refused, nothing changed.
  const Status st = kv->keep_tokens(0, 1, 0, keep);
  EXPECT_EQ(st.code(), ErrorCode::kOverBudget);
  EXPECT_TRUE(holds(*kv, 0, a));
  EXPECT_TRUE(holds(*kv, 1, b));
  EXPECT_TRUE(pages_consistent(*kv, 2));
  // The source compacts the same head in place once it holds its pages alone.
  kv->release(1);
  Want a2 = a;
  ASSERT_TRUE(kv->keep_tokens(0, 0, 0, keep).ok());
  auto& ka = a2.kept[0];
  ka.erase(ka.begin() + 4);
  EXPECT_TRUE(holds(*kv, 0, a2));
  EXPECT_EQ(kv->free_pages(), 2) << "11 rows still take three pages";
  EXPECT_TRUE(pages_consistent(*kv, 2));
}

TEST(KvShare, ExhaustionIsReturnedAndChangesNothing) {
  auto kv = KvCache::create(share_opts(2, 3 * kHeadsAll));
  ASSERT_TRUE(kv.ok());
  const Want a = tokens(10, 5);
  ASSERT_TRUE(write(*kv, 0, a, 0).ok());
  ASSERT_TRUE(kv->share_prefix(0, 1, 10).ok());
  Want b = a;
  b.push(1);
  EXPECT_EQ(kv->reserve(1, 1).code(), ErrorCode::kOverBudget);
  EXPECT_EQ(write(*kv, 1, b, 10, /*reserve_first=*/false).code(), ErrorCode::kOverBudget);
  Want a2 = a;
  a2.push(2);
  EXPECT_EQ(write(*kv, 0, a2, 10, /*reserve_first=*/false).code(), ErrorCode::kOverBudget);
  EXPECT_TRUE(holds(*kv, 0, a));
  EXPECT_TRUE(holds(*kv, 1, a)) << "a refused write changed the sharer";
  EXPECT_EQ(kv->shared_pages(), 3 * kHeadsAll);
  EXPECT_TRUE(pages_consistent(*kv, 2));
}

// Random admit (sharing a prefix of another sequence, reusing its own rows, or computing a fresh
// prompt) / decode (with and without a reservation) / room / rollback / eviction / finish / preempt
// steps over a small pool, as the engine drives it. After every step each sequence reads back
// exactly its rows, the page bookkeeping holds, and a share followed by a write takes exactly the
// pages pages_to_grow() promised admission.
TEST(KvShare, RandomShareWriteEvictFinishKeepsRowsAndRefcounts) {
  constexpr int kSeqs = 6;
  constexpr int kSteps = 100000;
  const int64_t pages = 24 * kHeadsAll;
  auto kv = KvCache::create(share_opts(kSeqs, pages));
  ASSERT_TRUE(kv.ok());
  std::mt19937_64 rng(20261204);
  const auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<Want> want(kSeqs);
  const Want system = tokens(23, 1000);  // the shared system prompt
  int64_t shares = 0, tail_copies = 0, evictions = 0, refused = 0, pages_saved_peak = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const auto drop = [&](int s) {
    kv->release(s);
    want[static_cast<size_t>(s)] = {};
  };
  for (int step = 0; step < kSteps; ++step) {
    const int s = uniform(0, kSeqs - 1);
    Want& w = want[static_cast<size_t>(s)];
    const int r = uniform(0, 99);
    if (w.n() == 0 || r < 10) {
      // Admit into slot s: share a prefix of another sequence, else reuse its own rows, else
      // compute (part of) the system prompt; then its remaining prompt tokens.
      const int src = uniform(0, kSeqs - 1);
      const Want& from = want[static_cast<size_t>(src)];
      const int m = uniform(0, 6);
      Want next;
      int32_t kept = 0;  // rows the admission starts with
      int64_t promised = -1;
      if (src != s && from.intact() > 0) {
        kept = uniform(1, from.intact());
        promised = kv->pages_to_grow(src, /*adopted=*/true, kept, kept + m);
        ASSERT_TRUE(kv->share_prefix(src, s, kept).ok()) << "step " << step;
        w = from.first(kept);
        ++shares;
        if (m > 0 && kept % kPageTokens != 0) ++tail_copies;
      } else if (w.n() > 0 && !w.evicted() && r < 5) {
        kept = uniform(0, w.n());
        promised = kv->pages_to_grow(s, /*adopted=*/false, kept, kept + m);
        kv->truncate(s, kept);
        w.truncate(kept);
      } else {
        kv->release(s);
        w = {};
        next = system.first(uniform(1, 23));
      }
      ASSERT_TRUE(holds(*kv, s, w)) << "step " << step;
      if (kept > 0) next = w;
      for (int i = 0; i < m; ++i) next.push(uniform(0, 9));
      const int64_t free_before = kv->free_pages();
      const Status st = write(*kv, s, next, kept);
      if (st.ok()) {
        if (promised >= 0) {
          // Admission counted the pages this admission takes: exactly, once it writes a row.
          const int64_t taken = free_before - kv->free_pages();
          if (m > 0) {
            ASSERT_EQ(taken, promised) << "step " << step;
          } else {
            ASSERT_LE(taken, promised) << "step " << step;
          }
        }
        w = next;
      } else {
        // No free page: nothing changed; the engine would preempt, here the admitted one goes.
        ASSERT_EQ(st.code(), ErrorCode::kOverBudget) << st.message();
        ASSERT_TRUE(holds(*kv, s, w)) << "step " << step << ": a refused reservation changed the sequence";
        ++refused;
        drop(s);
      }
    } else if (r < 60) {
      // Decode one token, half of the time without a reservation (append() takes the room).
      Want next = w;
      next.push(uniform(0, 9));
      const int32_t rows = static_cast<int32_t>(std::max_element(next.kept.begin(), next.kept.end(),
                                                                 [](const auto& x, const auto& y) {
                                                                   return x.size() < y.size();
                                                                 })->size());
      if (rows > 60) {
        drop(s);  // full: finished
      } else {
        const bool reserve_first = uniform(0, 1) == 0;
        const Status st = write(*kv, s, next, w.n(), reserve_first);
        if (st.ok()) {
          w = next;
        } else {
          ASSERT_EQ(st.code(), ErrorCode::kOverBudget) << st.message();
          // append() alone is all or nothing only while every head has the same size: it takes
          // room for every layer when the first one lacks it, not when a later, thinner one does.
          if (reserve_first || !w.evicted()) {
            ASSERT_TRUE(holds(*kv, s, w)) << "step " << step << ": a refused write changed the sequence";
          }
          ++refused;
          drop(s);  // preempted
        }
      }
    } else if (r < 66) {
      // Room reserved and not written (a draft's), kept past a later share.
      (void)kv->reserve(s, uniform(1, 6));  // refused: nothing changed (checked below)
    } else if (r < 76) {
      const int32_t keep = uniform(0, w.n() - 1);  // rejected drafts
      kv->truncate(s, keep);
      w.truncate(keep);
    } else if (r < 90) {
      // Eviction thins one head: a random subset of its rows stays.
      const int l = uniform(0, kLayers - 1), h = uniform(0, kHeads - 1);
      std::vector<int32_t>& k = w.kept[static_cast<size_t>(l * kHeads + h)];
      std::vector<int32_t> slots, positions;
      for (int32_t i = 0; i < static_cast<int32_t>(k.size()); ++i) {
        if (uniform(0, 3) != 0) {
          slots.push_back(i);
          positions.push_back(k[static_cast<size_t>(i)]);
        }
      }
      const Status st = kv->keep_tokens(l, s, h, slots);
      if (st.ok()) {
        k = positions;
        ++evictions;
      } else {
        ASSERT_EQ(st.code(), ErrorCode::kOverBudget) << st.message();
        ++refused;
      }
    } else {
      drop(s);  // finished or preempted
    }
    pages_saved_peak = std::max(pages_saved_peak, kv->shared_pages());
    if (step % 8 == 0 || r >= 90) {
      ASSERT_TRUE(pages_consistent(*kv, kSeqs)) << "step " << step;
    }
    for (int q = 0; q < kSeqs; ++q) ASSERT_TRUE(holds(*kv, q, want[static_cast<size_t>(q)])) << "step " << step;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(shares, 5000);
  EXPECT_GT(tail_copies, 1000);
  EXPECT_GT(evictions, 5000);
  EXPECT_GT(refused, 100) << "the pool never ran out: the test does not exhaust it";
  EXPECT_GT(pages_saved_peak, 8 * kHeadsAll) << "sharing never saved pages: the test does not share";
  for (int q = 0; q < kSeqs; ++q) kv->release(q);
  EXPECT_EQ(kv->free_pages(), kv->total_pages());
  EXPECT_TRUE(pages_consistent(*kv, kSeqs));
  RecordProperty("seconds", std::to_string(seconds));
}

}  // namespace
}  // namespace frugal
