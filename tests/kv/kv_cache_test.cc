#include "frugal/kv/kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <random>

#include "frugal/core/half.h"

namespace frugal {
namespace {

KvCacheOptions small_opts(DType dtype) {
  KvCacheOptions o;
  o.n_layer = 2;
  o.n_head_kv = 3;
  o.head_dim = 8;
  o.n_seq = 2;
  o.capacity = 5;
  o.dtype = dtype;
  return o;
}

std::vector<float> random_row(std::mt19937& rng, int n) {
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// Resident set size in bytes from /proc/self/statm (0 where it cannot be read).
int64_t resident_bytes() {
  std::ifstream f("/proc/self/statm");
  int64_t total = 0, resident = 0;
  if (!(f >> total >> resident)) return 0;
  return resident * 4096;
}

// The cache is reserved for its whole capacity at creation, but a reservation must not become
// resident memory before tokens are written (the memory a run reports should follow what it
// holds). A fresh cache reads as zeros, and writing one head's rows touches only those pages.
TEST(KvCache, ReservationIsNotResidentUntilWritten) {
  if (resident_bytes() == 0) GTEST_SKIP() << "no /proc/self/statm";
  KvCacheOptions o;
  o.n_layer = 8;
  o.n_head_kv = 4;
  o.head_dim = 128;
  o.capacity = 8192;
  o.dtype = DType::kF16;  // 8 * 4 * 8192 * 128 * 2 bytes = 64 MiB for K, the same for V
  const int64_t before = resident_bytes();
  auto cache = KvCache::create(o);
  ASSERT_TRUE(cache.ok()) << cache.status().to_string();
  const int64_t after = resident_bytes();
  // The position table (4 bytes per slot, 1 MiB here) is written; K and V (128 MiB) are not.
  EXPECT_LT(after - before, 16 << 20) << "creating a 128 MiB cache made " << (after - before)
                                      << " bytes resident";
  EXPECT_EQ(cache->size(7, 0, 3), 0);
  EXPECT_EQ(cache->free_pages(), cache->total_pages());
}

// Pages lent out of the pool (the engine pays the KV policies' state with them) count as used,
// come back whole, and their storage stops being resident while lent: with pages of 8 KiB the
// resident memory drops by what is lent.
TEST(KvCache, LentPagesLeaveThePoolAndTheirMemory) {
  KvCacheOptions o;
  o.n_layer = 4;
  o.n_head_kv = 4;
  o.head_dim = 128;
  o.n_seq = 1;
  o.capacity = 4096;  // 2,048 pages of 32 tokens, 8 KiB of K and 8 KiB of V each: 32 MiB
  o.dtype = DType::kF16;
  auto cache = KvCache::create(o);
  ASSERT_TRUE(cache.ok()) << cache.status().to_string();
  KvCache& c = *cache;
  const int64_t total = c.total_pages();
  ASSERT_EQ(total, 2048);
  std::mt19937 rng(11);
  const std::vector<float> row = random_row(rng, o.n_head_kv * o.head_dim);
  for (int32_t p = 0; p < o.capacity; ++p) {
    for (int l = 0; l < o.n_layer; ++l) ASSERT_TRUE(c.append(l, 0, p, row.data(), row.data()).ok());
  }
  c.release(0);  // every page written, then freed: still resident
  EXPECT_EQ(c.free_pages(), total);
  const int64_t before = resident_bytes();

  EXPECT_EQ(c.lend_pages(total + 1).code(), ErrorCode::kOverBudget);
  EXPECT_EQ(c.free_pages(), total);
  ASSERT_TRUE(c.lend_pages(total / 2).ok());
  EXPECT_EQ(c.lent_pages(), total / 2);
  EXPECT_EQ(c.free_pages(), total / 2);
  EXPECT_TRUE(c.audit_pages().ok()) << c.audit_pages().to_string();
  if (before > 0) {
    const int64_t dropped = before - resident_bytes();
    EXPECT_GT(dropped, 14 << 20) << "lending 16 MiB of written pages released " << dropped << " bytes";
  }
  // The pool can still hold what is not lent, and no more.
  for (int32_t p = 0; p < o.capacity / 2; ++p) {
    for (int l = 0; l < o.n_layer; ++l) ASSERT_TRUE(c.append(l, 0, p, row.data(), row.data()).ok());
  }
  EXPECT_EQ(c.free_pages(), 0);
  EXPECT_EQ(c.reserve(0, 1).code(), ErrorCode::kOverBudget);
  c.return_pages(total);  // more than lent: gives back what there is
  EXPECT_EQ(c.lent_pages(), 0);
  EXPECT_EQ(c.free_pages(), total / 2);
  EXPECT_TRUE(c.audit_pages().ok()) << c.audit_pages().to_string();
  // Pages that were lent (their memory given back) hold new rows exactly.
  for (int32_t p = o.capacity / 2; p < o.capacity; ++p) {
    for (int l = 0; l < o.n_layer; ++l) ASSERT_TRUE(c.append(l, 0, p, row.data(), row.data()).ok());
  }
  std::vector<float> k(static_cast<size_t>(o.capacity) * o.head_dim), v(k.size());
  c.read_rows(3, 0, 2, k.data(), v.data());
  for (int32_t p = 0; p < o.capacity; p += 97) {
    for (int d = 0; d < o.head_dim; ++d) {
      ASSERT_EQ(k[static_cast<size_t>(p) * o.head_dim + d], fp16_to_f32(f32_to_fp16(row[2 * 128 + d])))
          << "token " << p << " channel " << d;
    }
  }
}

TEST(KvCache, RejectsBadOptions) {
  KvCacheOptions o = small_opts(DType::kF16);
  o.capacity = 0;
  auto c = KvCache::create(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kInvalidArgument);
  o = small_opts(DType::kQ4_0);
  EXPECT_EQ(KvCache::create(o).status().code(), ErrorCode::kNotSupported);
}

TEST(KvCache, AppendStoresRowsPerHeadAndPositions) {
  for (DType dt : {DType::kF32, DType::kF16}) {
    auto c = KvCache::create(small_opts(dt));
    ASSERT_TRUE(c.ok());
    std::mt19937 rng(7);
    const int kv_dim = 3 * 8;
    std::vector<std::vector<float>> ks, vs;
    for (int p = 0; p < 4; ++p) {
      ks.push_back(random_row(rng, kv_dim));
      vs.push_back(random_row(rng, kv_dim));
      ASSERT_TRUE(c->append(1, 1, p * 2, ks.back().data(), vs.back().data()).ok());
    }
    EXPECT_EQ(c->size(1, 1, 2), 4);
    EXPECT_EQ(c->size(0, 1, 2), 0);
    EXPECT_EQ(c->size(1, 0, 2), 0);
    EXPECT_EQ(c->positions(1, 1, 2)[3], 6);
    for (int h = 0; h < 3; ++h) {
      for (int t = 0; t < 4; ++t) {
        for (int d = 0; d < 8; ++d) {
          const float want_k = ks[t][h * 8 + d], want_v = vs[t][h * 8 + d];
          float got_k, got_v;
          if (dt == DType::kF32) {
            got_k = static_cast<const float*>(c->key_row(1, 1, h, t))[d];
            got_v = static_cast<const float*>(c->value_row(1, 1, h, t))[d];
            EXPECT_EQ(got_k, want_k);
            EXPECT_EQ(got_v, want_v);
          } else {
            got_k = fp16_to_f32(static_cast<const uint16_t*>(c->key_row(1, 1, h, t))[d]);
            got_v = fp16_to_f32(static_cast<const uint16_t*>(c->value_row(1, 1, h, t))[d]);
            EXPECT_EQ(got_k, fp16_to_f32(f32_to_fp16(want_k)));
            EXPECT_EQ(got_v, fp16_to_f32(f32_to_fp16(want_v)));
          }
        }
      }
    }
    EXPECT_EQ(c->used_bytes(), 4u * 3 * c->row_bytes() * 2);
  }
}

TEST(KvCache, FullHeadIsOverBudget) {
  auto c = KvCache::create(small_opts(DType::kF16));
  ASSERT_TRUE(c.ok());
  std::vector<float> row(24, 0.5f);
  for (int p = 0; p < 5; ++p) ASSERT_TRUE(c->append(0, 0, p, row.data(), row.data()).ok());
  Status st = c->append(0, 0, 5, row.data(), row.data());
  EXPECT_EQ(st.code(), ErrorCode::kOverBudget);
  EXPECT_EQ(c->append(0, 7, 0, row.data(), row.data()).code(), ErrorCode::kInvalidArgument);
}

TEST(KvCache, TruncateDropsSuffixEverywhere) {
  auto c = KvCache::create(small_opts(DType::kF32));
  ASSERT_TRUE(c.ok());
  std::vector<float> row(24, 1.f);
  for (int l = 0; l < 2; ++l) {
    for (int p = 0; p < 5; ++p) ASSERT_TRUE(c->append(l, 0, p, row.data(), row.data()).ok());
  }
  EXPECT_EQ(c->max_pos(0), 4);
  c->truncate(0, 2);
  EXPECT_EQ(c->max_pos(0), 1);
  for (int l = 0; l < 2; ++l) EXPECT_EQ(c->size(l, 0, 1), 2);
  c->clear(0);
  EXPECT_EQ(c->max_pos(0), -1);
}

TEST(KvCache, KeepTokensCompactsOneHeadOnly) {
  auto c = KvCache::create(small_opts(DType::kF32));
  ASSERT_TRUE(c.ok());
  std::mt19937 rng(3);
  std::vector<std::vector<float>> ks;
  for (int p = 0; p < 5; ++p) {
    ks.push_back(random_row(rng, 24));
    ASSERT_TRUE(c->append(0, 0, 10 + p, ks.back().data(), ks.back().data()).ok());
  }
  ASSERT_TRUE(c->keep_tokens(0, 0, 1, {0, 2, 4}).ok());
  EXPECT_EQ(c->size(0, 0, 1), 3);
  EXPECT_EQ(c->size(0, 0, 0), 5);
  const int32_t* p = c->positions(0, 0, 1);
  EXPECT_EQ(p[0], 10);
  EXPECT_EQ(p[1], 12);
  EXPECT_EQ(p[2], 14);
  const float* k = static_cast<const float*>(c->key_row(0, 0, 1, 2));
  for (int d = 0; d < 8; ++d) EXPECT_EQ(k[d], ks[4][8 + d]);
  // Positions keep counting after compaction; the freed rows are reused (every head needs room).
  ASSERT_TRUE(c->keep_tokens(0, 0, 0, {1, 2, 3, 4}).ok());
  ASSERT_TRUE(c->keep_tokens(0, 0, 2, {0, 1, 2, 3}).ok());
  EXPECT_EQ(c->positions(0, 0, 0)[0], 11);
  ASSERT_TRUE(c->append(0, 0, 15, ks[0].data(), ks[0].data()).ok());
  EXPECT_EQ(c->size(0, 0, 1), 4);
  EXPECT_EQ(c->positions(0, 0, 1)[3], 15);
}

}  // namespace
}  // namespace frugal

namespace frugal {
namespace {

// Speculative decoding's rollback: a sequence that wrote rows for k draft tokens and kept only a
// of them must be, after truncate(), the cache of a sequence that only ever wrote the kept rows:
// same rows byte for byte, same positions, same pages held, the rest back in the pool, and later
// appends land where they would have. Random lengths across page boundaries, two sequences
// sharing the pool (the other one must be untouched).
TEST(KvCache, TruncateRollsBackRejectedDraftsExactly) {
  std::mt19937 rng(13);
  for (int trial = 0; trial < 60; ++trial) {
    KvCacheOptions o;
    o.n_layer = 2;
    o.n_head_kv = 2;
    o.head_dim = 4;
    o.n_seq = 2;
    o.capacity = 96;
    o.page_tokens = 4;
    o.n_pages = 2 * 2 * 2 * 24;
    o.dtype = trial % 2 ? DType::kF16 : DType::kF32;
    auto spec = KvCache::create(o);
    auto plain = KvCache::create(o);
    ASSERT_TRUE(spec.ok() && plain.ok());
    const int32_t n = static_cast<int32_t>(rng() % 40);  // rows before the verify pass
    const int32_t k = 1 + static_cast<int32_t>(rng() % 9);  // the pass: the last token + k drafts
    const int32_t kept = static_cast<int32_t>(rng() % (k + 1));
    const int32_t later = static_cast<int32_t>(rng() % 10);  // rows appended after the rollback
    std::vector<std::vector<float>> rows;
    // Enough rows for sequence 0's writes and sequence 1's nine.
    for (int32_t p = 0; p < std::max(n + 1 + k + later, 9); ++p) {
      rows.push_back(random_row(rng, o.n_head_kv * o.head_dim));
    }
    const auto write = [&](KvCache& c, int seq, int32_t from, int32_t to, int32_t row_offset) {
      for (int32_t p = from; p < to; ++p) {
        for (int l = 0; l < o.n_layer; ++l) {
          const auto& r = rows[static_cast<size_t>(p + row_offset)];
          ASSERT_TRUE(c.append(l, seq, p, r.data(), r.data()).ok());
        }
      }
    };
    // Sequence 1 of both caches: some other sequence in the pool.
    write(*spec, 1, 0, 9, 0);
    write(*plain, 1, 0, 9, 0);
    ASSERT_TRUE(spec->reserve(0, n + 1 + k).ok());
    write(*spec, 0, 0, n + 1 + k, 0);
    spec->truncate(0, n + 1 + kept);
    write(*plain, 0, 0, n + 1 + kept, 0);
    // The rejected drafts' successors differ from what was drafted: new rows after the rollback.
    write(*spec, 0, n + 1 + kept, n + 1 + kept + later, k - kept);
    write(*plain, 0, n + 1 + kept, n + 1 + kept + later, k - kept);
    ASSERT_EQ(spec->free_pages(), plain->free_pages()) << "trial " << trial;
    for (int seq = 0; seq < 2; ++seq) {
      ASSERT_EQ(spec->pages_held(seq), plain->pages_held(seq));
      ASSERT_EQ(spec->max_pos(seq), plain->max_pos(seq));
      for (int l = 0; l < o.n_layer; ++l) {
        for (int h = 0; h < o.n_head_kv; ++h) {
          const int32_t size = plain->size(l, seq, h);
          ASSERT_EQ(spec->size(l, seq, h), size);
          ASSERT_TRUE(std::equal(plain->positions(l, seq, h), plain->positions(l, seq, h) + size,
                                 spec->positions(l, seq, h)));
          std::vector<float> ka(static_cast<size_t>(size * o.head_dim)), kb(ka.size()), va(ka.size()), vb(ka.size());
          spec->read_rows(l, seq, h, ka.data(), va.data());
          plain->read_rows(l, seq, h, kb.data(), vb.data());
          ASSERT_EQ(ka, kb) << "trial " << trial << " layer " << l << " head " << h;
          ASSERT_EQ(va, vb);
        }
      }
    }
  }
}

}  // namespace
}  // namespace frugal
