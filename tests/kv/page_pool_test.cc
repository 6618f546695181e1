#include "frugal/kv/page_pool.h"

#include <gtest/gtest.h>

#include <vector>

namespace frugal {
namespace {

void expect_audit_ok(const PagePool& pool) {
  const Status st = pool.audit();
  EXPECT_TRUE(st.ok()) << st.to_string();
}

TEST(PagePool, HandsOutPagesInIdOrderAndSaysWhenNoneIsFree) {
  PagePool pool(3);
  EXPECT_EQ(pool.total_pages(), 3);
  EXPECT_EQ(pool.free_pages(), 3);
  EXPECT_EQ(pool.allocate(), std::optional<PageId>(0));
  EXPECT_EQ(pool.allocate(), std::optional<PageId>(1));
  EXPECT_EQ(pool.allocate(), std::optional<PageId>(2));
  EXPECT_EQ(pool.allocate(), std::nullopt);
  EXPECT_EQ(pool.allocate(), std::nullopt);
  EXPECT_EQ(pool.used_pages(), 3);
  EXPECT_EQ(pool.free_pages(), 0);
  EXPECT_EQ(pool.counters().allocated, 3);
  EXPECT_EQ(pool.counters().no_free_page, 2);
  expect_audit_ok(pool);
}

TEST(PagePool, EmptyPoolRefusesEveryAllocation) {
  PagePool pool(0);
  EXPECT_EQ(pool.allocate(), std::nullopt);
  EXPECT_EQ(pool.total_pages(), 0);
  expect_audit_ok(pool);
}

TEST(PagePool, APageIsFreeOnlyAfterItsLastHolderReleasesIt) {
  PagePool pool(3);
  const PageId p = *pool.allocate();
  pool.retain(p);
  pool.retain(p);
  EXPECT_EQ(pool.ref_count(p), 3);
  pool.release(p);
  pool.release(p);
  EXPECT_EQ(pool.ref_count(p), 1);
  EXPECT_EQ(pool.used_pages(), 1);
  pool.release(p);
  EXPECT_EQ(pool.ref_count(p), 0);
  EXPECT_EQ(pool.used_pages(), 0);
  // Released pages queue behind the ones never used.
  EXPECT_EQ(pool.allocate(), std::optional<PageId>(1));
  EXPECT_EQ(pool.allocate(), std::optional<PageId>(2));
  EXPECT_EQ(pool.allocate(), std::optional<PageId>(0));
  expect_audit_ok(pool);
}

TEST(PagePool, PublishedPageStaysCachedAfterReleaseUntilLookedUp) {
  PagePool pool(2);
  const PageId p = *pool.allocate();
  ASSERT_TRUE(pool.publish(p, 42));
  EXPECT_EQ(pool.hash_of(p), std::optional<PageHash>(42));
  pool.release(p);
  EXPECT_EQ(pool.free_pages(), 2);
  EXPECT_EQ(pool.cached_free_pages(), 1);
  EXPECT_EQ(pool.find(42), std::optional<PageId>(p));
  EXPECT_EQ(pool.acquire_cached(42), std::optional<PageId>(p));
  EXPECT_EQ(pool.ref_count(p), 1);
  EXPECT_EQ(pool.cached_free_pages(), 0);
  EXPECT_EQ(pool.used_pages(), 1);
  // A lookup of a held page adds a holder.
  EXPECT_EQ(pool.acquire_cached(42), std::optional<PageId>(p));
  EXPECT_EQ(pool.ref_count(p), 2);
  EXPECT_EQ(pool.acquire_cached(43), std::nullopt);
  EXPECT_EQ(pool.counters().prefix_hits, 2);
  expect_audit_ok(pool);
}

// Plain free pages go first; cached prefix pages are reclaimed least recently released first, and
// a reclaimed page's hash no longer finds it.
TEST(PagePool, ReclaimsCachedPagesLastAndInReleaseOrder) {
  PagePool pool(4);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(pool.allocate(), std::optional<PageId>(i));
  ASSERT_TRUE(pool.publish(0, 100));
  ASSERT_TRUE(pool.publish(1, 101));
  pool.release(1);
  pool.release(0);
  pool.release(2);
  EXPECT_EQ(pool.cached_free_pages(), 2);
  EXPECT_EQ(pool.allocate(), std::optional<PageId>(2));
  EXPECT_EQ(pool.allocate(), std::optional<PageId>(1));
  EXPECT_EQ(pool.find(101), std::nullopt);
  EXPECT_EQ(pool.hash_of(1), std::nullopt);
  EXPECT_EQ(pool.find(100), std::optional<PageId>(0));
  EXPECT_EQ(pool.counters().reclaimed_cached, 1);
  EXPECT_EQ(pool.allocate(), std::optional<PageId>(0));
  EXPECT_EQ(pool.find(100), std::nullopt);
  EXPECT_EQ(pool.allocate(), std::nullopt);
  expect_audit_ok(pool);
}

TEST(PagePool, ReusingACachedPageMovesItToTheBackOfTheReclaimOrder) {
  PagePool pool(2);
  ASSERT_EQ(pool.allocate(), std::optional<PageId>(0));
  ASSERT_EQ(pool.allocate(), std::optional<PageId>(1));
  ASSERT_TRUE(pool.publish(0, 7));
  ASSERT_TRUE(pool.publish(1, 8));
  pool.release(0);
  pool.release(1);
  ASSERT_EQ(pool.acquire_cached(7), std::optional<PageId>(0));
  pool.release(0);  // 0 was used more recently than 1 now
  EXPECT_EQ(pool.allocate(), std::optional<PageId>(1));
  EXPECT_EQ(pool.find(7), std::optional<PageId>(0));
  expect_audit_ok(pool);
}

TEST(PagePool, OneHashOnePage) {
  PagePool pool(3);
  const PageId a = *pool.allocate(), b = *pool.allocate();
  EXPECT_TRUE(pool.publish(a, 5));
  EXPECT_FALSE(pool.publish(b, 5)) << "a second page under a published hash";
  EXPECT_FALSE(pool.publish(a, 6)) << "a second hash for a published page";
  EXPECT_EQ(pool.find(5), std::optional<PageId>(a));
  EXPECT_EQ(pool.hash_of(b), std::nullopt);
  pool.unpublish(a);
  EXPECT_EQ(pool.find(5), std::nullopt);
  EXPECT_TRUE(pool.publish(b, 5));
  expect_audit_ok(pool);
}

TEST(PagePool, UnpublishingACachedPageMakesItAPlainFreePage) {
  PagePool pool(2);
  const PageId a = *pool.allocate();
  ASSERT_TRUE(pool.publish(a, 9));
  pool.release(a);
  pool.unpublish(a);
  EXPECT_EQ(pool.cached_free_pages(), 0);
  EXPECT_EQ(pool.free_pages(), 2);
  EXPECT_EQ(pool.find(9), std::nullopt);
  expect_audit_ok(pool);
}

TEST(PagePool, SharedPageIsCopiedOnWrite) {
  PagePool pool(3);
  const PageId shared = *pool.allocate();
  ASSERT_TRUE(pool.publish(shared, 77));
  pool.retain(shared);  // a second request holds the prefix page
  const auto w = pool.make_writable(shared);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->page, 1);
  EXPECT_EQ(w->copy_from, std::optional<PageId>(shared));
  EXPECT_EQ(pool.ref_count(shared), 1);
  EXPECT_EQ(pool.ref_count(1), 1);
  EXPECT_EQ(pool.find(77), std::optional<PageId>(shared)) << "the other holder's page keeps its hash";
  EXPECT_EQ(pool.hash_of(1), std::nullopt);
  EXPECT_EQ(pool.counters().copies_on_write, 1);
  expect_audit_ok(pool);
}

TEST(PagePool, PageHeldAloneIsWrittenInPlaceAndLosesItsHash) {
  PagePool pool(2);
  const PageId p = *pool.allocate();
  ASSERT_TRUE(pool.publish(p, 3));
  const auto w = pool.make_writable(p);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->page, p);
  EXPECT_EQ(w->copy_from, std::nullopt);
  EXPECT_EQ(pool.find(3), std::nullopt);
  EXPECT_EQ(pool.used_pages(), 1);
  expect_audit_ok(pool);
}

