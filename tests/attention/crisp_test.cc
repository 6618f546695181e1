// CRISP's block selection as built here (docs/long-context.md): routing by structural mass on
// planted structures, the planted blocks kept, the sink's share set aside, budgets that stop at the
// noise floor (flat on background noise while FlexPrefill's coverage grows with the context), and
// its options.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "attention/planted.h"
#include "attention/sparse_chunk.h"
#include "frugal/attention/sparse/crisp.h"
#include "frugal/attention/sparse/flexprefill.h"
#include "frugal/attention/sparse/prefill_sparsity.h"

namespace frugal::sparse {
namespace {

using testing::chunk_of;
using testing::OwnedMask;

PrefillSparseOptions crisp_options() {
  PrefillSparseOptions o;
  o.method = Method::kCrisp;
  return o;
}

TEST(Crisp, PlantedVerticalSlashHeadIsRoutedVerticalSlashAndKept) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const testing::Planted pl = testing::make_planted(rng);
  const Crisp method(crisp_options());
  for (int32_t q_pos0 : {0, pl.n_k - 1000}) {
    SCOPED_TRACE("chunk from " + std::to_string(q_pos0));
    const HeadInput in = chunk_of(pl.q, pl.n_head, pl.k, pl.head_dim, pl.n_k, pl.scale, q_pos0);
    OwnedMask m(in);
    Scratch scratch;
    const int64_t kept = select_blocks(method, in, scratch, m.mask);
    // The mass is on single keys and one diagonal: C_struct is near 1.
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
    // Once a hot key is taken, its mass leaves the diagonals it also lies on (and the slash's
    // leaves the keys it crosses): what is left of them is background, so the structure's columns
    // and two block diagonals are about all that is kept.
    const int64_t causal = causal_blocks(m.mask);
    std::printf("crisp, planted vertical-slash, chunk from %d: %lld of %lld blocks\n", q_pos0,
                static_cast<long long>(kept), static_cast<long long>(causal));
    EXPECT_LT(kept, causal / 3) << "kept " << kept << " of " << causal;
  }
}

TEST(Crisp, PlantedBlockPatternIsRoutedQueryAware) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const testing::PlantedBlocks pb = testing::make_planted_blocks(rng);
  const Crisp method(crisp_options());
  for (int32_t q_pos0 : {0, pb.n_k - 1000}) {
    SCOPED_TRACE("chunk from " + std::to_string(q_pos0));
    const HeadInput in = chunk_of(pb.q, pb.n_head, pb.k, pb.head_dim, pb.n_k, pb.scale, q_pos0);
    OwnedMask m(in);
    Scratch scratch;
    const int64_t kept = select_blocks(method, in, scratch, m.mask);
    // The last queries' mass is spread evenly over one key block: no key or diagonal stands out
    // of its block, C_struct is near 0.
    EXPECT_EQ(scratch.heads_query_aware, pb.n_head);
    EXPECT_EQ(scratch.heads_vertical_slash, 0);
    // Rows are covered one by one, so every query block keeps its target.
    for (int32_t qb = m.mask.qb0; qb < m.mask.qb0 + m.mask.n_qb; ++qb) {
      EXPECT_TRUE(m.at(qb, pb.target[qb])) << "query block " << qb << ", target " << pb.target[qb];
    }
    EXPECT_LE(kept, 3 * m.mask.n_qb + m.mask.n_qb / 4) << "kept " << kept << " of " << causal_blocks(m.mask);
  }
}

