// FlexPrefill's block selection (docs/long-context.md): its Jensen-Shannon routing on planted
// structures (vertical-slash heads stay vertical-slash, a query-specific block pattern is
// query-aware), what each route keeps, and its options.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "attention/planted.h"
#include "attention/sparse_chunk.h"
#include "frugal/attention/sparse/flexprefill.h"
#include "frugal/attention/sparse/prefill_sparsity.h"

namespace frugal::sparse {
namespace {

using testing::chunk_of;
using testing::OwnedMask;

PrefillSparseOptions flex_options() {
  PrefillSparseOptions o;
  o.method = Method::kFlexPrefill;
  return o;
}

TEST(FlexPrefill, SquareRootJsDivergence) {
  const std::vector<float> p = {1.f, 0.f}, q = {0.5f, 0.5f}, same = {0.2f, 0.8f}, other = {0.f, 1.f};
  // m = (0.75, 0.25): 0.5 ln(1 / 0.75) + 0.5 (0.5 ln(0.5 / 0.75) + 0.5 ln(0.5 / 0.25)).
  const double js = 0.5 * std::log(1 / 0.75) + 0.25 * std::log(0.5 / 0.75) + 0.25 * std::log(2.0);
  EXPECT_NEAR(sqrt_js_divergence(p.data(), q.data(), 2), std::sqrt(js), 1e-6);
  EXPECT_NEAR(sqrt_js_divergence(q.data(), p.data(), 2), std::sqrt(js), 1e-6);
  EXPECT_NEAR(sqrt_js_divergence(same.data(), same.data(), 2), 0.0, 1e-7);
  EXPECT_NEAR(sqrt_js_divergence(p.data(), other.data(), 2), std::sqrt(std::log(2.0)), 1e-6);
  // Normalized first: a multiple of a distribution is the distribution.
  const std::vector<float> q3 = {3.f, 3.f};
  EXPECT_NEAR(sqrt_js_divergence(p.data(), q3.data(), 2), std::sqrt(js), 1e-6);
}

TEST(FlexPrefill, PlantedVerticalSlashHeadIsRoutedVerticalSlashAndKept) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const testing::Planted pl = testing::make_planted(rng);
  const FlexPrefill method(flex_options());
  for (int32_t q_pos0 : {0, pl.n_k - 1000}) {
    SCOPED_TRACE("chunk from " + std::to_string(q_pos0));
    const HeadInput in = chunk_of(pl.q, pl.n_head, pl.k, pl.head_dim, pl.n_k, pl.scale, q_pos0);
    OwnedMask m(in);
    Scratch scratch;
    const int64_t kept = select_blocks(method, in, scratch, m.mask);
    // Hot keys sit on single keys: block means blur them, so the pooled estimate disagrees with
    // the estimated attention and both query heads are vertical-slash.
    EXPECT_EQ(scratch.heads_vertical_slash, pl.n_head);
    EXPECT_EQ(scratch.heads_query_aware, 0);
    for (int32_t qb = m.mask.qb0; qb < m.mask.qb0 + m.mask.n_qb; ++qb) {
      for (int32_t j : pl.hot) {
        if (j / kSparseBlock <= qb) {
          EXPECT_TRUE(m.at(qb, j / kSparseBlock)) << "hot key " << j << ", query block " << qb;
        }
      }
      for (int32_t pos = std::max(qb * kSparseBlock, q_pos0); pos < std::min((qb + 1) * kSparseBlock, pl.n_k); ++pos) {
        if (pos - pl.offset >= 0) {
          EXPECT_TRUE(m.at(qb, (pos - pl.offset) / kSparseBlock)) << "slash, query " << pos;
        }
      }
    }
    // Gamma coverage of the diagonals also counts the hot keys' mass, which on the diagonals is
    // spread over hundreds of offsets: FlexPrefill keeps many more blocks than the structure needs,
    // but not all of them.
    const int64_t causal = causal_blocks(m.mask);
    std::printf("flexprefill, planted vertical-slash, chunk from %d: %lld of %lld blocks\n", q_pos0,
                static_cast<long long>(kept), static_cast<long long>(causal));
    EXPECT_LT(kept, causal * 3 / 4) << "kept " << kept << " of " << causal;
  }
}

TEST(FlexPrefill, PlantedBlockPatternIsRoutedQueryAware) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const testing::PlantedBlocks pb = testing::make_planted_blocks(rng);
  for (float gamma : {0.9f, 0.99f}) {
    PrefillSparseOptions o = flex_options();
    o.flex_gamma = gamma;
    const FlexPrefill method(o);
    for (int32_t q_pos0 : {0, pb.n_k - 1000}) {
      SCOPED_TRACE("gamma " + std::to_string(gamma) + ", chunk from " + std::to_string(q_pos0));
      const HeadInput in = chunk_of(pb.q, pb.n_head, pb.k, pb.head_dim, pb.n_k, pb.scale, q_pos0);
      OwnedMask m(in);
      Scratch scratch;
      const int64_t kept = select_blocks(method, in, scratch, m.mask);
      // Whole key blocks share the direction the queries look for: the pooled estimate is the
      // estimated attention, and the head is query-aware.
      EXPECT_EQ(scratch.heads_query_aware, pb.n_head);
      EXPECT_EQ(scratch.heads_vertical_slash, 0);
      int32_t hits = 0;
      for (int32_t qb = m.mask.qb0; qb < m.mask.qb0 + m.mask.n_qb; ++qb) hits += m.at(qb, pb.target[qb]);
      // The map's rows are ranked together: each target holds nearly all of its row's mass, so
      // covering gamma of the rows' mass takes at least gamma of the targets; at 0.99 (below every
      // target's share) it takes them all.
      if (gamma > 0.95f) {
        EXPECT_EQ(hits, m.mask.n_qb);
      } else {
        EXPECT_GE(hits, static_cast<int32_t>(std::floor(gamma * m.mask.n_qb)));
      }
      // The target, the sink and the diagonal per query block, and little else.
      EXPECT_LE(kept, 3 * m.mask.n_qb + m.mask.n_qb / 4) << "kept " << kept << " of " << causal_blocks(m.mask);
    }
  }
}