TEST(PagePool, CopyOnWriteWithoutAFreePageChangesNothing) {
  PagePool pool(1);
  const PageId p = *pool.allocate();
  pool.retain(p);
  EXPECT_EQ(pool.make_writable(p), std::nullopt);
  EXPECT_EQ(pool.ref_count(p), 2);
  EXPECT_EQ(pool.counters().no_free_page, 1);
  expect_audit_ok(pool);
}

TEST(PageHash, ChainsTokenIdsInOrder) {
  const std::vector<int32_t> a = {1, 2, 3, 4}, b = {1, 2, 4, 3}, c = {5, 6, 7, 8};
  EXPECT_EQ(chain_block_hash(kRootPageHash, a), chain_block_hash(kRootPageHash, a));
  EXPECT_NE(chain_block_hash(kRootPageHash, a), chain_block_hash(kRootPageHash, b));
  const PageHash ha = chain_block_hash(kRootPageHash, a);
  const PageHash hb = chain_block_hash(kRootPageHash, b);
  EXPECT_NE(chain_block_hash(ha, c), chain_block_hash(hb, c)) << "the same block after different prefixes";
  EXPECT_NE(chain_block_hash(kRootPageHash, std::span<const int32_t>(a).first(3)), ha);
  EXPECT_NE(prefix_page_hash(ha, 0, 0), prefix_page_hash(ha, 1, 0)) << "heads";
  EXPECT_NE(prefix_page_hash(ha, 0, 0), prefix_page_hash(ha, 0, 1)) << "layouts";
}

}  // namespace
}  // namespace frugal
