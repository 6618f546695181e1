#include "frugal/kv/token_table.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace frugal {
namespace {

// One layer, two KV heads, four rows per page: small enough to name every page id.
TokenTableShape small_shape() {
  TokenTableShape s;
  s.n_layer = 1;
  s.n_head_kv = 2;
  s.page_tokens = 4;
  return s;
}

std::vector<PageId> pages_of(const TokenTable& t, int layer, int head) {
  const auto p = t.pages(layer, head);
  return {p.begin(), p.end()};
}

std::vector<int32_t> positions_of(const TokenTable& t, int layer, int head) {
  const auto p = t.positions(layer, head);
  return {p.begin(), p.end()};
}

void fill(TokenTable& t, int32_t from, int32_t to) {
  std::vector<PageCopy> copies;
  ASSERT_EQ(t.reserve(to - from, &copies), Room::kOk);
  for (int32_t pos = from; pos < to; ++pos) {
    for (int layer = 0; layer < t.shape().n_layer; ++layer) t.append(layer, pos);
  }
}

TEST(TokenTable, ReserveTakesPagesPerHeadAndAppendFillsThem) {
  PagePool pool(8);
  TokenTable t(pool, small_shape());
  EXPECT_EQ(t.pages_needed(5), 4);
  std::vector<PageCopy> copies;
  ASSERT_EQ(t.reserve(5, &copies), Room::kOk);
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(pages_of(t, 0, 0), (std::vector<PageId>{0, 1}));
  EXPECT_EQ(pages_of(t, 0, 1), (std::vector<PageId>{2, 3}));
  for (int32_t pos = 0; pos < 5; ++pos) t.append(0, pos);
  EXPECT_EQ(t.size(0, 1), 5);
  EXPECT_EQ(t.row(0, 0, 4), (PageRow{1, 0}));
  EXPECT_EQ(t.row(0, 1, 3), (PageRow{2, 3}));
  EXPECT_EQ(t.unused_rows(), 6);
  EXPECT_EQ(t.pages_needed(3), 0) << "three more rows fit the last pages";
  EXPECT_EQ(t.pages_needed(4), 2);
  t.release_all();
  EXPECT_EQ(pool.used_pages(), 0);
}

TEST(TokenTable, NoFreePageIsAValueAndChangesNothing) {
  PagePool pool(3);
  TokenTable t(pool, small_shape());
  std::vector<PageCopy> copies;
  EXPECT_EQ(t.reserve(5, &copies), Room::kNoFreePage);
  EXPECT_EQ(pool.used_pages(), 0);
  EXPECT_EQ(t.pages_held(), 0);
  EXPECT_EQ(t.reserve(4, &copies), Room::kOk);
  EXPECT_EQ(pool.used_pages(), 2);
}

TEST(TokenTable, DestructionReturnsEveryPage) {
  PagePool pool(8);
  {
    TokenTable t(pool, small_shape());
    fill(t, 0, 9);
    EXPECT_EQ(pool.used_pages(), 6);
  }
  EXPECT_EQ(pool.used_pages(), 0);
  EXPECT_TRUE(pool.audit().ok());
}

TEST(TokenTable, SecondRequestReusesPublishedPrefixPages) {
  PagePool pool(16);
  const std::vector<int32_t> prompt = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
  TokenTable a(pool, small_shape());
  fill(a, 0, 10);
  a.publish_prefix(prompt);
  EXPECT_TRUE(pool.hash_of(0).has_value());
  EXPECT_TRUE(pool.hash_of(1).has_value());
  EXPECT_FALSE(pool.hash_of(2).has_value()) << "the partial last page is not published";

  TokenTable b(pool, small_shape());
  // The last prompt token is always computed again (its logits give the first new token).
  EXPECT_EQ(b.reuse_prefix(std::span<const int32_t>(prompt).first(9)), 8);
  EXPECT_EQ(pages_of(b, 0, 0), (std::vector<PageId>{0, 1}));
  EXPECT_EQ(pages_of(b, 0, 1), (std::vector<PageId>{3, 4}));
  EXPECT_EQ(positions_of(b, 0, 1), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(pool.ref_count(0), 2);

  // A different prompt shares only its identical first page.
  const std::vector<int32_t> other = {5, 6, 7, 8, 9, 10, 11, 99, 13};
  TokenTable c(pool, small_shape());
  EXPECT_EQ(c.reuse_prefix(other), 4);
  EXPECT_EQ(pool.ref_count(0), 3);
  EXPECT_EQ(pool.ref_count(1), 2);
}

TEST(TokenTable, PrefixPagesOutliveTheirRequestUntilReclaimed) {
  PagePool pool(8);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
  {
    TokenTable a(pool, small_shape());
    fill(a, 0, 5);
    a.publish_prefix(prompt);
  }
  EXPECT_EQ(pool.used_pages(), 0);
  EXPECT_EQ(pool.cached_free_pages(), 2);
  TokenTable b(pool, small_shape());
  EXPECT_EQ(b.reuse_prefix(prompt), 4);
  EXPECT_EQ(pool.used_pages(), 2);
  EXPECT_EQ(pool.counters().prefix_hits, 2);
}

TEST(TokenTable, NothingIsReusedUnlessEveryHeadHasThePage) {
  PagePool pool(8);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
  TokenTable a(pool, small_shape());
  fill(a, 0, 5);
  // Head 1 evicts position 2 before publishing: its first page is no longer the plain prefix.
  std::vector<RowMove> moves;
  const std::vector<int32_t> keep = {0, 1, 3, 4};
  ASSERT_EQ(a.keep(0, 1, keep, &moves), Room::kOk);
  a.publish_prefix(prompt);
  EXPECT_TRUE(pool.hash_of(a.pages(0, 0)[0]).has_value());
  EXPECT_FALSE(pool.hash_of(a.pages(0, 1)[0]).has_value());
  TokenTable b(pool, small_shape());
  EXPECT_EQ(b.reuse_prefix(prompt), 0);
  EXPECT_EQ(b.pages_held(), 0);
}

TEST(TokenTable, WritingAfterASharedPartialPageCopiesIt) {
  PagePool pool(16);
  TokenTable a(pool, small_shape());
  fill(a, 0, 6);  // head 0: pages 0, 1 (two rows in 1); head 1: pages 2, 3
  TokenTable b = a.fork();
  EXPECT_EQ(pool.ref_count(1), 2);
  EXPECT_EQ(b.pages_needed(1), 2) << "one private copy of the last page per head";
  std::vector<PageCopy> copies;
  ASSERT_EQ(b.reserve(1, &copies), Room::kOk);
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0].from, 1);
  EXPECT_EQ(copies[0].to, 4);
  EXPECT_EQ(copies[0].rows, 2);
  EXPECT_EQ(copies[1].from, 3);
  EXPECT_EQ(copies[1].to, 5);
  EXPECT_EQ(pages_of(b, 0, 0), (std::vector<PageId>{0, 4}));
  EXPECT_EQ(pages_of(a, 0, 0), (std::vector<PageId>{0, 1}));
  EXPECT_EQ(pool.ref_count(1), 1);
  EXPECT_EQ(pool.ref_count(0), 2) << "full pages stay shared";
  // The original writes in place now that it holds its page alone.
  copies.clear();
  ASSERT_EQ(a.reserve(1, &copies), Room::kOk);
  EXPECT_TRUE(copies.empty());
}