TEST(FlexPrefill, TauDecidesTheRoute) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const testing::Planted pl = testing::make_planted(rng);
  const testing::PlantedBlocks pb = testing::make_planted_blocks(rng);
  // sqrt(JS) lies in [0, sqrt(ln 2)]: tau 0 makes every head vertical-slash, tau 1 every head
  // query-aware, whatever its structure.
  for (float tau : {0.f, 1.f}) {
    PrefillSparseOptions o = flex_options();
    o.flex_tau = tau;
    const FlexPrefill method(o);
    Scratch scratch;
    const HeadInput a = chunk_of(pl.q, pl.n_head, pl.k, pl.head_dim, pl.n_k, pl.scale, pl.n_k - 512);
    OwnedMask ma(a);
    select_blocks(method, a, scratch, ma.mask);
    const HeadInput b = chunk_of(pb.q, pb.n_head, pb.k, pb.head_dim, pb.n_k, pb.scale, pb.n_k - 512);
    OwnedMask mb(b);
    select_blocks(method, b, scratch, mb.mask);
    EXPECT_EQ(scratch.heads_query_aware, tau > 0 ? 4 : 0) << "tau " << tau;
    EXPECT_EQ(scratch.heads_vertical_slash, tau > 0 ? 0 : 4) << "tau " << tau;
  }
}

TEST(FlexPrefill, FullCoverageKeepsEveryCausalBlock) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const testing::Planted pl = testing::make_planted(rng);
  const testing::PlantedBlocks pb = testing::make_planted_blocks(rng, 2048);
  PrefillSparseOptions o = flex_options();
  o.flex_gamma = 1.f;
  const FlexPrefill method(o);
  // Both routes: gamma 1 covers every key and offset of positive mass (every one: softmax is never
  // exactly 0 at these scores), or every entry of the block map.
  Scratch scratch;
  const HeadInput a = chunk_of(pl.q, pl.n_head, pl.k, pl.head_dim, pl.n_k, pl.scale, 1000);
  OwnedMask ma(a);
  EXPECT_EQ(select_blocks(method, a, scratch, ma.mask), causal_blocks(ma.mask));
  const HeadInput b = chunk_of(pb.q, pb.n_head, pb.k, pb.head_dim, pb.n_k, pb.scale, 0);
  OwnedMask mb(b);
  EXPECT_EQ(select_blocks(method, b, scratch, mb.mask), causal_blocks(mb.mask));
  EXPECT_EQ(scratch.heads_vertical_slash, 2);
  EXPECT_EQ(scratch.heads_query_aware, 2);
}