TEST(Crisp, KeepsAKeyTheSinkWouldHide) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  // 90% of every query's attention on the sink and 6% on one key: coverage of 90% of all the mass
  // would stop at the sink; CRISP covers the rest, where the key is most of the mass.
  const int32_t n_k = 4096, hot = 1500;
  const testing::NoiseWithSink p = testing::make_noise_with_sink(rng, n_k, 0.9f, hot, 0.06f);
  const Crisp method(crisp_options());
  const HeadInput in = chunk_of(p.q, p.n_head, p.k, p.head_dim, n_k, p.scale, n_k - 2048);
  OwnedMask m(in);
  Scratch scratch;
  const int64_t kept = select_blocks(method, in, scratch, m.mask);
  EXPECT_EQ(scratch.heads_vertical_slash, p.n_head);
  for (int32_t qb = m.mask.qb0; qb < m.mask.qb0 + m.mask.n_qb; ++qb) {
    EXPECT_TRUE(m.at(qb, hot / kSparseBlock)) << "query block " << qb;
  }
  // The sink, the diagonal and the key's block; the background is below the floor. Room for one
  // stray offset (two block diagonals): now and then a single query's score is an outlier holding
  // over 1% of its attention, which, alone on its diagonal, clears the floor (seen once in a few
  // hundred runs). Keeping the background would keep most of the 1552 causal blocks.
  EXPECT_LE(kept, 5 * m.mask.n_qb + m.mask.n_qb / 4) << "kept " << kept << " of " << causal_blocks(m.mask);
}

TEST(Crisp, KeptBlocksOnNoiseStayFewWithContextWhileFlexPrefillCoverageGrows) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  PrefillSparseOptions fo;
  fo.method = Method::kFlexPrefill;
  const FlexPrefill flex(fo);
  const Crisp crisp(crisp_options());
  double crisp_frac[2], flex_frac[2];
  int64_t crisp_kept[2], causal[2];
  const int32_t lengths[2] = {2048, 8192};
  for (int t = 0; t < 2; ++t) {
    // Half of every query's attention on the sink, the rest spread over the other keys.
    const testing::NoiseWithSink p = testing::make_noise_with_sink(rng, lengths[t], 0.5f);
    const HeadInput in = chunk_of(p.q, p.n_head, p.k, p.head_dim, p.n_k, p.scale, 0);
    OwnedMask mc(in), mf(in);
    Scratch scratch;
    crisp_kept[t] = select_blocks(crisp, in, scratch, mc.mask);
    const int64_t flex_kept = select_blocks(flex, in, scratch, mf.mask);
    causal[t] = causal_blocks(mc.mask);
    crisp_frac[t] = static_cast<double>(crisp_kept[t]) / causal[t];
    flex_frac[t] = static_cast<double>(flex_kept) / causal[t];
    std::printf("noise with a sink, %d keys: crisp keeps %lld of %lld blocks (%.3f), flexprefill %lld (%.3f)\n",
                lengths[t], static_cast<long long>(crisp_kept[t]), static_cast<long long>(causal[t]), crisp_frac[t],
                static_cast<long long>(flex_kept), flex_frac[t]);
  }
  // FlexPrefill: 90% of the mass is the sink and 80% of the rest, which is spread evenly: the
  // kept share stays high at every length, so the kept blocks grow with the causal ones.
  EXPECT_GT(flex_frac[0], 0.5);
  EXPECT_GT(flex_frac[1], 0.7 * flex_frac[0]);
  // CRISP: nothing of the rest is above the floor: the sink and the diagonal, whose share falls as
  // the context grows; 16x the causal blocks, at most 8x the kept ones.
  EXPECT_LT(crisp_frac[1], 0.5 * crisp_frac[0]);
  EXPECT_LT(crisp_kept[1], 8 * crisp_kept[0]) << "causal " << causal[0] << " -> " << causal[1];
}

