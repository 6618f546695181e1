// Block selection of sparse prefill: the blocks every method must keep, MInference's estimation on
// inputs with a planted vertical-slash structure, and the options' parsing (FlexPrefill's and
// CRISP's own tests are flexprefill_test.cc and crisp_test.cc).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "frugal/attention/sparse/minference.h"
#include "frugal/attention/sparse/prefill_sparsity.h"
#include "attention/planted.h"

namespace frugal::sparse {
namespace {

std::vector<float> normal(std::mt19937& rng, size_t n) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

HeadInput input_of(const std::vector<float>& q, int n_rep, int dim, int32_t q_pos0, int32_t n_q,
                   const std::vector<float>& k) {
  HeadInput in;
  in.q = q.data();
  in.token_stride = static_cast<int64_t>(n_rep) * dim;
  in.n_rep = n_rep;
  in.n_q = n_q;
  in.q_pos0 = q_pos0;
  in.k = k.data();
  in.n_k = q_pos0 + n_q;
  in.head_dim = dim;
  in.scale = 1.f / std::sqrt(static_cast<float>(dim));
  return in;
}

TEST(PrefillSparsity, MaskKeepsSinkAndDiagonalAndIsCausal) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  Scratch scratch;
  for (int trial = 0; trial < 20; ++trial) {
    std::uniform_int_distribution<int32_t> len(1, 1500);
    const int32_t q_pos0 = len(rng) - 1;
    const int32_t n_q = len(rng);
    const int n_rep = 1 + trial % 3;
    const int dim = 16;
    const auto q = normal(rng, static_cast<size_t>(n_q) * n_rep * dim);
    const auto k = normal(rng, static_cast<size_t>(q_pos0 + n_q) * dim);
    PrefillSparseOptions o;
    o.method = Method::kMInference;
    o.last_q = 1 + trial * 7;
    o.vertical_size = trial % 4 == 0 ? 0 : 1 + trial;
    o.slash_size = trial % 4 == 0 ? 0 : 1 + 2 * trial;
    std::uniform_real_distribution<float> unit(0.f, 1.f);
    o.flex_gamma = trial % 5 == 0 ? 1.f : 0.05f + 0.9f * unit(rng);
    o.flex_tau = unit(rng);
    o.crisp_gamma = trial % 5 == 0 ? 1.f : 0.05f + 0.9f * unit(rng);
    o.crisp_floor = trial % 7 == 0 ? 0.f : 8.f * unit(rng);
    o.crisp_route = unit(rng);
    for (Method m : {Method::kNone, Method::kMInference, Method::kFlexPrefill, Method::kCrisp}) {
      SCOPED_TRACE(std::string("method ") + method_name(m) + ", trial " + std::to_string(trial));
      o.method = m;
      const auto method = make_prefill_sparsity(o);
      BlockMask mask = mask_shape(q_pos0, n_q);
      ASSERT_EQ(mask.qb0, q_pos0 / kSparseBlock);
      ASSERT_EQ(mask.n_kb, (q_pos0 + n_q - 1) / kSparseBlock + 1);
      std::vector<uint8_t> bits(static_cast<size_t>(mask.bytes()), 7);
      mask.bits = bits.data();
      const int64_t kept = select_blocks(*method, input_of(q, n_rep, dim, q_pos0, n_q, k), scratch, mask);
      int64_t counted = 0;
      for (int32_t r = 0; r < mask.n_qb; ++r) {
        const int32_t qb = mask.qb0 + r;
        const uint8_t* row = mask.row(r);
        EXPECT_EQ(row[0], 1) << "sink, query block " << qb;
        EXPECT_EQ(row[qb], 1) << "diagonal, query block " << qb;
        for (int32_t kb = 0; kb < mask.n_kb; ++kb) {
          EXPECT_LE(row[kb], 1);
          if (kb > qb) {
            EXPECT_EQ(row[kb], 0) << "past the diagonal: query block " << qb << " key block " << kb;
          }
          counted += row[kb];
        }
      }
      EXPECT_EQ(kept, counted);
      if (m == Method::kNone) {
        EXPECT_EQ(kept, causal_blocks(mask));
      }
    }
  }
}

TEST(PrefillSparsity, FullBudgetsKeepEveryCausalBlock) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  Scratch scratch;
  PrefillSparseOptions o;
  o.method = Method::kMInference;
  o.vertical_size = 1 << 30;
  o.slash_size = 1 << 30;
  const auto method = make_prefill_sparsity(o);
  const int32_t q_pos0 = 333, n_q = 900;
  const auto q = normal(rng, static_cast<size_t>(n_q) * 2 * 32);
  const auto k = normal(rng, static_cast<size_t>(q_pos0 + n_q) * 32);
  BlockMask mask = mask_shape(q_pos0, n_q);
  std::vector<uint8_t> bits(static_cast<size_t>(mask.bytes()));
  mask.bits = bits.data();
  EXPECT_EQ(select_blocks(*method, input_of(q, 2, 32, q_pos0, n_q, k), scratch, mask), causal_blocks(mask));
}