// The reference's min_budget / max_budget (tokens, rounded up to 64-token blocks) bound each query
// head's key blocks and diagonal blocks: under a cap of one block a vertical-slash head keeps one
// of each (its coverage's own when that is one, else the sink block and the main diagonal, which
// rank first); a minimum of every block keeps every causal block; a minimum on query-aware heads
// adds key blocks to their map's choice.
TEST(FlexPrefill, BudgetsBoundEachHeadsBlocks) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const testing::Planted pl = testing::make_planted(rng);
  const testing::PlantedBlocks pb = testing::make_planted_blocks(rng);
  for (int32_t q_pos0 : {0, pl.n_k - 1000}) {
    SCOPED_TRACE("chunk from " + std::to_string(q_pos0));
    const HeadInput in = chunk_of(pl.q, pl.n_head, pl.k, pl.head_dim, pl.n_k, pl.scale, q_pos0);
    Scratch scratch;
    OwnedMask free_mask(in);
    const int64_t unbounded = select_blocks(FlexPrefill(flex_options()), in, scratch, free_mask.mask);
    std::vector<uint8_t> one_block;  // the mask under a cap of 64 tokens
    for (int32_t cap : {1, 64}) {  // both round up to one block
      PrefillSparseOptions o = flex_options();
      o.flex_max_budget = cap;
      OwnedMask m(in);
      const int64_t kept = select_blocks(FlexPrefill(o), in, scratch, m.mask);
      if (cap == 64) one_block = m.bits;
      // Per head one key block and one diagonal at most, plus the sink and the diagonal every
      // chunk keeps: a row holds at most 2 per query head and 2 more.
      for (int32_t qb = m.mask.qb0; qb < m.mask.qb0 + m.mask.n_qb; ++qb) {
        int32_t row = 0;
        for (int32_t kb = 0; kb <= qb; ++kb) row += m.at(qb, kb) ? 1 : 0;
        EXPECT_LE(row, 2 * pl.n_head + 2) << "max budget " << cap << ", query block " << qb;
      }
      EXPECT_LT(kept, unbounded);
    }
    PrefillSparseOptions all = flex_options();
    all.flex_min_budget = pl.n_k;
    all.flex_max_budget = 0;
    OwnedMask m(in);
    EXPECT_EQ(select_blocks(FlexPrefill(all), in, scratch, m.mask), causal_blocks(m.mask));
    // The cap wins over the minimum, as the reference's clamp.
    all.flex_max_budget = 64;
    OwnedMask capped(in);
    select_blocks(FlexPrefill(all), in, scratch, capped.mask);
    EXPECT_EQ(capped.bits, one_block);
  }
  // Query-aware heads: a minimum of 4 blocks adds the 4 key blocks of most estimated mass (the sink
  // first) to the map's choice, so the last query block keeps at least 4 and the chunk more than
  // without it.
  const HeadInput in = chunk_of(pb.q, pb.n_head, pb.k, pb.head_dim, pb.n_k, pb.scale, pb.n_k - 1000);
  Scratch scratch;
  OwnedMask plain(in), with_min(in);
  const int64_t base = select_blocks(FlexPrefill(flex_options()), in, scratch, plain.mask);
  ASSERT_EQ(scratch.heads_query_aware, pb.n_head);
  PrefillSparseOptions o = flex_options();
  o.flex_min_budget = 4 * kSparseBlock;
  Scratch scratch2;
  const int64_t kept = select_blocks(FlexPrefill(o), in, scratch2, with_min.mask);
  EXPECT_EQ(scratch2.heads_query_aware, pb.n_head);
  const int32_t last = with_min.mask.qb0 + with_min.mask.n_qb - 1;
  int32_t in_last = 0;
  for (int32_t kb = 0; kb <= last; ++kb) in_last += with_min.at(last, kb) ? 1 : 0;
  EXPECT_GE(in_last, 4);
  EXPECT_GT(kept, base);
  for (size_t i = 0; i < plain.bits.size(); ++i) {
    ASSERT_TRUE(!plain.bits[i] || with_min.bits[i]) << "a block of the map's choice was dropped";
  }
}

