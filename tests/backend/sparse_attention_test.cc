// Sparse prefill in the CPU attention: with budgets that keep every block it computes exactly what
// dense attention computes (the same operations per row: a tile's rows are SIMD lanes and a block
// no row of the tile sees leaves them unchanged); short prompts and decode tokens take the dense
// path; on a planted vertical-slash structure its error is within the bound the dropped mass gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "attention/planted.h"
#include "frugal/attention/sparse/minference.h"
#include "frugal/kv/kv_cache.h"
#include "test_util.h"

namespace frugal {
namespace {

using testing::backend_with;
using testing::random_floats;

struct Filled {
  KvCache kv;
  std::vector<float> q;  // a query for every position of every sequence: [seq][pos][n_head][head_dim]
};

// A cache of one layer with sequences of the given lengths, random keys and values.
Filled filled_cache(std::mt19937& rng, DType dtype, int n_head, int n_head_kv, int head_dim,
                    const std::vector<int32_t>& lens) {
  KvCacheOptions ko;
  ko.n_layer = 1;
  ko.n_head_kv = n_head_kv;
  ko.head_dim = head_dim;
  ko.n_seq = static_cast<int>(lens.size());
  ko.capacity = *std::max_element(lens.begin(), lens.end());
  ko.dtype = dtype;
  auto kvr = KvCache::create(ko);
  EXPECT_TRUE(kvr.ok());
  Filled f{std::move(kvr.value()), {}};
  for (size_t s = 0; s < lens.size(); ++s) {
    for (int32_t p = 0; p < lens[s]; ++p) {
      const auto k = random_floats(rng, static_cast<size_t>(n_head_kv) * head_dim, 1.5f);
      const auto v = random_floats(rng, static_cast<size_t>(n_head_kv) * head_dim);
      EXPECT_TRUE(f.kv.append(0, static_cast<int>(s), p, k.data(), v.data()).ok());
    }
  }
  return f;
}

struct Batch1 {
  std::vector<int32_t> seq, pos;
  void add(int32_t s, int32_t from, int32_t to) {
    for (int32_t p = from; p < to; ++p) seq.push_back(s), pos.push_back(p);
  }
};

std::vector<float> run(Backend& be, const KvCache& kv, const Batch1& b, const std::vector<float>& q,
                       const AttentionParams& p) {
  std::vector<float> out(q.size(), -777.f);
  be.attention(q.data(), kv, 0, b.seq.data(), b.pos.data(), static_cast<int64_t>(b.seq.size()), p, out.data());
  return out;
}

AttentionParams params(int n_head, int n_head_kv, int head_dim) {
  AttentionParams p;
  p.n_head = n_head;
  p.n_head_kv = n_head_kv;
  p.head_dim = head_dim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  return p;
}

TEST(SparseAttention, FullBudgetsEqualDenseBitForBit) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  sparse::PrefillSparseOptions full;
  full.method = sparse::Method::kMInference;
  full.vertical_size = 1 << 30;
  full.slash_size = 1 << 30;
  for (DType dtype : {DType::kF16, DType::kF32}) {
    const int n_head = 8, n_head_kv = 2, dim = 64;
    Filled f = filled_cache(rng, dtype, n_head, n_head_kv, dim, {1000, 700, 300});
    const AttentionParams p = params(n_head, n_head_kv, dim);
    // A whole prompt, a late chunk not aligned to blocks, a decode token, and a chunk too short
    // for a block, in one ragged batch; then a whole prompt alone.
    Batch1 b;
    b.add(1, 0, 700);
    b.add(0, 421, 1000);
    b.add(2, 299, 300);
    b.add(2, 250, 290);
    Batch1 b2;
    b2.add(0, 0, 1000);
    for (const Batch1* bb : {&b, &b2}) {
      const auto q = random_floats(rng, bb->seq.size() * n_head * dim);
      for (int threads : {1, 3}) {
        auto dense = backend_with(threads);
        auto sp = backend_with(threads);
        ASSERT_TRUE(sp->set_prefill_sparse(full).ok());
        const auto ref = run(*dense, f.kv, *bb, q, p);
        const auto out = run(*sp, f.kv, *bb, q, p);
        ASSERT_EQ(0, std::memcmp(ref.data(), out.data(), ref.size() * sizeof(float))) << "threads " << threads;
        const sparse::PrefillSparseStats st = sp->prefill_sparse_stats();
        EXPECT_EQ(st.sparse_calls, bb == &b ? 2 : 1);
        EXPECT_EQ(st.dense_calls, 0);
        EXPECT_GT(st.blocks_causal, 0);
        EXPECT_EQ(st.blocks_kept, st.blocks_causal);
      }
    }
  }
}

TEST(SparseAttention, ShortPromptsAndDecodeStayDense) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int n_head = 4, n_head_kv = 4, dim = 32;
  Filled f = filled_cache(rng, DType::kF16, n_head, n_head_kv, dim, {255, 2000});
  const AttentionParams p = params(n_head, n_head_kv, dim);
  sparse::PrefillSparseOptions tiny;
  tiny.method = sparse::Method::kMInference;
  tiny.vertical_size = 1;
  tiny.slash_size = 1;
  auto dense = backend_with(2);
  auto sp = backend_with(2);
  ASSERT_TRUE(sp->set_prefill_sparse(tiny).ok());
  Batch1 shortp;  // 255 keys: under 4 blocks
  shortp.add(0, 0, 255);
  Batch1 decode;  // one token at a long context, and a 40-token verification-sized run
  decode.add(1, 1999, 2000);
  decode.add(1, 1900, 1940);
  for (const Batch1* bb : {&shortp, &decode}) {
    const auto q = random_floats(rng, bb->seq.size() * n_head * dim);
    const auto ref = run(*dense, f.kv, *bb, q, p);
    const auto out = run(*sp, f.kv, *bb, q, p);
    ASSERT_EQ(0, std::memcmp(ref.data(), out.data(), ref.size() * sizeof(float)));
  }
  const sparse::PrefillSparseStats st = sp->prefill_sparse_stats();
  EXPECT_EQ(st.sparse_calls, 0);
  EXPECT_EQ(st.dense_calls, 1);  // the short prompt; decode and short runs are not prefill chunks
  // The same tiny budgets on the long sequence do drop blocks (the test above can fail).
  Batch1 longp;
  longp.add(1, 0, 2000);
  const auto q = random_floats(rng, longp.seq.size() * n_head * dim);
  const auto ref = run(*dense, f.kv, longp, q, p);
  const auto out = run(*sp, f.kv, longp, q, p);
  EXPECT_NE(0, std::memcmp(ref.data(), out.data(), ref.size() * sizeof(float)));
  EXPECT_LT(sp->prefill_sparse_stats().blocks_kept, sp->prefill_sparse_stats().blocks_causal);
  // Choosing none again is always accepted.
  EXPECT_TRUE(dense->set_prefill_sparse(sparse::PrefillSparseOptions{}).ok());
}

