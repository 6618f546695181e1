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
  for (const char* n : {"none", "int8", "int4", "hyquant", "hbq"}) {
    auto q = parse_kv_quant(n);
    ASSERT_TRUE(q.ok());
    EXPECT_STREQ(kv_quant_name(*q), n);
  }
  EXPECT_EQ(parse_kv_quant("int3").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(kv_quant_bits(KvQuant::kInt8), 8);
  EXPECT_EQ(kv_quant_bits(KvQuant::kHyQuant), 4);
  EXPECT_EQ(kv_quant_bits(KvQuant::kHbq), 4);
}

// ---- hbq, checked against the format as kv_quant.h states it, decoded here independently ----

constexpr float kE2M1[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
constexpr float kSig1[4] = {1.f, 1.5f, 2.f, 2.5f};

// UE5M3 from its definition: e = code >> 3, m = code & 7; subnormal m * 2^-17, else (1 + m/8) * 2^(e-15).
double ue5m3(int code) {
  const int e = code >> 3, m = code & 7;
  return e == 0 ? std::ldexp(m, -17) : std::ldexp(1.0 + m / 8.0, e - 15);
}

// One row decoded from codes and params as laid out in kv_quant.h.
std::vector<float> hbq_decode(const std::vector<uint8_t>& codes, const std::vector<uint16_t>& params, int d, int l1) {
  const int micros = l1 / 8, words = 1 + (micros + 7) / 8;
  std::vector<float> y(static_cast<size_t>(d));
  for (int c = 0; c < d; ++c) {
    const uint16_t* p = params.data() + static_cast<size_t>(c / l1) * words;
    const int m = (c % l1) / 8;
    const int a = (p[1 + m / 8] >> (2 * (m % 8))) & 3;
    const int code = (codes[static_cast<size_t>(c) / 2] >> (4 * (c % 2))) & 0xF;
    const double e = (code & 8 ? -1.0 : 1.0) * kE2M1[code & 7];
    y[static_cast<size_t>(c)] = static_cast<float>(ue5m3(p[0]) * kSig1[a] * e);
  }
  return y;
}

// Squared error of a block rounded to the nearest multiple of d * E2M1 (saturating at 6 d).
double grid_error(const float* x, int n, double d) {
  double err = 0;
  for (int j = 0; j < n; ++j) {
    double best = 1e300;
    for (float e : kE2M1) {
      for (double s : {-1.0, 1.0}) best = std::min(best, std::fabs(x[j] - s * e * d));
    }
    err += best * best;
  }
  return err;
}

TEST(KvQuant, HbqRowsDecodeAsTheFormatAndStayWithinItsBound) {
  std::mt19937 rng(21);
  for (int d : {40, 64, 96, 128, 256, 320}) {
    const int l1 = kv_hbq_block(d);
    ASSERT_EQ(l1, d <= 128 ? d : (d % 128 == 0 ? 128 : 64)) << d;
    ASSERT_EQ(kv_hbq_param_words(d), d / l1 * (1 + (l1 / 8 + 7) / 8)) << d;
    for (float scale : {1e-3f, 1.f, 300.f}) {
      for (int rep = 0; rep < 20; ++rep) {
        const auto x = random_rows(rng, 1, d, scale);
        std::vector<uint8_t> codes(static_cast<size_t>(d) / 2, 0xAB);
        std::vector<uint16_t> params(static_cast<size_t>(kv_hbq_param_words(d)), 0xFFFF);
        kv_hbq_quantize_row(x.data(), d, codes.data(), params.data());
        std::vector<float> y(static_cast<size_t>(d));
        kv_hbq_dequantize_row(codes.data(), params.data(), d, y.data());
        const auto expect = hbq_decode(codes, params, d, l1);
        for (int c = 0; c < d; ++c) ASSERT_EQ(y[static_cast<size_t>(c)], expect[static_cast<size_t>(c)]) << d << " " << c;
        for (int b = 0; b < d / l1; ++b) {
          const float* xb = x.data() + static_cast<size_t>(b) * l1;
          float amax = 0;
          for (int j = 0; j < l1; ++j) amax = std::max(amax, std::fabs(xb[j]));
          // The no-clip grid: the smallest UE5M3 scale >= amax / 15, at alpha 2.5.
          int s0 = 1;
          while (s0 < 255 && ue5m3(s0) < amax / 15.0) ++s0;
          const double bound = grid_error(xb, l1, 2.5 * ue5m3(s0));
          double err = 0;
          for (int j = 0; j < l1; ++j) {
            const double e = xb[j] - y[static_cast<size_t>(b) * l1 + j];
            err += e * e;
          }
          EXPECT_LE(err, bound * (1 + 1e-5) + 1e-30) << "d " << d << " scale " << scale << " block " << b;
          EXPECT_LE(err, l1 * std::pow(0.1875 * amax, 2) * (1 + 1e-5)) << "d " << d << " scale " << scale;
          // The scale is the no-clip one or the code below it.
          const int s = params[static_cast<size_t>(b) * (1 + (l1 / 8 + 7) / 8)];
          EXPECT_TRUE(s == s0 || s == s0 - 1) << s << " vs " << s0;
        }
      }
    }
  }
  EXPECT_EQ(kv_hbq_block(12), 0);
  EXPECT_EQ(kv_hbq_block(136), 0);
}

TEST(KvQuant, HbqZeroRowIsZeroAndMultipliersAreUsed) {
  std::vector<float> x(64, 0.f);
  std::vector<uint8_t> codes(32, 0xFF);
  std::vector<uint16_t> params(static_cast<size_t>(kv_hbq_param_words(64)), 0xFFFF);
  kv_hbq_quantize_row(x.data(), 64, codes.data(), params.data());
  std::vector<float> y(64, 1.f);
  kv_hbq_dequantize_row(codes.data(), params.data(), 64, y.data());
  for (float v : y) EXPECT_EQ(v, 0.f);
  // 15 in one micro-block and 3 in the next: at the no-clip scale 1 (15 / (6 * 2.5)), 15 = 1 * 2.5
  // * 6 and 3 = 1 * 1 * 3 are exact only if the two micro-blocks take different multipliers (at
  // alpha 2.5 alone, 3 would round to 2.5).
  for (int j = 0; j < 64; ++j) x[static_cast<size_t>(j)] = j < 8 ? 15.f : (j < 16 ? 3.f : 0.f);
  kv_hbq_quantize_row(x.data(), 64, codes.data(), params.data());
  kv_hbq_dequantize_row(codes.data(), params.data(), 64, y.data());
  for (int j = 0; j < 64; ++j) EXPECT_EQ(y[static_cast<size_t>(j)], x[static_cast<size_t>(j)]) << j;
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

TEST(KvQuant, HbqCacheQuantizesEachTokenAloneAndCountsItsBytes) {
  std::mt19937 rng(16);
  const int n = 77, d = 64;
  auto c = KvCache::create(qopts(KvQuant::kHbq, 100));
  ASSERT_TRUE(c.ok());
  KvCache& kv = *c;
  const Inputs in = fill(kv, rng, n);
  EXPECT_EQ(kv.size(1, 0, 1), n);
  EXPECT_EQ(kv.fp16_tokens(1, 0, 1), n % kKvGroup);  // rows leave the FP16 residual by groups
  const int cold = n / kKvGroup * kKvGroup, words = kv_hbq_param_words(d);
  std::vector<float> k(static_cast<size_t>(n) * d), v(k.size()), row(static_cast<size_t>(d));
  std::vector<uint8_t> codes(static_cast<size_t>(d) / 2);
  std::vector<uint16_t> params(static_cast<size_t>(words));
  for (int h = 0; h < 2; ++h) {
    kv.read_rows(1, 0, h, k.data(), v.data());
    for (int t = 0; t < n; ++t) {
      for (int which = 0; which < 2; ++which) {
        const float* x = (which == 0 ? in.k : in.v).data() + (static_cast<size_t>(t) * 2 + h) * d;
        const float* got = (which == 0 ? k : v).data() + static_cast<size_t>(t) * d;
        // The cache stages rows in FP16, then quantizes each row with nothing but itself.
        for (int c2 = 0; c2 < d; ++c2) row[static_cast<size_t>(c2)] = fp16_to_f32(f32_to_fp16(x[c2]));
        if (t < cold) {
          kv_hbq_quantize_row(row.data(), d, codes.data(), params.data());
          const auto expect = hbq_decode(codes, params, d, d);
          for (int c2 = 0; c2 < d; ++c2) {
            ASSERT_EQ(got[c2], expect[static_cast<size_t>(c2)]) << which << " t " << t << " c " << c2;
          }
        } else {
          for (int c2 = 0; c2 < d; ++c2) ASSERT_EQ(got[c2], row[static_cast<size_t>(c2)]) << which << " t " << t;
        }
      }
    }
  }
  // Bytes: 32 bytes of codes and 2 words of params per row (scale; 8 multipliers), K and V, for
  // the quantized slots; FP16 K and V for the residual. 2 layers x 2 heads.
  EXPECT_EQ(words, 2);
  const uint64_t per_head = static_cast<uint64_t>(cold) * 2 * (d / 2 + 4) + static_cast<uint64_t>(n - cold) * d * 4;
  EXPECT_EQ(kv.used_bytes(), per_head * 4);
  KvCacheOptions bad = qopts(KvQuant::kHbq, 100);
  bad.head_dim = 36;
  EXPECT_EQ(KvCache::create(bad).status().code(), ErrorCode::kNotSupported);
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
  for (KvQuant q : {KvQuant::kNone, KvQuant::kInt8, KvQuant::kInt4, KvQuant::kHyQuant, KvQuant::kHbq}) {
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