TEST(TokenTable, KeepCompactsOneHeadAndFreesItsPages) {
  PagePool pool(16);
  TokenTable t(pool, small_shape());
  fill(t, 0, 10);  // head 0: pages 0 1 2; head 1: pages 3 4 5
  std::vector<RowMove> moves;
  const std::vector<int32_t> keep = {0, 1, 5, 9};
  ASSERT_EQ(t.keep(0, 0, keep, &moves), Room::kOk);
  EXPECT_EQ(positions_of(t, 0, 0), (std::vector<int32_t>{0, 1, 5, 9}));
  EXPECT_EQ(pages_of(t, 0, 0), (std::vector<PageId>{0}));
  ASSERT_EQ(moves.size(), 2u);
  EXPECT_EQ(moves[0].from, (PageRow{1, 1}));
  EXPECT_EQ(moves[0].to, (PageRow{0, 2}));
  EXPECT_EQ(moves[1].from, (PageRow{2, 1}));
  EXPECT_EQ(moves[1].to, (PageRow{0, 3}));
  EXPECT_EQ(t.size(0, 1), 10) << "other heads keep their tokens";
  EXPECT_EQ(pool.used_pages(), 4);
  // The freed pages serve another request.
  TokenTable other(pool, small_shape());
  std::vector<PageCopy> copies;
  ASSERT_EQ(other.reserve(1, &copies), Room::kOk);
  EXPECT_EQ(pages_of(other, 0, 0), (std::vector<PageId>{6}));
}