// Bound: with S the kept keys of a row and eps the softmax mass outside S, the dense output is
// (1 - eps) o_S + eps o_rest and the sparse one o_S, so each component differs by at most
// eps |o_S - o_rest| <= 2 eps max|v|; float rounding of the two kernels adds ~1e-6 relative.
TEST(SparseAttention, PlantedStructureWithinDroppedMassBound) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const testing::Planted pl = testing::make_planted(rng);
  const int d = pl.head_dim;
  KvCacheOptions ko;
  ko.n_layer = 1;
  ko.n_head_kv = 1;
  ko.head_dim = d;
  ko.n_seq = 1;
  ko.capacity = pl.n_k;
  ko.dtype = DType::kF32;
  auto kvr = KvCache::create(ko);
  ASSERT_TRUE(kvr.ok());
  KvCache& kv = kvr.value();
  for (int32_t j = 0; j < pl.n_k; ++j) {
    ASSERT_TRUE(kv.append(0, 0, j, pl.k.data() + static_cast<size_t>(j) * d, pl.v.data() + static_cast<size_t>(j) * d).ok());
  }
  AttentionParams p = params(pl.n_head, 1, d);
  p.scale = pl.scale;
  const int32_t q_pos0 = pl.n_k - 1024;
  Batch1 b;
  b.add(0, q_pos0, pl.n_k);
  const std::vector<float> q(pl.q.begin() + static_cast<int64_t>(q_pos0) * pl.n_head * d, pl.q.end());

  sparse::PrefillSparseOptions o;
  o.method = sparse::Method::kMInference;
  o.vertical_size = 8;  // the planted structure's size (tests/attention: the estimation finds it)
  o.slash_size = 101;
  auto dense = backend_with(2);
  auto sp = backend_with(2);
  ASSERT_TRUE(sp->set_prefill_sparse(o).ok());
  const auto ref = run(*dense, kv, b, q, p);
  const auto out = run(*sp, kv, b, q, p);

  // The mask the backend used: the same method on the same floats.
  sparse::HeadInput in;
  in.q = q.data();
  in.token_stride = static_cast<int64_t>(pl.n_head) * d;
  in.n_rep = pl.n_head;
  in.n_q = 1024;
  in.q_pos0 = q_pos0;
  in.k = pl.k.data();
  in.n_k = pl.n_k;
  in.head_dim = d;
  in.scale = pl.scale;
  sparse::BlockMask mask = sparse::mask_shape(q_pos0, 1024);
  std::vector<uint8_t> bits(static_cast<size_t>(mask.bytes()));
  mask.bits = bits.data();
  sparse::Scratch scratch;
  const int64_t kept = sparse::select_blocks(sparse::MInference(o), in, scratch, mask);
  EXPECT_EQ(kept, sp->prefill_sparse_stats().blocks_kept);
  EXPECT_LT(kept, sparse::causal_blocks(mask) / 2);

  const float vmax = std::abs(*std::max_element(pl.v.begin(), pl.v.end(), [](float a, float c) { return std::abs(a) < std::abs(c); }));
  double worst_eps = 0;
  std::vector<double> s(static_cast<size_t>(pl.n_k));
  for (int32_t i = 0; i < 1024; ++i) {
    const int32_t pos = q_pos0 + i;
    const uint8_t* row = mask.row(pos / sparse::kSparseBlock - mask.qb0);
    for (int h = 0; h < pl.n_head; ++h) {
      const float* qh = q.data() + (static_cast<size_t>(i) * pl.n_head + h) * d;
      double m = -1e300;
      for (int32_t j = 0; j <= pos; ++j) {
        double dot = 0;
        for (int e = 0; e < d; ++e) dot += static_cast<double>(qh[e]) * pl.k[static_cast<size_t>(j) * d + e];
        s[j] = dot * pl.scale;
        m = std::max(m, s[j]);
      }
      double all = 0, dropped = 0;
      for (int32_t j = 0; j <= pos; ++j) {
        const double w = std::exp(s[j] - m);
        all += w;
        if (!row[j / sparse::kSparseBlock]) dropped += w;
      }
      const double eps = dropped / all;
      worst_eps = std::max(worst_eps, eps);
      const double bound = 2 * eps * vmax + 1e-4;
      for (int e = 0; e < d; ++e) {
        const size_t at = (static_cast<size_t>(i) * pl.n_head + h) * d + e;
        ASSERT_LE(std::abs(out[at] - ref[at]), bound) << "query " << pos << " head " << h << " eps " << eps;
      }
    }
  }
  // The planted keys hold nearly all the mass, and the mask keeps them.
  EXPECT_LT(worst_eps, 0.05);  // observed up to about 0.022 over many seeds
}

}  // namespace
}  // namespace frugal
