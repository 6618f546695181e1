// Scheduler decisions without a model: which request gets which slot, which tokens go into each
// step, prefix reuse and copies, and refusals. Expected values are worked out by hand from the
// rules in scheduler.h.
#include "frugal/engine/scheduler.h"

#include <gtest/gtest.h>

#include <numeric>

namespace frugal {
namespace {

std::vector<TokenId> seq(TokenId first, int n) {
  std::vector<TokenId> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

SchedulerOptions opts(int slots, int32_t capacity, int32_t step) {
  SchedulerOptions o;
  o.n_slots = slots;
  o.slot_capacity = capacity;
  o.max_step_tokens = step;
  o.max_waiting = 8;
  o.queue_timeout_s = 10;
  o.min_copy_tokens = 4;
  return o;
}

void expect_item(const StepItem& it, SeqId id, int slot, int32_t begin, int32_t end, bool logits) {
  EXPECT_EQ(it.id, id);
  EXPECT_EQ(it.slot, slot);
  EXPECT_EQ(it.begin, begin);
  EXPECT_EQ(it.end, end);
  EXPECT_EQ(it.logits, logits);
}

// Runs a plan as the engine would with every forward succeeding; sampled tokens are 1000 + id.
StepPlan run_step(Scheduler& s, double now) {
  StepPlan p = s.plan(now);
  s.commit(p);
  for (const auto& it : p.items) {
    if (it.logits) s.append(it.id, static_cast<TokenId>(1000 + it.id));
  }
  return p;
}

TEST(Scheduler, AdmitsInArrivalOrderIntoFreeSlots) {
  Scheduler s(opts(2, 64, 100));
  ASSERT_TRUE(s.enqueue(1, seq(10, 5), 0).ok());
  ASSERT_TRUE(s.enqueue(2, seq(20, 3), 0).ok());
  ASSERT_TRUE(s.enqueue(3, seq(30, 4), 0).ok());
  StepPlan p = run_step(s, 0);
  ASSERT_EQ(p.admitted.size(), 2u);
  EXPECT_EQ(p.admitted[0].id, 1);
  EXPECT_EQ(p.admitted[0].slot, 0);
  EXPECT_EQ(p.admitted[1].id, 2);
  EXPECT_EQ(p.admitted[1].slot, 1);
  ASSERT_EQ(p.items.size(), 2u);
  expect_item(p.items[0], 1, 0, 0, 5, true);
  expect_item(p.items[1], 2, 1, 0, 3, true);
  EXPECT_EQ(s.n_waiting(), 1);
  EXPECT_TRUE(s.is_waiting(3));

  // Both decode now (one token each, fed back at the next position); 3 still waits.
  p = run_step(s, 0);
  ASSERT_EQ(p.items.size(), 2u);
  expect_item(p.items[0], 1, 0, 5, 6, true);
  expect_item(p.items[1], 2, 1, 3, 4, true);
  EXPECT_TRUE(p.admitted.empty());

  // 2 ends; its slot goes to 3 in the same step as 1's decode.
  s.release(2);
  p = run_step(s, 0);
  ASSERT_EQ(p.admitted.size(), 1u);
  EXPECT_EQ(p.admitted[0].id, 3);
  EXPECT_EQ(p.admitted[0].slot, 1);
  EXPECT_EQ(p.admitted[0].reused, 0);
  ASSERT_EQ(p.items.size(), 2u);
  expect_item(p.items[0], 1, 0, 6, 7, true);
  expect_item(p.items[1], 3, 1, 0, 4, true);
}

TEST(Scheduler, ChunksLongPromptsAndPutsDecodesFirst) {
  Scheduler s(opts(2, 64, 8));
  ASSERT_TRUE(s.enqueue(1, seq(0, 3), 0).ok());
  StepPlan p = run_step(s, 0);
  expect_item(p.items.at(0), 1, 0, 0, 3, true);
  ASSERT_TRUE(s.enqueue(2, seq(100, 20), 0).ok());
  // Budget 8: one decode token for 1, then 7 prompt tokens of 2.
  p = run_step(s, 0);
  ASSERT_EQ(p.items.size(), 2u);
  expect_item(p.items[0], 1, 0, 3, 4, true);
  expect_item(p.items[1], 2, 1, 0, 7, false);
  p = run_step(s, 0);
  expect_item(p.items.at(1), 2, 1, 7, 14, false);
  p = run_step(s, 0);
  ASSERT_EQ(p.items.size(), 2u);
  expect_item(p.items[1], 2, 1, 14, 20, true);
  EXPECT_EQ(p.n_tokens(), 7);
  // Both decode together.
  p = run_step(s, 0);
  ASSERT_EQ(p.items.size(), 2u);
  expect_item(p.items[0], 1, 0, 6, 7, true);
  expect_item(p.items[1], 2, 1, 20, 21, true);
}

TEST(Scheduler, ReusesTheCachedPrefixOfAFreeSlot) {
  Scheduler s(opts(2, 64, 100));
  ASSERT_TRUE(s.enqueue(1, {5, 6, 7, 8, 9}, 0).ok());
  ASSERT_TRUE(s.enqueue(2, {40, 41}, 0).ok());
  run_step(s, 0);  // 1 -> slot 0, 2 -> slot 1
  s.release(2);    // slot 1 caches {40, 41}
  run_step(s, 0);  // 1 decodes: sampled 1001 is now computed
  s.release(1);    // slot 0 caches {5, 6, 7, 8, 9, 1001}
  EXPECT_EQ(std::vector<TokenId>(s.slot_tokens(0).begin(), s.slot_tokens(0).end()),
            (std::vector<TokenId>{5, 6, 7, 8, 9, 1001}));
  ASSERT_TRUE(s.enqueue(3, {5, 6, 7, 50}, 0).ok());
  StepPlan p = run_step(s, 0);
  ASSERT_EQ(p.admitted.size(), 1u);
  EXPECT_EQ(p.admitted[0].slot, 0);
  EXPECT_EQ(p.admitted[0].reused, 3);
  EXPECT_EQ(p.admitted[0].copy_from, -1);
  expect_item(p.items.at(0), 3, 0, 3, 4, true);
}

TEST(Scheduler, RecomputesTheLastTokenOfAFullyCachedPrompt) {
  Scheduler s(opts(1, 64, 100));
  ASSERT_TRUE(s.enqueue(1, {1, 2, 3, 4}, 0).ok());
  run_step(s, 0);
  s.release(1);
  ASSERT_TRUE(s.enqueue(2, {1, 2, 3, 4}, 0).ok());
  StepPlan p = run_step(s, 0);
  EXPECT_EQ(p.admitted.at(0).reused, 3);
  expect_item(p.items.at(0), 2, 0, 3, 4, true);
}

TEST(Scheduler, PrefersTheLeastRecentlyUsedSlotOnTies) {
  Scheduler s(opts(3, 64, 100));
  for (SeqId id : {1, 2, 3}) ASSERT_TRUE(s.enqueue(id, {static_cast<TokenId>(id * 10)}, 0).ok());
  run_step(s, 0);
  s.release(2);
  s.release(3);
  s.release(1);  // release order: slot 1, slot 2, slot 0
  ASSERT_TRUE(s.enqueue(4, {99}, 0).ok());
  EXPECT_EQ(s.plan(0).admitted.at(0).slot, 1);
}

TEST(Scheduler, CopiesASharedPrefixFromARunningSlot) {
  Scheduler s(opts(2, 64, 100));
  const std::vector<TokenId> system = seq(200, 10);
  std::vector<TokenId> a = system, b = system;
  a.push_back(1);
  b.push_back(2);
  ASSERT_TRUE(s.enqueue(1, a, 0).ok());
  run_step(s, 0);  // slot 0 computes all 11 tokens of a
  ASSERT_TRUE(s.enqueue(2, b, 0).ok());
  StepPlan p = run_step(s, 0);
  ASSERT_EQ(p.admitted.size(), 1u);
  const Admission& adm = p.admitted[0];
  EXPECT_EQ(adm.slot, 1);
  EXPECT_EQ(adm.reused, 0);
  EXPECT_EQ(adm.copy_from, 0);
  EXPECT_EQ(adm.copy_end, 10);
  ASSERT_EQ(p.items.size(), 2u);
  expect_item(p.items[1], 2, 1, 10, 11, true);
}

TEST(Scheduler, DoesNotCopyWhenTheSavingIsSmall) {
  Scheduler s(opts(2, 64, 100));  // min_copy_tokens 4
  ASSERT_TRUE(s.enqueue(1, {1, 2, 3, 9}, 0).ok());
  run_step(s, 0);
  ASSERT_TRUE(s.enqueue(2, {1, 2, 3, 8}, 0).ok());
  StepPlan p = s.plan(0);
  EXPECT_EQ(p.admitted.at(0).copy_from, -1);
  EXPECT_EQ(p.admitted.at(0).copy_end, 0);
}

TEST(Scheduler, NoReuseWithoutPrefixCache) {
  SchedulerOptions o = opts(1, 64, 100);
  o.prefix_cache = false;
  Scheduler s(o);
  ASSERT_TRUE(s.enqueue(1, {1, 2, 3}, 0).ok());
  run_step(s, 0);
  s.release(1);
  EXPECT_TRUE(s.slot_tokens(0).empty());
  ASSERT_TRUE(s.enqueue(2, {1, 2, 3}, 0).ok());
  EXPECT_EQ(s.plan(0).admitted.at(0).reused, 0);
}

// A sequence whose KV lives outside the slots (its own eviction or quantization) neither reuses a
// cached prefix, nor is copied from while it runs, nor leaves a prefix behind.
TEST(Scheduler, SequencesWithTheirOwnKvShareNoPrefix) {
  Scheduler s(opts(2, 64, 100));  // min_copy_tokens 4
  const std::vector<TokenId> p = seq(100, 8);
  ASSERT_TRUE(s.enqueue(1, p, 0).ok());
  run_step(s, 0);
  s.release(1);  // slot 0 caches p
  ASSERT_TRUE(s.enqueue(2, p, 0, /*shares_kv=*/false).ok());
  StepPlan a = run_step(s, 0);
  ASSERT_EQ(a.admitted.size(), 1u);
  EXPECT_EQ(a.admitted[0].slot, 1);  // the least recently used slot: no prefix counts for it
  EXPECT_EQ(a.admitted[0].reused, 0);
  EXPECT_EQ(a.admitted[0].copy_from, -1);
  expect_item(a.items.at(0), 2, 1, 0, 8, true);
  s.drop_cache(0);  // slot 0 forgets p: only running sequence 2 has it now
  ASSERT_TRUE(s.enqueue(3, p, 0).ok());
  StepPlan b = s.plan(0);
  ASSERT_EQ(b.admitted.size(), 1u);
  EXPECT_EQ(b.admitted[0].slot, 0);
  EXPECT_EQ(b.admitted[0].reused, 0);
  EXPECT_EQ(b.admitted[0].copy_from, -1);  // nothing is copied out of sequence 2's slot
  s.commit(b);
  s.release(2);
  EXPECT_TRUE(s.slot_tokens(1).empty());  // and it leaves no prefix behind
}

TEST(Scheduler, RefusesPromptsThatCannotFitASlot) {
  Scheduler s(opts(1, 16, 100));
  EXPECT_EQ(s.enqueue(1, seq(0, 16), 0).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(s.enqueue(2, {}, 0).code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(s.enqueue(3, seq(0, 15), 0).ok());
}

TEST(Scheduler, RefusesBeyondTheQueueLimit) {
  SchedulerOptions o = opts(1, 64, 100);
  o.max_waiting = 2;
  Scheduler s(o);
  ASSERT_TRUE(s.enqueue(1, {1}, 0).ok());
  ASSERT_TRUE(s.enqueue(2, {2}, 0).ok());
  const Status st = s.enqueue(3, {3}, 0);
  EXPECT_EQ(st.code(), ErrorCode::kOverBudget);
  EXPECT_NE(st.message().find("queue limit 2"), std::string::npos) << st.message();
  run_step(s, 0);  // 1 runs, 2 waits: room for one more
  EXPECT_TRUE(s.enqueue(4, {4}, 0).ok());
}

TEST(Scheduler, RefusesRequestsThatWaitedPastTheTimeout) {
  Scheduler s(opts(1, 64, 100));  // timeout 10 s
  ASSERT_TRUE(s.enqueue(1, {1}, 0).ok());
  ASSERT_TRUE(s.enqueue(2, {2}, 1).ok());
  ASSERT_TRUE(s.enqueue(3, {3}, 5).ok());
  run_step(s, 0);
  StepPlan p = s.plan(12);  // 2 waited 11 s, 3 only 7 s
  ASSERT_EQ(p.refused.size(), 1u);
  EXPECT_EQ(p.refused[0].id, 2);
  EXPECT_NE(p.refused[0].reason.find("queue timeout"), std::string::npos);
  EXPECT_TRUE(s.is_waiting(3));
}

TEST(Scheduler, CancelFreesTheSlotForTheNextRequest) {
  Scheduler s(opts(1, 64, 100));
  ASSERT_TRUE(s.enqueue(1, {1, 2}, 0).ok());
  ASSERT_TRUE(s.enqueue(2, {3, 4}, 0).ok());
  ASSERT_TRUE(s.enqueue(3, {5, 6}, 0).ok());
  run_step(s, 0);
  EXPECT_TRUE(s.cancel(2));  // waiting
  EXPECT_TRUE(s.cancel(1));  // running
  EXPECT_FALSE(s.cancel(1));
  EXPECT_EQ(s.n_running(), 0);
  StepPlan p = s.plan(0);
  ASSERT_EQ(p.admitted.size(), 1u);
  EXPECT_EQ(p.admitted[0].id, 3);
}

TEST(Scheduler, AppendStopsAtTheSlotCapacity) {
  Scheduler s(opts(1, 6, 100));
  ASSERT_TRUE(s.enqueue(1, {1, 2, 3, 4}, 0).ok());
  run_step(s, 0);  // appends token 5 (index 4)
  EXPECT_EQ(s.tokens(1).size(), 5u);
  run_step(s, 0);  // index 4 computed, appends index 5 (the 6th row)
  EXPECT_EQ(s.tokens(1).size(), 6u);
  StepPlan p = s.plan(0);
  s.commit(p);
  EXPECT_FALSE(s.append(1, 7));  // a 7th token would need a 7th row
  EXPECT_EQ(s.running_rows(), 6);
}

TEST(Scheduler, UncommittedStepsLeaveRowsUncounted) {
  Scheduler s(opts(1, 64, 100));
  ASSERT_TRUE(s.enqueue(1, {1, 2, 3}, 0).ok());
  StepPlan p = s.plan(0);
  EXPECT_EQ(s.n_computed(1), 0);
  s.drop_cache(0);
  s.release(1);  // the forward failed: nothing is cached
  EXPECT_TRUE(s.slot_tokens(0).empty());
}

}  // namespace
}  // namespace frugal