TEST(PrefillSparsity, MInferenceFindsPlantedVerticalsAndSlash) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const testing::Planted pl = testing::make_planted(rng);
  PrefillSparseOptions o;
  o.method = Method::kMInference;
  // Budgets of exactly the planted structure's size: the 8 hot keys, and the planted diagonal
  // after the 100 forced local ones; a noise key or offset ranked above a planted one fails.
  o.vertical_size = 8;
  o.slash_size = 101;
  const MInference method(o);
  Scratch scratch;
  // The whole prompt as one chunk, and its last 1000 tokens as a chunk after the others.
  for (int32_t q_pos0 : {0, pl.n_k - 1000}) {
    SCOPED_TRACE("chunk from " + std::to_string(q_pos0));
    const int32_t n_q = pl.n_k - q_pos0;
    HeadInput in;
    in.q = pl.q.data() + static_cast<size_t>(q_pos0) * pl.n_head * pl.head_dim;
    in.token_stride = static_cast<int64_t>(pl.n_head) * pl.head_dim;
    in.n_rep = pl.n_head;
    in.n_q = n_q;
    in.q_pos0 = q_pos0;
    in.k = pl.k.data();
    in.n_k = pl.n_k;
    in.head_dim = pl.head_dim;
    in.scale = pl.scale;
    BlockMask mask = mask_shape(q_pos0, n_q);
    std::vector<uint8_t> bits(static_cast<size_t>(mask.bytes()));
    mask.bits = bits.data();
    const int64_t kept = select_blocks(method, in, scratch, mask);
    for (int32_t r = 0; r < mask.n_qb; ++r) {
      const int32_t qb = mask.qb0 + r;
      for (int32_t j : pl.hot) {
        if (j / kSparseBlock <= qb) {
          EXPECT_EQ(mask.row(r)[j / kSparseBlock], 1) << "hot key " << j << ", query block " << qb;
        }
      }
      // Keys `offset` before the block's queries.
      for (int32_t pos = std::max(qb * kSparseBlock, q_pos0); pos < std::min((qb + 1) * kSparseBlock, pl.n_k); ++pos) {
        if (pos - pl.offset >= 0) {
          EXPECT_EQ(mask.row(r)[(pos - pl.offset) / kSparseBlock], 1) << "slash, query " << pos;
        }
      }
    }
    // The structure is found without keeping everything: 8 hot keys' blocks, 2 diagonals for the
    // slash, the sink and 3 near the diagonal (the forced local ones), of up to 64 key blocks.
    EXPECT_LT(kept, causal_blocks(mask) / 2) << "kept " << kept << " of " << causal_blocks(mask);
  }
}

TEST(PrefillSparsity, BudgetsScaleWithLength) {
  PrefillSparseOptions o;
  o.method = Method::kMInference;
  const MInference m(o);
  EXPECT_EQ(m.vertical_size(131072), 1000);
  EXPECT_EQ(m.slash_size(131072), 6096);
  EXPECT_EQ(m.vertical_size(8192), 62);
  EXPECT_EQ(m.slash_size(8192), 381);
  EXPECT_EQ(m.vertical_size(1000), 30);
  EXPECT_EQ(m.slash_size(1000), 50);
  EXPECT_EQ(m.slash_size(20), 20);  // never more than there are
  o.vertical_size = 77;
  o.slash_size = 99;
  const MInference m2(o);
  EXPECT_EQ(m2.vertical_size(8192), 77);
  EXPECT_EQ(m2.slash_size(8192), 99);
}

TEST(PrefillSparsity, OptionParsing) {
  PrefillSparseOptions o;
  EXPECT_TRUE(set_option(o, "prefill-sparse", "minference", "--prefill-sparse").ok());
  EXPECT_EQ(o.method, Method::kMInference);
  EXPECT_TRUE(set_option(o, "prefill-sparse", "none", "--prefill-sparse").ok());
  EXPECT_EQ(o.method, Method::kNone);
  EXPECT_TRUE(set_option(o, "sparse-vertical", "500", "--sparse-vertical").ok());
  EXPECT_EQ(o.vertical_size, 500);
  EXPECT_TRUE(set_option(o, "sparse-slash", "0", "--sparse-slash").ok());
  EXPECT_TRUE(set_option(o, "sparse-last-q", "128", "--sparse-last-q").ok());
  EXPECT_EQ(o.last_q, 128);
  EXPECT_TRUE(set_option(o, "sparse-min-blocks", "8", "--sparse-min-blocks").ok());
  EXPECT_EQ(o.min_blocks, 8);

  const Status bad = set_option(o, "prefill-sparse", "flexprefil", "--prefill-sparse");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("--prefill-sparse"), std::string::npos) << bad.message();
  EXPECT_NE(bad.message().find("'flexprefil' is not a prefill sparsity method (none, minference, flexprefill or crisp)"),
            std::string::npos)
      << bad.message();
  EXPECT_EQ(o.method, Method::kNone);  // unchanged
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"sparse-vertical", "-1"}, {"sparse-vertical", "12x"}, {"sparse-slash", ""}, {"sparse-last-q", "0"},
           {"sparse-last-q", "5000"}, {"sparse-min-blocks", "0"}, {"sparse-slash", "3000000000"}}) {
    const Status st = set_option(o, name, value, "--" + name);
    EXPECT_FALSE(st.ok()) << name << "=" << value;
    EXPECT_NE(st.message().find("--" + name), std::string::npos) << st.message();
  }
  EXPECT_FALSE(set_option(o, "sparse-nothing", "1", "--sparse-nothing").ok());
  EXPECT_TRUE(is_option("sparse-slash"));
  EXPECT_FALSE(is_option("kv-type"));
}

}  // namespace
}  // namespace frugal::sparse