TEST(FlexPrefill, Options) {
  PrefillSparseOptions o;
  ASSERT_TRUE(set_option(o, "prefill-sparse", "flexprefill", "--prefill-sparse").ok());
  EXPECT_EQ(o.method, Method::kFlexPrefill);
  EXPECT_STREQ(method_name(o.method), "flexprefill");
  EXPECT_FLOAT_EQ(o.flex_gamma, 0.9f);
  EXPECT_FLOAT_EQ(o.flex_tau, 0.1f);
  EXPECT_TRUE(set_option(o, "flex-gamma", "0.95", "--flex-gamma").ok());
  EXPECT_FLOAT_EQ(o.flex_gamma, 0.95f);
  EXPECT_TRUE(set_option(o, "flex-gamma", "1", "--flex-gamma").ok());
  EXPECT_TRUE(set_option(o, "flex-tau", "0", "--flex-tau").ok());
  EXPECT_FLOAT_EQ(o.flex_tau, 0.f);
  EXPECT_TRUE(set_option(o, "flex-tau", "2.5e-1", "--flex-tau").ok());
  EXPECT_FLOAT_EQ(o.flex_tau, 0.25f);
  EXPECT_TRUE(is_option("flex-gamma"));
  EXPECT_TRUE(is_option("flex-tau"));
  EXPECT_EQ(o.flex_min_budget, 0);
  EXPECT_EQ(o.flex_max_budget, 0);
  EXPECT_TRUE(set_option(o, "flex-min-budget", "512", "--flex-min-budget").ok());
  EXPECT_EQ(o.flex_min_budget, 512);
  EXPECT_TRUE(set_option(o, "flex-max-budget", "8192", "--flex-max-budget").ok());
  EXPECT_EQ(o.flex_max_budget, 8192);
  EXPECT_FALSE(set_option(o, "flex-min-budget", "-1", "--flex-min-budget").ok());
  EXPECT_FALSE(set_option(o, "flex-max-budget", "many", "--flex-max-budget").ok());
  EXPECT_EQ(o.flex_min_budget, 512);
  EXPECT_EQ(o.flex_max_budget, 8192);
  const struct {
    const char* name;
    const char* value;
    const char* message;
  } bad[] = {
      {"flex-gamma", "0", "--flex-gamma: 0 is not in (0, 1]"},
      {"flex-gamma", "1.5", "--flex-gamma: 1.5 is not in (0, 1]"},
      {"flex-gamma", "-0.1", "--flex-gamma: -0.1 is not in (0, 1]"},
      {"flex-gamma", "0.9x", "--flex-gamma: '0.9x' is not a number"},
      {"flex-gamma", "", "--flex-gamma: '' is not a number"},
      {"flex-gamma", "nan", "--flex-gamma: 'nan' is not a number"},
      {"flex-tau", "-0.01", "--flex-tau: -0.01 is not in [0, 1]"},
      {"flex-tau", "1.01", "--flex-tau: 1.01 is not in [0, 1]"},
      {"flex-tau", "inf", "--flex-tau: 'inf' is not a number"},
  };
  for (const auto& b : bad) {
    PrefillSparseOptions before = o;
    const Status st = set_option(o, b.name, b.value, std::string("--") + b.name);
    ASSERT_FALSE(st.ok()) << b.name << "=" << b.value;
    EXPECT_EQ(st.message(), b.message);
    EXPECT_EQ(o.flex_gamma, before.flex_gamma);
    EXPECT_EQ(o.flex_tau, before.flex_tau);
  }
}

}  // namespace
}  // namespace frugal::sparse
