// TileMix: INT8 tile scores against float scores within the quantization bound (every SIMD
// target against the scalar reference, bit for bit); the fused kernel with no INT8 tile equals the
// float kernel bit for bit; mixed and uniform INT8 attention within a stated bound of a float64
// reference; the routing's count and order; GQA, two sequences in one batch, short prompts,
// decode, a quantized KV cache; bad options refused.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/test_util.h"
#include "frugal/attention/tilemix/int8_tile.h"
#include "frugal/attention/tilemix/router.h"
#include "frugal/attention/tilemix/tilemix.h"
#include "frugal/backend/cpu/simd_ops.h"
#include "frugal/kv/kv_cache.h"

namespace frugal {
namespace {

using testing::backend_with;
using testing::random_floats;

unsigned fresh_seed() {
  const unsigned seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  return seed;
}

// Every Highway target this CPU runs and the kernels were built for.
template <class Fn>
void for_each_target(Fn fn) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    if (target == HWY_SSSE3) continue;
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    fn();
    hwy::SetSupportedTargetsForTest(0);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(TileMixInt8, TileScoresMatchReferenceAndStayWithinQuantizationBound) {
  const unsigned seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int dim : {64, 128, 36}) {
    const int rows = 24, rp = 64, nk = 61, k0 = 5;  // rows past `rows` are padding (zeros)
    auto q = random_floats(rng, static_cast<size_t>(rows) * dim);
    auto k = random_floats(rng, static_cast<size_t>(k0 + nk) * dim, 1.5f);
    // Outliers: a few large elements, a row of zeros.
    q[3] = 40.f;
    k[static_cast<size_t>(k0 + 7) * dim + 1] = -90.f;
    std::fill(k.begin() + static_cast<int64_t>(k0 + 9) * dim, k.begin() + static_cast<int64_t>(k0 + 10) * dim, 0.f);
    std::vector<float> qt(static_cast<size_t>(dim) * rp, 0.f);
    for (int r = 0; r < rows; ++r) {
      for (int e = 0; e < dim; ++e) qt[static_cast<size_t>(e) * rp + r] = q[static_cast<size_t>(r) * dim + e];
    }
    std::vector<int8_t> kc(k.size()), qc(q.size());
    std::vector<float> ks(static_cast<size_t>(k0 + nk)), qs(rows);
    std::vector<int32_t> ksum(static_cast<size_t>(k0 + nk));
    tilemix::quantize_keys(k.data(), k0 + nk, dim, kc.data(), ks.data(), ksum.data());
    for (int r = 0; r < rows; ++r) qs[r] = tilemix::quantize_row(&q[static_cast<size_t>(r) * dim], dim, &qc[static_cast<size_t>(r) * dim]);
    const tilemix::KeyCodes key{kc.data(), ks.data(), ksum.data()};
    std::vector<float> ref(static_cast<size_t>(nk) * rows);
    tilemix::scores_reference(qc.data(), qs.data(), rows, key, k0, nk, dim, ref.data());
    // The reference against the float scores: within the bound, and the bound not vacuous.
    double worst_ratio = 0;
    for (int j = 0; j < nk; ++j) {
      const float* kr = &k[static_cast<size_t>(k0 + j) * dim];
      for (int r = 0; r < rows; ++r) {
        const float* qr = &q[static_cast<size_t>(r) * dim];
        double exact = 0;
        for (int e = 0; e < dim; ++e) exact += static_cast<double>(qr[e]) * kr[e];
        const double bound = tilemix::quant_error_bound(qr, qs[r], kr, ks[k0 + j], dim);
        const double err = std::fabs(exact - ref[static_cast<size_t>(j) * rows + r]);
        ASSERT_LE(err, bound) << "dim " << dim << " row " << r << " key " << j;
        if (bound > 0) worst_ratio = std::max(worst_ratio, err / bound);
      }
    }
    EXPECT_GT(worst_ratio, 0.05) << "the bound is far looser than the errors";
    for_each_target([&] {
      std::vector<uint32_t> words(static_cast<size_t>(dim / 4) * rp);
      std::vector<float> scales(rp, -1.f), s(static_cast<size_t>(nk) * rp, -7.f);
      tilemix::quantize_query_lanes(qt.data(), rp, dim, words.data(), scales.data());
      for (int r = 0; r < rp; ++r) {
        ASSERT_EQ(scales[r], r < rows ? qs[r] : 0.f) << "row " << r;
        for (int e = 0; e < dim; ++e) {
          const int code = static_cast<int>((words[static_cast<size_t>(e / 4) * rp + r] >> (8 * (e % 4))) & 0xFF) - 128;
          ASSERT_EQ(code, r < rows ? qc[static_cast<size_t>(r) * dim + e] : 0) << "row " << r << " dim " << e;
        }
      }
      tilemix::block_scores(tilemix::QueryCodes{words.data(), scales.data(), rp, dim}, key, k0, nk, s.data());
      for (int j = 0; j < nk; ++j) {
        for (int r = 0; r < rows; ++r) {
          ASSERT_EQ(s[static_cast<size_t>(j) * rp + r], ref[static_cast<size_t>(j) * rows + r])
              << "dim " << dim << " row " << r << " key " << j << " (" << tilemix::int8_dot_path() << ")";
        }
        for (int r = rows; r < rp; ++r) ASSERT_EQ(s[static_cast<size_t>(j) * rp + r], 0.f);
      }
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Attention through the CPU backend against a float64 reference.

// The rows a cache was filled with.
struct Rows {
  int n_head_kv = 0, dim = 0;
  std::vector<std::vector<float>> k, v;  // [seq] -> [pos][n_head_kv][dim]
};
struct Cache : Rows {
  KvCache kv;
};

// One layer; sequence s has lens[s] positions of random keys (times `kscale`) and values. Keys of
// the key blocks in `outlier_blocks` get one large channel.
Cache make_cache(std::mt19937& rng, DType dtype, KvQuant quant, int n_head_kv, int dim, const std::vector<int32_t>& lens,
                 const std::vector<int>& outlier_blocks = {}) {
  KvCacheOptions ko;
  ko.n_layer = 1;
  ko.n_head_kv = n_head_kv;
  ko.head_dim = dim;
  ko.n_seq = static_cast<int>(lens.size());
  ko.capacity = *std::max_element(lens.begin(), lens.end());
  ko.dtype = dtype;
  ko.quant = quant;
  auto kvr = KvCache::create(ko);
  EXPECT_TRUE(kvr.ok()) << kvr.status().message();
  Cache c{{n_head_kv, dim, {}, {}}, std::move(kvr.value())};
  for (size_t s = 0; s < lens.size(); ++s) {
    c.k.emplace_back();
    c.v.emplace_back();
    for (int32_t p = 0; p < lens[s]; ++p) {
      auto k = random_floats(rng, static_cast<size_t>(n_head_kv) * dim);
      const auto v = random_floats(rng, static_cast<size_t>(n_head_kv) * dim);
      if (std::find(outlier_blocks.begin(), outlier_blocks.end(), p / 64) != outlier_blocks.end()) {
        for (int g = 0; g < n_head_kv; ++g) k[static_cast<size_t>(g) * dim + 5] = 30.f;
      }
      EXPECT_TRUE(c.kv.append(0, static_cast<int>(s), p, k.data(), v.data()).ok());
      c.k.back().insert(c.k.back().end(), k.begin(), k.end());
      c.v.back().insert(c.v.back().end(), v.begin(), v.end());
    }
  }
  return c;
}

struct Batch {
  std::vector<int32_t> seq, pos;
  void add(int32_t s, int32_t from, int32_t to) {
    for (int32_t p = from; p < to; ++p) seq.push_back(s), pos.push_back(p);
  }
  size_t size() const { return seq.size(); }
};

AttentionParams params(int n_head, int n_head_kv, int dim) {
  AttentionParams p;
  p.n_head = n_head;
  p.n_head_kv = n_head_kv;
  p.head_dim = dim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(dim));
  return p;
}

std::vector<float> run(Backend& be, const KvCache& kv, const Batch& b, const std::vector<float>& q,
                       const AttentionParams& p) {
  std::vector<float> out(q.size(), -777.f);
  be.attention(q.data(), kv, 0, b.seq.data(), b.pos.data(), static_cast<int64_t>(b.size()), p, out.data());
  return out;
}

// Causal softmax attention in double over the cache's original rows.
std::vector<double> reference(const Rows& c, const Batch& b, const std::vector<float>& q, const AttentionParams& p) {
  const int d = p.head_dim, rep = p.n_head / p.n_head_kv;
  std::vector<double> out(q.size());
  for (size_t t = 0; t < b.size(); ++t) {
    const auto& ks = c.k[static_cast<size_t>(b.seq[t])];
    const auto& vs = c.v[static_cast<size_t>(b.seq[t])];
    const int n = b.pos[t] + 1;
    for (int h = 0; h < p.n_head; ++h) {
      const int g = h / rep;
      const float* qh = q.data() + (t * p.n_head + h) * d;
      std::vector<double> s(static_cast<size_t>(n));
      double m = -1e300, z = 0;
      for (int j = 0; j < n; ++j) {
        const float* kj = ks.data() + (static_cast<size_t>(j) * c.n_head_kv + g) * d;
        double dot = 0;
        for (int e = 0; e < d; ++e) dot += static_cast<double>(qh[e]) * kj[e];
        s[static_cast<size_t>(j)] = dot * p.scale;
        m = std::max(m, s[static_cast<size_t>(j)]);
      }
      for (double& x : s) z += (x = std::exp(x - m));
      for (int e = 0; e < d; ++e) {
        double acc = 0;
        for (int j = 0; j < n; ++j) acc += s[static_cast<size_t>(j)] * vs[(static_cast<size_t>(j) * c.n_head_kv + g) * d + e];
        out[(t * p.n_head + h) * d + e] = acc / z;
      }
    }
  }
  return out;
}

// The largest logit error any INT8 pair can have (int8_tile.h's bound with every factor at its
// maximum over the batch's scaled queries and the cache's keys), and the largest |v|.
struct Bounds {
  double delta = 0;
  double vmax = 0;
};
Bounds int8_bounds(const Rows& c, const std::vector<float>& q, const AttentionParams& p) {
  const int d = p.head_dim;
  double q1 = 0, qmax = 0, k1 = 0, kmax = 0, vmax = 0;
  for (size_t r = 0; r < q.size() / static_cast<size_t>(d); ++r) {
    double a = 0;
    for (int e = 0; e < d; ++e) {
      const double x = std::fabs(static_cast<double>(q[r * d + e]) * p.scale);
      a += x;
      qmax = std::max(qmax, x);
    }
    q1 = std::max(q1, a);
  }
  for (size_t s = 0; s < c.k.size(); ++s) {
    for (size_t r = 0; r < c.k[s].size() / static_cast<size_t>(d); ++r) {
      double a = 0;
      for (int e = 0; e < d; ++e) {
        const double x = std::fabs(static_cast<double>(c.k[s][r * d + e]));
        a += x;
        kmax = std::max(kmax, x);
        vmax = std::max(vmax, std::fabs(static_cast<double>(c.v[s][r * d + e])));
      }
      k1 = std::max(k1, a);
    }
  }
  const double sq = qmax / 127 * (1 + 1e-6), sk = kmax / 127 * (1 + 1e-6);
  Bounds b;
  b.delta = 0.5 * sk * q1 + 0.5 * sq * (k1 + d * 0.5 * sk) + 4 * 1.2e-7 * (q1 + d * 0.5 * sq) * kmax;
  b.vmax = vmax;
  return b;
}

// max |out - ref| and mean |out - ref|.
std::pair<double, double> errors(const std::vector<float>& out, const std::vector<double>& ref) {
  double mx = 0, sum = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double e = std::fabs(out[i] - ref[i]);
    mx = std::max(mx, e);
    sum += e;
  }
  return {mx, sum / static_cast<double>(out.size())};
}

tilemix::TileMixOptions mix(double f) {
  tilemix::TileMixOptions o;
  o.int8_fraction = f;
  return o;
}

// A ragged batch: two prompts, the second from its middle (a later chunk), and a decode token.
Batch ragged_batch() {
  Batch b;
  b.add(0, 0, 700);
  b.add(1, 200, 450);
  return b;
}

TEST(TileMixAttention, NoInt8TileEqualsTheFloatKernelBitForBit) {
  const unsigned seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int n_head = 8, n_head_kv = 2, dim = 64;
  for (DType dtype : {DType::kF16, DType::kF32}) {
    Cache c = make_cache(rng, dtype, KvQuant::kNone, n_head_kv, dim, {700, 450, 300});
    const AttentionParams p = params(n_head, n_head_kv, dim);
    Batch b = ragged_batch();
    b.add(2, 299, 300);
    const auto q = random_floats(rng, b.size() * n_head * dim);
    for (int threads : {1, 3}) {
      auto plain = backend_with(threads);
      const auto ref = run(*plain, c.kv, b, q, p);
      // Fraction 0: TileMix off.
      auto off = backend_with(threads);
      ASSERT_TRUE(off->set_tilemix(mix(0)).ok());
      const auto out0 = run(*off, c.kv, b, q, p);
      ASSERT_EQ(0, std::memcmp(ref.data(), out0.data(), ref.size() * sizeof(float)));
      // A fraction that rounds to no tile: the routed, query-block-aligned path with every tile float.
      auto tiny = backend_with(threads);
      ASSERT_TRUE(tiny->set_tilemix(mix(1e-6)).ok());
      const auto out1 = run(*tiny, c.kv, b, q, p);
      ASSERT_EQ(0, std::memcmp(ref.data(), out1.data(), ref.size() * sizeof(float))) << "threads " << threads;
      const tilemix::TileMixStats st = tiny->tilemix_stats();
      EXPECT_EQ(st.routed_calls, 2);
      EXPECT_GT(st.tiles_total, 0);
      EXPECT_EQ(st.tiles_int8, 0);
      // Fraction 1 does change the output (the INT8 path is the one taken).
      auto all = backend_with(threads);
      ASSERT_TRUE(all->set_tilemix(mix(1)).ok());
      const auto out2 = run(*all, c.kv, b, q, p);
      EXPECT_NE(0, std::memcmp(ref.data(), out2.data(), ref.size() * sizeof(float)));
      EXPECT_EQ(all->tilemix_stats().tiles_int8, all->tilemix_stats().tiles_total);
    }
  }
}

TEST(TileMixAttention, KernelWithAllFloatRoutesEqualsKernelWithout) {
  const unsigned seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int n_rep = 4, dim = 64, n_tok = 8, n_keys = 300;
  const auto q = random_floats(rng, static_cast<size_t>(n_tok) * n_rep * dim);
  const auto k = random_floats(rng, static_cast<size_t>(n_keys) * dim);
  const auto v = random_floats(rng, static_cast<size_t>(n_keys) * dim);
  std::vector<int32_t> kpos(n_keys), qpos(n_tok);
  for (int j = 0; j < n_keys; ++j) kpos[j] = j;
  for (int t = 0; t < n_tok; ++t) qpos[t] = 250 + t;
  std::vector<int8_t> kc(k.size());
  std::vector<float> ks(n_keys);
  std::vector<int32_t> ksum(n_keys);
  tilemix::quantize_keys(k.data(), n_keys, dim, kc.data(), ks.data(), ksum.data());
  cpu::AttentionTile t;
  t.q = q.data();
  t.token_stride = static_cast<int64_t>(n_rep) * dim;
  t.n_tokens = n_tok;
  t.n_rep = n_rep;
  t.qpos = qpos.data();
  t.k = k.data();
  t.v = v.data();
  t.kpos = kpos.data();
  t.n_keys = n_keys;
  t.f16 = false;
  t.head_dim = dim;
  t.scale = 0.125f;
  std::vector<float> scratch(cpu::attention_scratch_floats(n_tok * n_rep, dim) + 16);
  float* sc = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) / 64 * 64);
  std::vector<float> a(q.size()), b(q.size()), c(q.size());
  t.out = a.data();
  cpu::attention_tile(t, sc);
  const uint8_t none[5] = {0, 0, 0, 0, 0};
  t.int8_blocks = none;
  t.k8 = tilemix::KeyCodes{kc.data(), ks.data(), ksum.data()};
  t.out = b.data();
  cpu::attention_tile(t, sc);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  const uint8_t some[5] = {0, 1, 0, 1, 0};
  t.int8_blocks = some;
  t.out = c.data();
  cpu::attention_tile(t, sc);
  EXPECT_NE(0, std::memcmp(a.data(), c.data(), a.size() * sizeof(float)));
}

TEST(TileMixAttention, MixedAndUniformInt8WithinBoundOfFloat64Reference) {
  const unsigned seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  // GQA (4 query heads per KV head), two sequences in one batch, one a later chunk; F32 keys so
  // the reference reads what the kernel reads.
  const int n_head = 8, n_head_kv = 2, dim = 64;
  Cache c = make_cache(rng, DType::kF32, KvQuant::kNone, n_head_kv, dim, {700, 450});
  const AttentionParams p = params(n_head, n_head_kv, dim);
  const Batch b = ragged_batch();
  const auto q = random_floats(rng, b.size() * n_head * dim, 2.f);
  const auto ref = reference(c, b, q, p);
  const Bounds bd = int8_bounds(c, q, p);
  // Softmax of logits off by at most delta each moves the probabilities by at most e^(2 delta) - 1
  // in L1, so each output element by that times max |v|; plus float rounding.
  const double bound = std::expm1(2 * bd.delta) * bd.vmax + 1e-4;
  auto plain = backend_with(2);
  const auto e_float = errors(run(*plain, c.kv, b, q, p), ref);
  EXPECT_LT(e_float.first, 1e-4);
  std::printf("bound %.4g (delta %.4g); float: max %.3g mean %.3g\n", bound, bd.delta, e_float.first, e_float.second);
  double last_mean = 0;
  for (double f : {0.25, 0.5, 0.9, 1.0}) {
    auto be = backend_with(2);
    ASSERT_TRUE(be->set_tilemix(mix(f)).ok());
    const auto e = errors(run(*be, c.kv, b, q, p), ref);
    std::printf("F %.2f: max %.3g mean %.3g\n", f, e.first, e.second);
    EXPECT_LE(e.first, bound) << "F " << f;
    EXPECT_GT(e.second, e_float.second) << "F " << f;  // INT8 tiles were used
    EXPECT_GE(e.second, last_mean * 0.9) << "F " << f;  // more INT8 tiles, no less error (noise aside)
    last_mean = e.second;
  }
}

// The mixed attention the kernel should compute, in double: the routing of each chunk and KV head
// recomputed with route_tiles, and each INT8 tile's scores from the codes of the scaled queries
// (as the kernel scales them, in float) and of the keys.
std::vector<double> mixed_reference(const Rows& c, const Batch& b, const std::vector<float>& q,
                                    const AttentionParams& p, double fraction) {
  const int d = p.head_dim, rep = p.n_head / p.n_head_kv;
  const int64_t stride = static_cast<int64_t>(p.n_head) * d;
  std::vector<double> out(q.size());
  const auto router = tilemix::make_router();
  tilemix::RouteScratch scratch;
  for (size_t t0 = 0; t0 < b.size();) {
    size_t t1 = t0 + 1;
    while (t1 < b.size() && b.seq[t1] == b.seq[t0]) ++t1;
    const auto& ks = c.k[static_cast<size_t>(b.seq[t0])];
    const auto& vs = c.v[static_cast<size_t>(b.seq[t0])];
    const int32_t n_k = b.pos[t1 - 1] + 1;
    const sparse::BlockMask shape = sparse::mask_shape(b.pos[t0], static_cast<int32_t>(t1 - t0));
    for (int g = 0; g < p.n_head_kv; ++g) {
      std::vector<float> kf(static_cast<size_t>(n_k) * d);
      for (int32_t j = 0; j < n_k; ++j) {
        std::copy_n(&ks[(static_cast<size_t>(j) * c.n_head_kv + g) * d], d, &kf[static_cast<size_t>(j) * d]);
      }
      std::vector<int8_t> kc(kf.size());
      std::vector<float> ksc(static_cast<size_t>(n_k));
      std::vector<int32_t> ksum(static_cast<size_t>(n_k));
      tilemix::quantize_keys(kf.data(), n_k, d, kc.data(), ksc.data(), ksum.data());
      sparse::HeadInput in;
      in.q = q.data() + static_cast<int64_t>(t0) * stride + static_cast<int64_t>(g) * rep * d;
      in.token_stride = stride;
      in.n_rep = rep;
      in.n_q = static_cast<int32_t>(t1 - t0);
      in.q_pos0 = b.pos[t0];
      in.k = kf.data();
      in.n_k = n_k;
      in.head_dim = d;
      in.scale = p.scale;
      std::vector<uint8_t> bits(static_cast<size_t>(shape.bytes()));
      int64_t tiles = 0;
      tilemix::route_tiles(*router, in, shape, nullptr, fraction, scratch, bits.data(), &tiles);
      for (size_t t = t0; t < t1; ++t) {
        const int32_t row = b.pos[t] / 64 - shape.qb0;
        for (int h = g * rep; h < (g + 1) * rep; ++h) {
          const float* qh = q.data() + (t * p.n_head + h) * d;
          std::vector<float> qs(static_cast<size_t>(d));
          for (int e = 0; e < d; ++e) qs[static_cast<size_t>(e)] = qh[e] * p.scale;
          std::vector<int8_t> qc(static_cast<size_t>(d));
          const float qscale = tilemix::quantize_row(qs.data(), d, qc.data());
          const int n = b.pos[t] + 1;
          std::vector<double> s(static_cast<size_t>(n));
          double m = -1e300, z = 0;
          for (int j = 0; j < n; ++j) {
            if (bits[static_cast<size_t>(row) * shape.n_kb + j / 64] != 0) {
              float sc = 0;
              tilemix::scores_reference(qc.data(), &qscale, 1, tilemix::KeyCodes{kc.data(), ksc.data(), ksum.data()}, j,
                                        1, d, &sc);
              s[static_cast<size_t>(j)] = sc;
            } else {
              double dot = 0;
              for (int e = 0; e < d; ++e) dot += static_cast<double>(qh[e]) * kf[static_cast<size_t>(j) * d + e];
              s[static_cast<size_t>(j)] = dot * p.scale;
            }
            m = std::max(m, s[static_cast<size_t>(j)]);
          }
          for (double& x : s) z += (x = std::exp(x - m));
          for (int e = 0; e < d; ++e) {
            double acc = 0;
            for (int j = 0; j < n; ++j) acc += s[static_cast<size_t>(j)] * vs[(static_cast<size_t>(j) * c.n_head_kv + g) * d + e];
            out[(t * p.n_head + h) * d + e] = acc / z;
          }
        }
      }
    }
    t0 = t1;
  }
  return out;
}

TEST(TileMixAttention, FusedKernelComputesTheMixedAttention) {
  const unsigned seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int n_head = 8, n_head_kv = 2, dim = 64;
  Cache c = make_cache(rng, DType::kF32, KvQuant::kNone, n_head_kv, dim, {700, 450}, {2, 5});
  const AttentionParams p = params(n_head, n_head_kv, dim);
  const Batch b = ragged_batch();
  const auto q = random_floats(rng, b.size() * n_head * dim, 2.f);
  const auto exact = reference(c, b, q, p);
  for (double f : {0.3, 0.5, 1.0}) {
    for (int threads : {1, 3}) {
      auto be = backend_with(threads);
      ASSERT_TRUE(be->set_tilemix(mix(f)).ok());
      const auto out = run(*be, c.kv, b, q, p);
      const auto e_mixed = errors(out, mixed_reference(c, b, q, p, f));
      const auto e_exact = errors(out, exact);
      // Float rounding only (the float kernel is within 1e-5 of the exact attention here).
      EXPECT_LT(e_mixed.first, 2e-5) << "F " << f << " threads " << threads;
      EXPECT_GT(e_exact.first, 10 * e_mixed.first) << "F " << f;  // the INT8 tiles do differ from float
    }
  }
}

TEST(TileMixAttention, RoutingKeepsOutlierTilesFloat) {
  const unsigned seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  // Key blocks 1, 4, 6 and 9 carry an outlier channel: their INT8 scores are coarse. The rule
  // ranks their tiles last, so with F = 0.5 they stay float and the error is far below uniform INT8.
  const int n_head = 4, n_head_kv = 1, dim = 64;
  Cache c = make_cache(rng, DType::kF32, KvQuant::kNone, n_head_kv, dim, {768}, {1, 4, 6, 9});
  const AttentionParams p = params(n_head, n_head_kv, dim);
  Batch b;
  b.add(0, 0, 768);
  const auto q = random_floats(rng, b.size() * n_head * dim, 2.f);
  const auto ref = reference(c, b, q, p);
  auto half = backend_with(2);
  auto all = backend_with(2);
  ASSERT_TRUE(half->set_tilemix(mix(0.5)).ok());
  ASSERT_TRUE(all->set_tilemix(mix(1)).ok());
  const auto e_half = errors(run(*half, c.kv, b, q, p), ref);
  const auto e_all = errors(run(*all, c.kv, b, q, p), ref);
  std::printf("F 0.5: mean %.3g, F 1: mean %.3g\n", e_half.second, e_all.second);
  EXPECT_LT(e_half.second, 0.5 * e_all.second);
  // 12 query blocks, 78 causal tiles: 39 INT8.
  EXPECT_EQ(half->tilemix_stats().tiles_total, 78);
  EXPECT_EQ(half->tilemix_stats().tiles_int8, 39);
}

TEST(TileMixAttention, SequencesInOneBatchEqualEachAlone) {
  const unsigned seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int n_head = 6, n_head_kv = 2, dim = 64;
  Cache c = make_cache(rng, DType::kF16, KvQuant::kNone, n_head_kv, dim, {700, 450});
  const AttentionParams p = params(n_head, n_head_kv, dim);
  const Batch both = ragged_batch();
  Batch a, b;
  a.add(0, 0, 700);
  b.add(1, 200, 450);
  const auto q = random_floats(rng, both.size() * n_head * dim);
  const size_t split = a.size() * n_head * dim;
  const std::vector<float> qa(q.begin(), q.begin() + static_cast<int64_t>(split)), qb(q.begin() + static_cast<int64_t>(split), q.end());
  for (int threads : {1, 3}) {
    auto be = backend_with(threads);
    ASSERT_TRUE(be->set_tilemix(mix(0.5)).ok());
    const auto out = run(*be, c.kv, both, q, p);
    const auto oa = run(*be, c.kv, a, qa, p);
    const auto ob = run(*be, c.kv, b, qb, p);
    EXPECT_EQ(0, std::memcmp(out.data(), oa.data(), oa.size() * sizeof(float))) << "threads " << threads;
    EXPECT_EQ(0, std::memcmp(out.data() + split, ob.data(), ob.size() * sizeof(float))) << "threads " << threads;
  }
}

TEST(TileMixAttention, ShortPromptsAndDecodeStayFloat) {
  const unsigned seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int n_head = 4, n_head_kv = 2, dim = 64;
  Cache c = make_cache(rng, DType::kF16, KvQuant::kNone, n_head_kv, dim, {255, 900});
  const AttentionParams p = params(n_head, n_head_kv, dim);
  auto plain = backend_with(2);
  auto be = backend_with(2);
  ASSERT_TRUE(be->set_tilemix(mix(1)).ok());
  Batch shortp;  // 255 keys: under 4 tiles
  shortp.add(0, 0, 255);
  Batch decode;  // one token at a long context, and a 40-token run
  decode.add(1, 899, 900);
  decode.add(1, 600, 640);
  for (const Batch* bb : {&shortp, &decode}) {
    const auto q = random_floats(rng, bb->size() * n_head * dim);
    const auto ref = run(*plain, c.kv, *bb, q, p);
    const auto out = run(*be, c.kv, *bb, q, p);
    EXPECT_EQ(0, std::memcmp(ref.data(), out.data(), ref.size() * sizeof(float)));
  }
  const tilemix::TileMixStats st = be->tilemix_stats();
  EXPECT_EQ(st.routed_calls, 0);
  EXPECT_EQ(st.float_calls, 1);  // the short prompt; decode and the 40-token run are not prefill chunks
  EXPECT_EQ(st.tiles_int8, 0);
}

TEST(TileMixAttention, QuantizedKvCacheRunsInt8TilesOnItsRows) {
  const unsigned seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int n_head = 8, n_head_kv = 2, dim = 64;
  Cache c = make_cache(rng, DType::kF16, KvQuant::kInt8, n_head_kv, dim, {600});
  const AttentionParams p = params(n_head, n_head_kv, dim);
  Batch b;
  b.add(0, 0, 600);
  const auto q = random_floats(rng, b.size() * n_head * dim);
  auto plain = backend_with(2);
  auto be = backend_with(2);
  ASSERT_TRUE(be->set_tilemix(mix(1)).ok());
  const auto ref = run(*plain, c.kv, b, q, p);  // float scores over the cache's int8 rows
  const auto out = run(*be, c.kv, b, q, p);
  EXPECT_EQ(be->tilemix_stats().routed_calls, 1);
  EXPECT_EQ(be->tilemix_stats().tiles_int8, be->tilemix_stats().tiles_total);
  // The cache's rows (dequantized) are what both read: the INT8 tiles are within the bound of
  // those rows' float attention.
  std::vector<float> kr(static_cast<size_t>(600) * dim), vr(kr.size());
  Rows rows = c;
  for (int g = 0; g < n_head_kv; ++g) {
    c.kv.read_rows(0, 0, g, kr.data(), vr.data());
    for (int j = 0; j < 600; ++j) {
      std::copy_n(&kr[static_cast<size_t>(j) * dim], dim, &rows.k[0][(static_cast<size_t>(j) * n_head_kv + g) * dim]);
      std::copy_n(&vr[static_cast<size_t>(j) * dim], dim, &rows.v[0][(static_cast<size_t>(j) * n_head_kv + g) * dim]);
    }
  }
  const Bounds bd = int8_bounds(rows, q, p);
  const double bound = std::expm1(2 * bd.delta) * bd.vmax + 1e-4;
  double mx = 0;
  for (size_t i = 0; i < out.size(); ++i) mx = std::max(mx, static_cast<double>(std::fabs(out[i] - ref[i])));
  EXPECT_LE(mx, bound);
  EXPECT_GT(mx, 0);
}

// ---------------------------------------------------------------------------------------------
// Routing.

TEST(TileMixRouting, PicksRoundFTilesRankedLowestError) {
  const unsigned seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int n_rep = 4, dim = 64;
  const int32_t q_pos0 = 130, n_q = 900;  // a chunk starting inside query block 2
  const int32_t n_k = q_pos0 + n_q;
  auto k = random_floats(rng, static_cast<size_t>(n_k) * dim);
  auto q = random_floats(rng, static_cast<size_t>(n_q) * n_rep * dim);
  std::uniform_int_distribution<int32_t> key(0, n_k - 1), query(0, n_q - 1);
  for (int i = 0; i < 20; ++i) k[static_cast<size_t>(key(rng)) * dim + 3] = 25.f;  // scattered outliers
  for (int i = 0; i < 5; ++i) q[static_cast<size_t>(query(rng)) * n_rep * dim + 7] = -15.f;
  sparse::HeadInput in;
  in.q = q.data();
  in.token_stride = static_cast<int64_t>(n_rep) * dim;
  in.n_rep = n_rep;
  in.n_q = n_q;
  in.q_pos0 = q_pos0;
  in.k = k.data();
  in.n_k = n_k;
  in.head_dim = dim;
  in.scale = 0.125f;
  const sparse::BlockMask shape = sparse::mask_shape(q_pos0, n_q);
  const auto router = tilemix::make_router();
  std::vector<float> err(static_cast<size_t>(shape.bytes()), -1.f);
  router->predict(in, shape, err.data());
  // A sparse mask keeping about two thirds of the tiles, for the second pass.
  std::vector<uint8_t> keep(static_cast<size_t>(shape.bytes()));
  std::bernoulli_distribution coin(0.66);
  for (auto& x : keep) x = coin(rng) ? 1 : 0;
  tilemix::RouteScratch scratch;
  std::vector<uint8_t> bits(static_cast<size_t>(shape.bytes()));
  for (const uint8_t* kp : {static_cast<const uint8_t*>(nullptr), static_cast<const uint8_t*>(keep.data())}) {
    int64_t candidates = 0;
    for (int32_t r = 0; r < shape.n_qb; ++r) {
      for (int32_t kb = 0; kb <= shape.qb0 + r; ++kb) candidates += kp == nullptr || kp[r * shape.n_kb + kb] != 0;
    }
    for (double f : {0.0, 0.1, 0.37, 0.5, 0.9, 1.0}) {
      int64_t tiles = -1;
      const int64_t n8 = tilemix::route_tiles(*router, in, shape, kp, f, scratch, bits.data(), &tiles);
      ASSERT_EQ(tiles, candidates);
      ASSERT_EQ(n8, static_cast<int64_t>(std::llround(f * static_cast<double>(candidates))));
      int64_t set = 0;
      float worst_int8 = -1, best_float = 1e30f;
      for (int32_t r = 0; r < shape.n_qb; ++r) {
        for (int32_t kb = 0; kb < shape.n_kb; ++kb) {
          const int64_t i = static_cast<int64_t>(r) * shape.n_kb + kb;
          const bool cand = kb <= shape.qb0 + r && (kp == nullptr || kp[i] != 0);
          if (!cand) {
            ASSERT_EQ(bits[static_cast<size_t>(i)], 0) << "tile " << r << "," << kb;
            continue;
          }
          ASSERT_GE(err[static_cast<size_t>(i)], 0.f);
          if (bits[static_cast<size_t>(i)] != 0) {
            ++set;
            worst_int8 = std::max(worst_int8, err[static_cast<size_t>(i)]);
          } else {
            best_float = std::min(best_float, err[static_cast<size_t>(i)]);
          }
        }
      }
      EXPECT_EQ(set, n8) << "F " << f;
      if (n8 > 0 && n8 < candidates) {
        EXPECT_LE(worst_int8, best_float) << "F " << f;
      }
    }
  }
  // The prediction is the stated formula.
  tilemix::BlockRange qr, kr;
  for (int32_t p = 2 * 64; p < 3 * 64; ++p) {
    if (p < q_pos0) continue;
    for (int h = 0; h < n_rep; ++h) qr.add_row(&q[(static_cast<size_t>(p - q_pos0) * n_rep + h) * dim], dim, 0.125f);
  }
  for (int32_t j = 64; j < 128; ++j) kr.add_row(&k[static_cast<size_t>(j) * dim], dim, 1.f);
  EXPECT_FLOAT_EQ(err[1], dim / 254.f * (kr.max_abs * qr.max_mean_abs + qr.max_abs * kr.max_mean_abs));
}

TEST(TileMixRouting, TileCountsAcrossChunksAndHeads) {
  const unsigned seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int n_head = 8, n_head_kv = 4, dim = 32;
  Cache c = make_cache(rng, DType::kF16, KvQuant::kNone, n_head_kv, dim, {1000, 333});
  const AttentionParams p = params(n_head, n_head_kv, dim);
  Batch b;
  b.add(0, 300, 1000);  // query blocks 4..15: 4+1 .. 15+1 tiles each
  b.add(1, 0, 333);     // blocks 0..5
  const auto q = random_floats(rng, b.size() * n_head * dim);
  auto be = backend_with(3);
  ASSERT_TRUE(be->set_tilemix(mix(0.3)).ok());
  run(*be, c.kv, b, q, p);
  int64_t t0 = 0, t1 = 0;
  for (int qb = 4; qb <= 15; ++qb) t0 += qb + 1;
  for (int qb = 0; qb <= 5; ++qb) t1 += qb + 1;
  const tilemix::TileMixStats st = be->tilemix_stats();
  EXPECT_EQ(st.routed_calls, 2);
  EXPECT_EQ(st.tiles_total, n_head_kv * (t0 + t1));
  EXPECT_EQ(st.tiles_int8, n_head_kv * (tilemix::int8_tile_count(0.3, t0) + tilemix::int8_tile_count(0.3, t1)));
}

// ---------------------------------------------------------------------------------------------
// Options.

TEST(TileMixOptions, BadValuesAreRefusedNamingTheFlagAndRange) {
  tilemix::TileMixOptions o;
  for (const char* bad : {"-0.1", "1.5", "abc", "", "nan", "inf", "0.5x"}) {
    const Status st = tilemix::set_option(o, "tilemix-int8", bad, "--tilemix-int8");
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find("--tilemix-int8"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("[0, 1]"), std::string::npos) << st.message();
  }
  EXPECT_EQ(o.int8_fraction, 0);
  for (const char* bad : {"0", "-3", "1.5", "x"}) {
    const Status st = tilemix::set_option(o, "tilemix-min-blocks", bad, "--tilemix-min-blocks");
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find("--tilemix-min-blocks"), std::string::npos) << st.message();
  }
  EXPECT_FALSE(tilemix::set_option(o, "tilemix-bits", "8", "--tilemix-bits").ok());
  ASSERT_TRUE(tilemix::set_option(o, "tilemix-int8", "0.75", "--tilemix-int8").ok());
  EXPECT_EQ(o.int8_fraction, 0.75);
  ASSERT_TRUE(tilemix::set_option(o, "tilemix-min-blocks", "2", "--tilemix-min-blocks").ok());
  EXPECT_EQ(o.min_blocks, 2);
  EXPECT_TRUE(tilemix::is_option("tilemix-int8"));
  EXPECT_FALSE(tilemix::is_option("prefill-sparse"));
  // The backend refuses what the parser would (a caller that builds the options itself).
  auto be = backend_with(1);
  EXPECT_FALSE(be->set_tilemix(mix(1.5)).ok());
  EXPECT_FALSE(be->set_tilemix(mix(-1)).ok());
}

TEST(TileMixOptions, RoundingOfTheTileCount) {
  EXPECT_EQ(tilemix::int8_tile_count(0.5, 5), 3);  // halves up
  EXPECT_EQ(tilemix::int8_tile_count(0.5, 4), 2);
  EXPECT_EQ(tilemix::int8_tile_count(0.1, 4), 0);
  EXPECT_EQ(tilemix::int8_tile_count(1.0, 7), 7);
  EXPECT_EQ(tilemix::int8_tile_count(0.0, 7), 0);
  EXPECT_EQ(tilemix::int8_tile_count(0.999, 10), 10);
}

}  // namespace
}  // namespace frugal