TEST(Crisp, RouteDecidesTheRoute) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const testing::Planted pl = testing::make_planted(rng);
  const testing::PlantedBlocks pb = testing::make_planted_blocks(rng);
  const HeadInput a = chunk_of(pl.q, pl.n_head, pl.k, pl.head_dim, pl.n_k, pl.scale, pl.n_k - 512);
  const HeadInput b = chunk_of(pb.q, pb.n_head, pb.k, pb.head_dim, pb.n_k, pb.scale, pb.n_k - 512);
  // Route 0 makes every head vertical-slash, the block pattern's too. At route 1 the block pattern
  // stays query-aware; the planted vertical-slash heads reach C_struct 1 (their peaked keys and
  // offsets, summed, hold all of M: the cap), so only these two inputs' defaults are tested there.
  for (float route : {0.f, 0.5f, 1.f}) {
    SCOPED_TRACE("route " + std::to_string(route));
    PrefillSparseOptions o = crisp_options();
    o.crisp_route = route;
    const Crisp method(o);
    Scratch sa, sb;
    OwnedMask ma(a), mb(b);
    select_blocks(method, a, sa, ma.mask);
    select_blocks(method, b, sb, mb.mask);
    if (route < 1.f) {
      EXPECT_EQ(sa.heads_vertical_slash, 2);
      EXPECT_EQ(sa.heads_query_aware, 0);
    }
    EXPECT_EQ(sb.heads_vertical_slash, route > 0 ? 0 : 2);
    EXPECT_EQ(sb.heads_query_aware, route > 0 ? 2 : 0);
  }
}

TEST(Crisp, Options) {
  PrefillSparseOptions o;
  ASSERT_TRUE(set_option(o, "prefill-sparse", "crisp", "--prefill-sparse").ok());
  EXPECT_EQ(o.method, Method::kCrisp);
  EXPECT_STREQ(method_name(o.method), "crisp");
  EXPECT_FLOAT_EQ(o.crisp_gamma, 1.f);
  EXPECT_FLOAT_EQ(o.crisp_floor, 4.f);
  EXPECT_FLOAT_EQ(o.crisp_route, 0.5f);
  EXPECT_TRUE(set_option(o, "crisp-gamma", "0.9", "--crisp-gamma").ok());
  EXPECT_FLOAT_EQ(o.crisp_gamma, 0.9f);
  EXPECT_TRUE(set_option(o, "crisp-floor", "0", "--crisp-floor").ok());
  EXPECT_TRUE(set_option(o, "crisp-floor", "16", "--crisp-floor").ok());
  EXPECT_FLOAT_EQ(o.crisp_floor, 16.f);
  EXPECT_TRUE(set_option(o, "crisp-route", "0.25", "--crisp-route").ok());
  EXPECT_FLOAT_EQ(o.crisp_route, 0.25f);
  for (const char* name : {"crisp-gamma", "crisp-floor", "crisp-route"}) EXPECT_TRUE(is_option(name)) << name;
  const struct {
    const char* name;
    const char* value;
    const char* message;
  } bad[] = {
      {"crisp-gamma", "0", "--crisp-gamma: 0 is not in (0, 1]"},
      {"crisp-gamma", "1.01", "--crisp-gamma: 1.01 is not in (0, 1]"},
      {"crisp-floor", "-1", "--crisp-floor: -1 is not in [0, 1000000]"},
      {"crisp-floor", "2e6", "--crisp-floor: 2e6 is not in [0, 1000000]"},
      {"crisp-floor", "four", "--crisp-floor: 'four' is not a number"},
      {"crisp-route", "1.5", "--crisp-route: 1.5 is not in [0, 1]"},
      {"crisp-route", "-0.5", "--crisp-route: -0.5 is not in [0, 1]"},
      {"crisp-route", " 0.5", "--crisp-route: ' 0.5' is not a number"},
  };
  for (const auto& b : bad) {
    PrefillSparseOptions before = o;
    const Status st = set_option(o, b.name, b.value, std::string("--") + b.name);
    ASSERT_FALSE(st.ok()) << b.name << "=" << b.value;
    EXPECT_EQ(st.message(), b.message);
    EXPECT_EQ(o.crisp_gamma, before.crisp_gamma);
    EXPECT_EQ(o.crisp_floor, before.crisp_floor);
    EXPECT_EQ(o.crisp_route, before.crisp_route);
  }
}

}  // namespace
}  // namespace frugal::sparse
