// KV quantization: the format's error bound on fresh random inputs, the quantized cache against
// the inputs it was given (group by group), compaction, hyquant's FP16 tokens, and the memory ->
// tokens conversion. Expected values come from the inputs and the stated bounds, never from the
// code under test.
#include "frugal/kv/kv_quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "frugal/core/half.h"
#include "frugal/kv/kv_cache.h"

namespace frugal {
namespace {

std::vector<float> random_rows(std::mt19937& rng, int n, int d, float scale = 1.f) {
  std::normal_distribution<float> g(0.f, scale);
  std::vector<float> v(static_cast<size_t>(n) * d);
  for (auto& x : v) x = g(rng);
  // An outlier channel, as real keys have.
  for (int t = 0; t < n; ++t) v[static_cast<size_t>(t) * d + 3] *= 8.f;
  return v;
}

// Half the grid step the range [lo, hi] gets with `bits`, plus FP16 rounding of the parameters.
// The cache stages tokens in FP16 before quantizing them, so its bounds add FP16 rounding of x.
float half_step(float lo, float hi, int bits) {
  const float qmax = static_cast<float>((1 << bits) - 1);
  return 0.5f * (hi - lo) / qmax * 1.002f + 1e-3f * std::max(std::fabs(lo), std::fabs(hi)) / qmax + 1e-6f;
}

TEST(KvQuant, ParseAndNames) {
  for (const char* n : {"none", "int8", "int4", "hyquant"}) {
    auto q = parse_kv_quant(n);
    ASSERT_TRUE(q.ok());
    EXPECT_STREQ(kv_quant_name(*q), n);
  }
  EXPECT_EQ(parse_kv_quant("int3").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(kv_quant_bits(KvQuant::kInt8), 8);
  EXPECT_EQ(kv_quant_bits(KvQuant::kHyQuant), 4);
}

TEST(KvQuant, KeyGroupsPerChannelWithinHalfAStep) {
  std::mt19937 rng(11);
  for (int bits : {8, 4}) {
    for (int n : {1, 7, kKvGroup}) {
      const int d = 64;
      const auto x = random_rows(rng, n, d);
      const int cb = kv_code_bytes(d, bits);
      std::vector<uint8_t> codes(static_cast<size_t>(n) * cb);
      std::vector<uint16_t> params(static_cast<size_t>(d) * 2);
      kv_quantize_key_group(x.data(), d, n, d, bits, codes.data(), cb, params.data());
      for (int c = 0; c < d; ++c) {
        float lo = x[static_cast<size_t>(c)], hi = lo;
        for (int t = 0; t < n; ++t) {
          lo = std::min(lo, x[static_cast<size_t>(t) * d + c]);
          hi = std::max(hi, x[static_cast<size_t>(t) * d + c]);
        }
        const float step = fp16_to_f32(params[2 * static_cast<size_t>(c)]);
        EXPECT_LE(step, 2 * half_step(lo, hi, bits) + 1e-5f) << "bits " << bits << " channel " << c;
        std::vector<float> y(static_cast<size_t>(d));
        for (int t = 0; t < n; ++t) {
          kv_dequantize_key_row(codes.data() + static_cast<size_t>(t) * cb, params.data(), d, bits, y.data());
          EXPECT_LE(std::fabs(y[static_cast<size_t>(c)] - x[static_cast<size_t>(t) * d + c]), half_step(lo, hi, bits))
              << "bits " << bits << " n " << n << " token " << t << " channel " << c;
        }
      }
    }
  }
}

TEST(KvQuant, ValueRowsPerTokenGroupsWithinHalfAStep) {
  std::mt19937 rng(12);
  for (int bits : {8, 4}) {
    for (int d : {32, 64, 80}) {
      const auto x = random_rows(rng, 1, d, 3.f);
      std::vector<uint8_t> codes(static_cast<size_t>(kv_code_bytes(d, bits)));
      std::vector<uint16_t> params(static_cast<size_t>((d + kKvGroup - 1) / kKvGroup) * 2);
      kv_quantize_value_row(x.data(), d, bits, codes.data(), params.data());
      std::vector<float> y(static_cast<size_t>(d));
      kv_dequantize_value_row(codes.data(), params.data(), d, bits, y.data());
      for (int g0 = 0; g0 < d; g0 += kKvGroup) {
        const int e = std::min(d, g0 + kKvGroup);
        const float lo = *std::min_element(x.begin() + g0, x.begin() + e);
        const float hi = *std::max_element(x.begin() + g0, x.begin() + e);
        for (int c = g0; c < e; ++c) {
          EXPECT_LE(std::fabs(y[static_cast<size_t>(c)] - x[static_cast<size_t>(c)]), half_step(lo, hi, bits))
              << "bits " << bits << " d " << d << " channel " << c;
        }
      }
    }
  }
}

TEST(KvQuant, ConstantGroupIsExactUpToFp16) {
  std::vector<float> x(kKvGroup * 4, 0.7f);
  std::vector<uint8_t> codes(kKvGroup * 2);
  std::vector<uint16_t> params(8);
  kv_quantize_key_group(x.data(), 4, kKvGroup, 4, 4, codes.data(), 2, params.data());
  std::vector<float> y(4);
  kv_dequantize_key_row(codes.data(), params.data(), 4, 4, y.data());
  for (float v : y) EXPECT_NEAR(v, 0.7f, 1e-3f);
}

KvCacheOptions qopts(KvQuant q, int capacity) {
  KvCacheOptions o;
  o.n_layer = 2;
  o.n_head_kv = 2;
  o.head_dim = 64;
  o.n_seq = 1;
  o.capacity = capacity;
  o.quant = q;
  return o;
}

// Per (head, token) the key bound of its 32-slot group and the value bound of its channel groups.
struct Inputs {
  std::vector<float> k, v;  // [token][head][d]
};

Inputs fill(KvCache& kv, std::mt19937& rng, int n) {
  const KvCacheOptions& o = kv.options();
  Inputs in;
  in.k = random_rows(rng, n * o.n_head_kv, o.head_dim);
  in.v = random_rows(rng, n * o.n_head_kv, o.head_dim, 2.f);
  for (int t = 0; t < n; ++t) {
    const size_t off = static_cast<size_t>(t) * o.n_head_kv * o.head_dim;
    for (int l = 0; l < o.n_layer; ++l) EXPECT_TRUE(kv.append(l, 0, t, in.k.data() + off, in.v.data() + off).ok());
  }
  return in;
}

TEST(KvQuant, CacheKeepsGroupsAndResidualWithinBounds) {
  std::mt19937 rng(13);
  for (KvQuant q : {KvQuant::kInt8, KvQuant::kInt4}) {
    const int bits = kv_quant_bits(q), n = 77, d = 64;
    auto c = KvCache::create(qopts(q, 100));
    ASSERT_TRUE(c.ok());
    KvCache& kv = *c;
    const Inputs in = fill(kv, rng, n);
    EXPECT_EQ(kv.size(1, 0, 1), n);
    EXPECT_EQ(kv.fp16_tokens(1, 0, 1), n % kKvGroup);  // KIVI: the incomplete key group stays FP16
    std::vector<float> k(static_cast<size_t>(n) * d), v(k.size());
    for (int h = 0; h < 2; ++h) {
      kv.read_rows(1, 0, h, k.data(), v.data());
      for (int t = 0; t < n; ++t) {
        const size_t src = (static_cast<size_t>(t) * 2 + h) * d;
        const bool cold = t < n / kKvGroup * kKvGroup;
        for (int c2 = 0; c2 < d; ++c2) {
          const float x = in.k[src + c2];
          float bound = 1e-3f * std::fabs(x) + 1e-6f;  // FP16 residual
          if (cold) {
            const int g = t / kKvGroup;
            float lo = x, hi = x;
            for (int u = g * kKvGroup; u < (g + 1) * kKvGroup; ++u) {
              lo = std::min(lo, in.k[(static_cast<size_t>(u) * 2 + h) * d + c2]);
              hi = std::max(hi, in.k[(static_cast<size_t>(u) * 2 + h) * d + c2]);
            }
            bound = half_step(lo, hi, bits) + 5e-4f * std::fabs(x);  // staged in FP16 first
          }
          EXPECT_LE(std::fabs(k[static_cast<size_t>(t) * d + c2] - x), bound) << "key t " << t << " c " << c2;
        }
        for (int g0 = 0; g0 < d; g0 += kKvGroup) {
          const auto b = in.v.begin() + static_cast<long>(src) + g0;
          const float lo = *std::min_element(b, b + kKvGroup), hi = *std::max_element(b, b + kKvGroup);
          for (int c2 = g0; c2 < g0 + kKvGroup; ++c2) {
            const float x = in.v[src + c2];
            const float bound = cold ? half_step(lo, hi, bits) + 5e-4f * std::fabs(x) : 1e-3f * std::fabs(x) + 1e-6f;
            EXPECT_LE(std::fabs(v[static_cast<size_t>(t) * d + c2] - x), bound) << "value t " << t << " c " << c2;
          }
        }
      }
    }
    // Bytes: codes and their parameters for the quantized slots, FP16 for the residual.
    const uint64_t cold = n / kKvGroup * kKvGroup, res = n - cold;
    const uint64_t per_head = cold * (2 * d * bits / 8 + 2 * 4) + cold / kKvGroup * d * 4 + res * d * 4;
    EXPECT_EQ(kv.used_bytes(), per_head * 4);
  }
}

TEST(KvQuant, CompactionKeepsPositionsAndBoundsTheRequantizationError) {
  std::mt19937 rng(14);
  for (KvQuant q : {KvQuant::kInt8, KvQuant::kInt4}) {
    const int bits = kv_quant_bits(q), n = 90, d = 64;
    auto c = KvCache::create(qopts(q, 96));
    ASSERT_TRUE(c.ok());
    KvCache& kv = *c;
    const Inputs in = fill(kv, rng, n);
    std::vector<int32_t> keep;
    for (int t = 0; t < n; ++t) {
      if (t % 3 != 1) keep.push_back(t);
    }
    ASSERT_TRUE(kv.keep_tokens(0, 0, 1, keep).ok());
    ASSERT_EQ(kv.size(0, 0, 1), static_cast<int32_t>(keep.size()));
    EXPECT_EQ(kv.size(0, 0, 0), n);  // other heads untouched
    std::vector<float> k(keep.size() * d), v(k.size());
    kv.read_rows(0, 0, 1, k.data(), v.data());
    // Two roundings at most, each within half a step of a grid no wider than the channel's range
    // over all tokens (plus one old step).
    for (int c2 = 0; c2 < d; ++c2) {
      float klo = 1e30f, khi = -1e30f;
      for (int t = 0; t < n; ++t) {
        klo = std::min(klo, in.k[(static_cast<size_t>(t) * 2 + 1) * d + c2]);
        khi = std::max(khi, in.k[(static_cast<size_t>(t) * 2 + 1) * d + c2]);
      }
      for (size_t j = 0; j < keep.size(); ++j) {
        EXPECT_EQ(kv.positions(0, 0, 1)[j], keep[j]);
        const float x = in.k[(static_cast<size_t>(keep[j]) * 2 + 1) * d + c2];
        EXPECT_LE(std::fabs(k[j * d + c2] - x), 2.2f * half_step(klo, khi, bits) + 1e-3f * std::fabs(x)) << "t " << keep[j];
      }
    }
    for (size_t j = 0; j < keep.size(); ++j) {
      const size_t src = (static_cast<size_t>(keep[j]) * 2 + 1) * d;
      for (int g0 = 0; g0 < d; g0 += kKvGroup) {
        const auto b = in.v.begin() + static_cast<long>(src) + g0;
        const float lo = *std::min_element(b, b + kKvGroup), hi = *std::max_element(b, b + kKvGroup);
        for (int c2 = g0; c2 < g0 + kKvGroup; ++c2) {
          EXPECT_LE(std::fabs(v[j * d + c2] - in.v[src + c2]), 2.2f * half_step(lo, hi, bits) + 1e-3f * std::fabs(in.v[src + c2]))
              << "t " << keep[j];
        }
      }
    }
    // Appending continues after the compacted rows.
    std::vector<float> row(2 * d, 0.25f);
    ASSERT_TRUE(kv.append(0, 0, n, row.data(), row.data()).ok());
    EXPECT_EQ(kv.positions(0, 0, 1)[keep.size()], n);
    kv.truncate(0, 10);
    EXPECT_EQ(kv.size(0, 0, 1), 7);  // keep has 0, 2, 3, 5, 6, 8, 9 below 10
  }
}

TEST(KvQuant, HyQuantKeepsTheMostAttendedTokensAndARecentWindowInFp16) {
  std::mt19937 rng(15);
  KvCacheOptions o = qopts(KvQuant::kHyQuant, 256);
  o.n_layer = 1;
  o.hot_ratio = 0.05f;
  auto c = KvCache::create(o);
  ASSERT_TRUE(c.ok());
  KvCache& kv = *c;
  const int n = 200, d = 64;
  Inputs in;
  in.k = random_rows(rng, n * 2, d, 0.5f);
  in.v = random_rows(rng, n * 2, d);
  // Along the query direction (channel 5 of head 0), a few tokens stand out.
  const std::vector<int> vertical = {3, 40, 41, 97, 120, 150};
  for (int t : vertical) in.k[static_cast<size_t>(t) * 2 * d + 5] = 30.f + static_cast<float>(t) * 0.01f;
  for (int t = 0; t < n; ++t) {
    ASSERT_TRUE(kv.append(0, 0, t, in.k.data() + static_cast<size_t>(t) * 2 * d,
                          in.v.data() + static_cast<size_t>(t) * 2 * d).ok());
  }
  EXPECT_EQ(kv.fp16_tokens(0, 0, 0), n);  // nothing quantized before flush()
  std::vector<float> qmean(2 * d, 0.f);
  qmean[5] = 1.f;
  qmean[d + 7] = 1.f;
  kv.flush(0, 0, qmean.data());
  // Residual: 32..63 newest tokens; FP16 copies: ceil(5% of the 160 quantized) = 8 per head.
  const int cold = (n - 2 * kKvGroup) / kKvGroup * kKvGroup + kKvGroup;
  EXPECT_EQ(cold, 160);
  EXPECT_EQ(kv.fp16_tokens(0, 0, 0), n - cold + 8);
  std::vector<float> k(static_cast<size_t>(n) * d), v(k.size());
  kv.read_rows(0, 0, 0, k.data(), v.data());
  for (int t : vertical) {
    if (t >= cold) continue;
    for (int c2 = 0; c2 < d; ++c2) {
      const float x = in.k[static_cast<size_t>(t) * 2 * d + c2];
      EXPECT_EQ(k[static_cast<size_t>(t) * d + c2], fp16_to_f32(f32_to_fp16(x))) << "vertical token " << t;
    }
  }
  // The FP16 copies follow their tokens through compaction.
  std::vector<int32_t> keep;
  for (int t = 0; t < n; ++t) {
    if (t % 2 == 1 || t == 40) keep.push_back(t);
  }
  ASSERT_TRUE(kv.keep_tokens(0, 0, 0, keep).ok());
  kv.read_rows(0, 0, 0, k.data(), v.data());
  for (size_t j = 0; j < keep.size(); ++j) {
    if (keep[j] != 40 && keep[j] != 41 && keep[j] != 97) continue;
    EXPECT_EQ(k[j * d + 5], fp16_to_f32(f32_to_fp16(in.k[static_cast<size_t>(keep[j]) * 2 * d + 5])));
  }
}

TEST(KvQuant, MemoryToTokensIsTheLargestCapacityThatFits) {
  for (KvQuant q : {KvQuant::kNone, KvQuant::kInt8, KvQuant::kInt4, KvQuant::kHyQuant}) {
    KvCacheOptions o = qopts(q, 0);
    o.n_layer = 6;
    const uint64_t bytes = 3u << 20;
    auto t = kv_tokens_for_memory(o, bytes);
    ASSERT_TRUE(t.ok());
    o.capacity = *t;
    EXPECT_LE(kv_reserved_bytes(o), bytes) << kv_quant_name(q);
    o.capacity = *t + 1;
    EXPECT_GT(kv_reserved_bytes(o), bytes) << kv_quant_name(q);
    o.capacity = *t;
    auto c = KvCache::create(o);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c->reserved_bytes(), kv_reserved_bytes(o));
  }
  // F16 without quantization: 6 layers x 2 heads x 64 x 2 bytes x (K and V) = 3072 bytes a token.
  KvCacheOptions o = qopts(KvQuant::kNone, 0);
  o.n_layer = 6;
  EXPECT_EQ(*kv_tokens_for_memory(o, 3u << 20), 1024);
  auto small = kv_tokens_for_memory(o, 1000, 16);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().code(), ErrorCode::kOverBudget);
  EXPECT_NE(small.status().message().find("1000 bytes"), std::string::npos);
}

}  // namespace
}  // namespace frugal