TEST(TokenTable, KeepIntoASharedPageWritesAPrivateCopy) {
  PagePool pool(16);
  TokenTable a(pool, small_shape());
  fill(a, 0, 8);  // head 0: pages 0 1
  TokenTable b = a.fork();
  std::vector<RowMove> moves;
  const std::vector<int32_t> keep = {0, 2, 3, 4, 5, 6, 7};
  ASSERT_EQ(b.keep(0, 0, keep, &moves), Room::kOk);
  EXPECT_EQ(pages_of(b, 0, 0), (std::vector<PageId>{4, 5}));
  EXPECT_EQ(pages_of(a, 0, 0), (std::vector<PageId>{0, 1}));
  // Every kept row is written into the copies, including the unchanged row 0.
  ASSERT_EQ(moves.size(), 7u);
  EXPECT_EQ(moves[0].from, (PageRow{0, 0}));
  EXPECT_EQ(moves[0].to, (PageRow{4, 0}));
  EXPECT_EQ(moves[3].from, (PageRow{1, 0}));
  EXPECT_EQ(moves[3].to, (PageRow{4, 3}));
  EXPECT_EQ(pool.ref_count(0), 1);
  EXPECT_EQ(pool.ref_count(1), 1);
}

TEST(TokenTable, KeepThatNeedsACopyWithNoFreePageChangesNothing) {
  PagePool pool(4);
  TokenTable a(pool, small_shape());
  fill(a, 0, 8);  // all four pages
  TokenTable b = a.fork();
  std::vector<RowMove> moves;
  const std::vector<int32_t> keep = {1, 2};
  EXPECT_EQ(b.keep(0, 0, keep, &moves), Room::kNoFreePage);
  EXPECT_TRUE(moves.empty());
  EXPECT_EQ(b.size(0, 0), 8);
  // Keeping a prefix writes nothing, so it needs no page.
  const std::vector<int32_t> prefix = {0, 1};
  EXPECT_EQ(b.keep(0, 0, prefix, &moves), Room::kOk);
  EXPECT_TRUE(moves.empty());
  EXPECT_EQ(pages_of(b, 0, 0), (std::vector<PageId>{0}));
}

TEST(TokenTable, TruncateReleasesWholePagesAndTheTailPageBecomesWritable) {
  PagePool pool(16);
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  TokenTable t(pool, small_shape());
  fill(t, 0, 8);
  t.publish_prefix(tokens);
  t.truncate(3);
  EXPECT_EQ(t.size(0, 0), 3);
  EXPECT_EQ(pages_of(t, 0, 0), (std::vector<PageId>{0}));
  EXPECT_TRUE(pool.hash_of(0).has_value());
  std::vector<PageCopy> copies;
  ASSERT_EQ(t.reserve(1, &copies), Room::kOk);
  EXPECT_FALSE(pool.hash_of(0).has_value()) << "a page about to hold other rows loses its hash";
  EXPECT_TRUE(pool.find(prefix_page_hash(chain_block_hash(kRootPageHash, std::span(tokens).first(4)), 0, 0)) ==
              std::nullopt);
}

TEST(TokenTable, LayersAndHeadsHaveTheirOwnPages) {
  TokenTableShape s = small_shape();
  s.n_layer = 3;
  PagePool pool(64);
  TokenTable t(pool, s);
  fill(t, 0, 4);
  std::vector<PageId> all;
  for (int l = 0; l < 3; ++l) {
    for (int h = 0; h < 2; ++h) all.push_back(t.pages(l, h)[0]);
  }
  std::vector<PageId> expected(6);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(all, expected);
}

}  // namespace
}  // namespace frugal
