// Tensor-core attention (launch_attention_flash) and split-key attention (launch_attention_split)
// against a float64 scalar reference of causal GQA attention with cached positions and a sliding
// window. Every test skips without a GPU.
//
// Bounds. K and V are drawn, rounded to F16 on the host and uploaded as F16, so the reference
// reads exactly the cache the kernels read: K/V rounding is no error source. The kernels round
// q * scale to F16 (the reference does the same, in float, bit for bit) and compute scores with F32
// accumulation of exact F16 products. What remains, per output element out = sum_j w_j v_j:
//  - P rounded to F16 for the P V product while the normaliser l sums the unrounded P:
//    out' - out = sum_j w_j d_j v_j with |d_j| <= 2^-11 (normal halves), so
//    |error| <= 2^-11 * A, A = sum_j w_j |v_j|; P below 2^-14 is subnormal in F16, absolute error
//    <= 2^-25 each, and l >= 1 (the largest P is 1), so at most 2^-25 * B, B = sum_j |v_j|;
//  - F32 score accumulation (128 products, magnitudes summing to ~30 here) and exp2f/F32 sums:
//    a relative weight error around 1e-5, at most a few 1e-4 however the accumulation rounds,
//    which moves out by at most twice that times A.
// Allowed per element: 2^-9 * A + 2^-24 * B + 1e-6 (about twice the worst case). A query that sees
// no key must give exact zeros. As a tighter statistical check, rel_l2 over a run must stay below
// 2e-3: the P roundings are independent, so the expected rel_l2 is about 2^-11 / sqrt(3) ~ 3e-4,
// while dropping or double-counting one 64-key tile out of 5000 keys moves it past 0.05.
//
// The cache also holds traps: slots past seq_len have NaN K/V and position 0 (visible to every
// query), and layer 0 (the kernels run layer 1) is NaN, so reading past a sequence or the wrong
// layer poisons the output. The output buffer starts as NaN, so a row left unwritten fails too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda/gpu_skip.h"
#include "frugal/backend/cuda/cuda_backend.h"
#include "frugal/core/half.h"
#include "frugal/core/status.h"


namespace frugal {
namespace {

struct AttnCase {
  std::string name;
  int head_dim = 128;
  int n_head_kv = 2;
  int group = 4;  // query heads per KV head
  int window = 0;
  float q_std = 1.f;
  std::vector<std::vector<int32_t>> key_pos;  // per sequence: cached positions, ascending
  // Per sequence and KV head, when heads hold different tokens (after eviction): as many
  // positions in every head of a sequence as key_pos has; empty: every head holds key_pos.
  std::vector<std::vector<std::vector<int32_t>>> head_key_pos;
  std::vector<int32_t> seq, pos;              // query tokens
  const std::vector<int32_t>& keys_of(int s, int g) const {
    return head_key_pos.empty() ? key_pos[static_cast<size_t>(s)]
                                : head_key_pos[static_cast<size_t>(s)][static_cast<size_t>(g)];
  }
};

std::vector<int32_t> range_pos(int count, int first = 0, int step = 1) {
  std::vector<int32_t> v(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) v[static_cast<size_t>(i)] = first + i * step;
  return v;
}
// The last `count` cached positions of `keys` as queries of sequence s (a prefill's own tokens).
void add_tail_queries(AttnCase& c, int s, int count) {
  const auto& kp = c.key_pos[static_cast<size_t>(s)];
  for (int i = static_cast<int>(kp.size()) - count; i < static_cast<int>(kp.size()); ++i) {
    c.seq.push_back(s);
    c.pos.push_back(kp[static_cast<size_t>(i)]);
  }
}

std::vector<AttnCase> make_cases() {
  std::vector<AttnCase> cases;
  {
    AttnCase c{"decode_d128_g4_ctx5000"};
    c.key_pos = {range_pos(5000)};
    add_tail_queries(c, 0, 1);
    cases.push_back(c);
  }
  {
    AttnCase c{"decode_d64_g1_ctx1"};
    c.head_dim = 64, c.n_head_kv = 4, c.group = 1;
    c.key_pos = {range_pos(1)};
    add_tail_queries(c, 0, 1);
    cases.push_back(c);
  }
  {
    AttnCase c{"prefill_d128_g4_q200_ctx1000"};
    c.key_pos = {range_pos(1000)};
    add_tail_queries(c, 0, 200);
    cases.push_back(c);
  }
  {
    AttnCase c{"prefill_d64_g1_q64_ctx65"};
    c.head_dim = 64, c.n_head_kv = 3, c.group = 1;
    c.key_pos = {range_pos(65)};
    add_tail_queries(c, 0, 64);
    cases.push_back(c);
  }
  {
    AttnCase c{"prefill_d128_g1_q7_ctx65_sharp"};
    c.group = 1, c.q_std = 4.f;  // peaked softmax: scores with standard deviation 4
    c.key_pos = {range_pos(65)};
    add_tail_queries(c, 0, 7);
    cases.push_back(c);
  }
  {
    AttnCase c{"prefill_d64_g4_q64_ctx5000"};
    c.head_dim = 64;
    c.key_pos = {range_pos(5000)};
    add_tail_queries(c, 0, 64);
    cases.push_back(c);
  }
  {
    // Three sequences in one batch, their tokens interleaved (both orders), one with gaps in its
    // positions (masking must use positions, not slot indices), queries before a sequence's first
    // key and a sequence with no keys (zeros), and a sequence id above the others.
    AttnCase c{"interleaved_sequences_d128_g4"};
    c.key_pos = {range_pos(1000), range_pos(65, 10, 2), {}};
    AttnCase tmp = c;
    add_tail_queries(tmp, 0, 100);
    AttnCase tmp1 = c;
    add_tail_queries(tmp1, 1, 64);
    size_t i0 = 0, i1 = 0;
    while (i0 < tmp.seq.size() || i1 < tmp1.seq.size()) {
      if (i1 < tmp1.seq.size()) c.seq.push_back(1), c.pos.push_back(tmp1.pos[i1++]);
      if (i0 < tmp.seq.size()) c.seq.push_back(0), c.pos.push_back(tmp.pos[i0++]);
      if (i0 < tmp.seq.size()) c.seq.push_back(0), c.pos.push_back(tmp.pos[i0++]);
    }
    c.seq.push_back(1), c.pos.push_back(5);    // before seq 1's first key (10): nothing visible
    c.seq.push_back(2), c.pos.push_back(0);    // empty sequence
    c.seq.push_back(1), c.pos.push_back(11);   // only the key at 10
    c.seq.push_back(0), c.pos.push_back(3000); // past every key of seq 0
    cases.push_back(c);
  }
  {
    // A batched decode step: one query token for each of 24 sequences of different lengths (1 to
    // 700 keys), in a shuffled sequence order, as the engine's many-sequence steps are.
    AttnCase c{"batched_decode_24_sequences_d128_g4"};
    for (int s = 0; s < 24; ++s) c.key_pos.push_back(range_pos(1 + (s * 97) % 700));
    for (int k = 0; k < 24; ++k) {
      const int s = (k * 7) % 24;
      add_tail_queries(c, s, 1);
    }
    cases.push_back(c);
  }
  {
    AttnCase c{"window256_d64_g4_q64_ctx5000"};
    c.head_dim = 64, c.window = 256;
    c.key_pos = {range_pos(5000)};
    add_tail_queries(c, 0, 64);
    cases.push_back(c);
  }
  {
    // Window with decode queries of two sequences; seq 1's query is 200 past its last key, more
    // than the window: nothing visible.
    AttnCase c{"window100_d128_g4_decode"};
    c.window = 100;
    c.key_pos = {range_pos(1000), range_pos(300)};
    add_tail_queries(c, 0, 1);
    c.seq.push_back(1), c.pos.push_back(499);
    c.seq.push_back(1), c.pos.push_back(350);  // sees keys 251..299
    cases.push_back(c);
  }
  {
    AttnCase c{"prefill_d64_g5_q30_ctx300"};  // a group that does not divide 64: 12 tokens, 60 rows
    c.head_dim = 64, c.n_head_kv = 1, c.group = 5;
    c.key_pos = {range_pos(300)};
    add_tail_queries(c, 0, 30);
    cases.push_back(c);
  }
  {
    // After eviction: every KV head of a sequence keeps its own tokens (as many in each), so a
    // kernel that read one head's positions for another would mask the wrong keys. Decode and
    // prefill-sized queries, two sequences.
    AttnCase c{"evicted_heads_d128_g4"};
    c.n_head_kv = 3;
    std::mt19937 pick(7);
    c.key_pos = {range_pos(700), range_pos(90)};
    c.head_key_pos.resize(2);
    for (int s = 0; s < 2; ++s) {
      const int total = s == 0 ? 3000 : 400, keep = static_cast<int>(c.key_pos[static_cast<size_t>(s)].size());
      for (int g = 0; g < c.n_head_kv; ++g) {
        std::vector<int32_t> all = range_pos(total);
        std::shuffle(all.begin(), all.end() - 64, pick);  // the newest 64 stay, as the buffer does
        std::vector<int32_t> kept(all.begin(), all.begin() + (keep - 64));
        kept.insert(kept.end(), all.end() - 64, all.end());
        std::sort(kept.begin(), kept.end());
        c.head_key_pos[static_cast<size_t>(s)].push_back(kept);
      }
      c.key_pos[static_cast<size_t>(s)] = c.head_key_pos[static_cast<size_t>(s)][0];
    }
    for (int i = 0; i < 70; ++i) c.seq.push_back(0), c.pos.push_back(2930 + i);
    c.seq.push_back(1), c.pos.push_back(399);
    c.seq.push_back(1), c.pos.push_back(200);
    cases.push_back(c);
  }
  return cases;
}

struct Built {
  int capacity = 0, n_seq = 0, n_head = 0, n = 0;
  float scale = 1.f;
  std::vector<uint16_t> k, v;  // [2 layers][n_seq][n_head_kv][capacity][head_dim]
  std::vector<int32_t> kpos, seq_len;  // kpos [2 layers][n_seq][n_head_kv][capacity]
  std::vector<float> q;
  std::vector<double> ref, tol_a, tol_b;  // reference and the per-element A and B of the bounds
  std::vector<char> none_visible;         // per (token, head)
};

Built build(const AttnCase& c, std::mt19937& rng) {
  Built b;
  const int d = c.head_dim, hkv = c.n_head_kv;
  b.n_seq = static_cast<int>(c.key_pos.size());
  b.n_head = hkv * c.group;
  b.n = static_cast<int>(c.seq.size());
  b.scale = 1.f / std::sqrt(static_cast<float>(d));
  size_t longest = 0;
  for (const auto& kp : c.key_pos) longest = std::max(longest, kp.size());
  b.capacity = static_cast<int>(longest) + 3;  // spare slots hold the traps
  const uint16_t nan_h = 0x7E00u;
  const size_t layer_elems = static_cast<size_t>(b.n_seq) * hkv * b.capacity * d;
  b.k.assign(2 * layer_elems, nan_h);
  b.v.assign(2 * layer_elems, nan_h);
  b.kpos.assign(2 * static_cast<size_t>(b.n_seq) * hkv * b.capacity, 0);
  b.seq_len.resize(static_cast<size_t>(b.n_seq));
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int s = 0; s < b.n_seq; ++s) {
    const auto& kp = c.key_pos[static_cast<size_t>(s)];
    b.seq_len[static_cast<size_t>(s)] = static_cast<int32_t>(kp.size());
    for (int g = 0; g < hkv; ++g) {
      const auto& hk = c.keys_of(s, g);
      for (size_t j = 0; j < kp.size(); ++j) {
        const size_t row = ((static_cast<size_t>(1) * b.n_seq + s) * hkv + g) * b.capacity + j;
        b.kpos[row] = hk[j];
        for (int e = 0; e < d; ++e) {
          b.k[row * d + e] = f32_to_fp16(nd(rng));
          b.v[row * d + e] = f32_to_fp16(nd(rng));
        }
      }
    }
  }
  b.q.resize(static_cast<size_t>(b.n) * b.n_head * d);
  for (auto& x : b.q) x = nd(rng) * c.q_std;

  // float64 reference on exactly what the kernels read: F16 K/V, F16(q * scale).
  const size_t out_elems = b.q.size();
  b.ref.assign(out_elems, 0.0);
  b.tol_a.assign(out_elems, 0.0);
  b.tol_b.assign(out_elems, 0.0);
  b.none_visible.assign(static_cast<size_t>(b.n) * b.n_head, 0);
  std::vector<double> qh(static_cast<size_t>(d)), sc, w;
  std::vector<size_t> vis;
  for (int t = 0; t < b.n; ++t) {
    const int s = c.seq[static_cast<size_t>(t)], qp = c.pos[static_cast<size_t>(t)];
    for (int h = 0; h < b.n_head; ++h) {
      const int g = h / c.group;
      const size_t th = static_cast<size_t>(t) * b.n_head + h;
      const auto& kp = c.keys_of(s, g);
      vis.clear();
      for (size_t j = 0; j < kp.size(); ++j) {
        if (kp[j] <= qp && (c.window <= 0 || kp[j] > qp - c.window)) vis.push_back(j);
      }
      if (vis.empty()) {
        b.none_visible[th] = 1;
        continue;
      }
      for (int e = 0; e < d; ++e) qh[static_cast<size_t>(e)] = fp16_to_f32(f32_to_fp16(b.q[th * d + e] * b.scale));
      const size_t base = ((static_cast<size_t>(1) * b.n_seq + s) * hkv + g) * b.capacity;
      sc.assign(vis.size(), 0.0);
      double mx = -std::numeric_limits<double>::infinity();
      for (size_t i = 0; i < vis.size(); ++i) {
        const uint16_t* kr = &b.k[(base + vis[i]) * d];
        double acc = 0;
        for (int e = 0; e < d; ++e) acc += qh[static_cast<size_t>(e)] * fp16_to_f32(kr[e]);
        sc[i] = acc;
        mx = std::max(mx, acc);
      }
      w.assign(vis.size(), 0.0);
      double sum = 0;
      for (size_t i = 0; i < vis.size(); ++i) sum += (w[i] = std::exp(sc[i] - mx));
      for (size_t i = 0; i < vis.size(); ++i) {
        const uint16_t* vr = &b.v[(base + vis[i]) * d];
        const double wi = w[i] / sum;
        for (int e = 0; e < d; ++e) {
          const double ve = fp16_to_f32(vr[e]);
          b.ref[th * d + e] += wi * ve;
          b.tol_a[th * d + e] += wi * std::fabs(ve);
          b.tol_b[th * d + e] += std::fabs(ve);
        }
      }
    }
  }
  return b;
}

// Compares one run; returns a failure description or "".
std::string check(const AttnCase& c, const Built& b, const std::vector<float>& out, const std::string& what) {
  const int d = c.head_dim;
  double num = 0, den = 0, worst_ratio = 0;
  int bad = 0;
  std::string first_bad;
  for (size_t i = 0; i < out.size(); ++i) {
    const size_t th = i / static_cast<size_t>(d);
    const double o = out[i];
    if (b.none_visible[th]) {
      if (o != 0.0) {
        if (bad++ == 0) first_bad = "element " + std::to_string(i) + " (no visible key) = " + std::to_string(o);
      }
      continue;
    }
    const double err = std::isfinite(o) ? std::fabs(o - b.ref[i]) : std::numeric_limits<double>::infinity();
    const double tol = std::ldexp(b.tol_a[i], -9) + std::ldexp(b.tol_b[i], -24) + 1e-6;
    worst_ratio = std::max(worst_ratio, err / tol);
    num += std::isfinite(err) ? err * err : 1e30;
    den += b.ref[i] * b.ref[i];
    if (!(err <= tol)) {
      if (bad++ == 0) {
        const size_t t = th / static_cast<size_t>(b.n_head);
        first_bad = "element " + std::to_string(i) + " (token " + std::to_string(t) + ", head " +
                    std::to_string(th % static_cast<size_t>(b.n_head)) + ", col " + std::to_string(i % d) +
                    ") = " + std::to_string(o) + " vs " + std::to_string(b.ref[i]) + ", tol " + std::to_string(tol);
      }
    }
  }
  const double rel = den > 0 ? std::sqrt(num / den) : 0.0;
  std::printf("  %-34s %-22s rel_l2 %.3g  worst err/tol %.3g\n", c.name.c_str(), what.c_str(), rel, worst_ratio);
  if (bad > 0) return what + ": " + std::to_string(bad) + " bad elements, first " + first_bad;
  if (!(rel < 2e-3)) return what + ": rel_l2 " + std::to_string(rel) + " >= 2e-3";
  return "";
}

TEST(CudaFlashAttention, MatchesReference) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(20240611);
  for (const AttnCase& c : make_cases()) {
    SCOPED_TRACE(c.name);
    const Built b = build(c, rng);
    struct Run {
      int which;
      int max_keys;
      std::string what;
    };
    const std::vector<Run> runs = {{1, 0, "flash"},
                                   {2, b.capacity, "split max_keys=cap"},
                                   {2, 1, "split max_keys=1"},
                                   {2, 1 << 20, "split max_keys=2^20"},
                                   {3, b.capacity, "split T=1 max_keys=cap"},
                                   {3, 1, "split T=1 max_keys=1"},
                                   {4, 0, "flash T=1"}};
    for (const Run& r : runs) {
      std::vector<float> out(b.q.size(), std::numeric_limits<float>::quiet_NaN());
      const Status st = cuda::attention_on_device(r.which, b.k.data(), b.v.data(), b.kpos.data(), b.seq_len.data(),
                                                  /*n_layer=*/2, /*layer=*/1, b.n_seq, c.n_head_kv, c.head_dim,
                                                  b.capacity, b.q.data(), b.n, c.seq.data(), c.pos.data(), b.n_head,
                                                  b.scale, c.window, r.max_keys, out.data());
      ASSERT_TRUE(st.ok()) << r.what << ": " << st.message();
      const std::string err = check(c, b, out, r.what);
      EXPECT_TRUE(err.empty()) << err;
    }
  }
}

// Shapes the tensor-core kernels do not take: the launchers decline (the caller falls back).
TEST(CudaFlashAttention, DeclinesUnsupportedHeadDim) {
  SKIP_WITHOUT_GPU();
  const int d = 96, n_head_kv = 1, cap = 4;
  std::vector<uint16_t> kv(static_cast<size_t>(cap) * d, f32_to_fp16(0.5f));
  std::vector<int32_t> kpos = {0, 1, 2, 3}, seq_len = {4}, seq = {0}, pos = {3};
  std::vector<float> q(static_cast<size_t>(d), 1.f), out(static_cast<size_t>(d));
  for (int which : {1, 2}) {
    const Status st = cuda::attention_on_device(which, kv.data(), kv.data(), kpos.data(), seq_len.data(), 1, 0, 1,
                                                n_head_kv, d, cap, q.data(), 1, seq.data(), pos.data(), 1, 0.1f, 0, cap,
                                                out.data());
    EXPECT_EQ(st.code(), ErrorCode::kNotSupported) << which << ": " << st.message();
  }
  // The existing kernel takes it: every V row is 0.5, so is the output.
  const Status st = cuda::attention_on_device(0, kv.data(), kv.data(), kpos.data(), seq_len.data(), 1, 0, 1,
                                              n_head_kv, d, cap, q.data(), 1, seq.data(), pos.data(), 1, 0.1f, 0, cap,
                                              out.data());
  ASSERT_TRUE(st.ok()) << st.message();
  for (float x : out) EXPECT_EQ(x, 0.5f);
}

// Timings, not a check: runs only with FRUGAL_ATTN_BENCH=1. Llama-3.1-8B's attention shape (32
// heads, 8 KV heads, head_dim 128): a 32k prefill of one layer in 4k-token batches as the backend
// would split it is approximated by its last batch (the most keys), and decode at several depths.
TEST(CudaFlashAttention, Bench) {
  SKIP_WITHOUT_GPU();
  const char* e = std::getenv("FRUGAL_ATTN_BENCH");
  if (e == nullptr || std::atoi(e) == 0) GTEST_SKIP() << "set FRUGAL_ATTN_BENCH=1";
  struct B {
    int ctx, n, reps;
    std::vector<int> which;
  };
  const std::vector<B> benches = {{32768, 32768, 3, {1}},  {32768, 4096, 5, {1}},  {4096, 4096, 5, {0, 1}},
                                  {32768, 512, 5, {1, 2}}, {32768, 1, 50, {0, 1, 2}}, {32768, 8, 50, {0, 1, 2}},
                                  {4096, 1, 50, {0, 1, 2}}, {131072, 1, 20, {1, 2}}};
  for (const B& b : benches) {
    for (int which : b.which) {
      double ms = 0;
      const Status st = cuda::attention_bench_on_device(which, 32, 8, 128, b.ctx, b.n, b.reps, &ms);
      ASSERT_TRUE(st.ok()) << st.message();
      // FLOPs of the causal part: 4 * head_dim per visible (query, key, head).
      double pairs = 0;
      for (int i = 0; i < b.n; ++i) pairs += b.ctx - b.n + i + 1;
      const double tflops = pairs * 32 * 4 * 128 / (ms * 1e-3) / 1e12;
      std::printf("  %-6s ctx %6d  n %6d  %9.3f ms  %7.0f query tok/s/layer  %6.1f TFLOP/s\n",
                  which == 0 ? "scalar" : (which == 1 ? "flash" : "split"), b.ctx, b.n, ms, b.n / (ms * 1e-3), tflops);
    }
  }
}

}  // namespace
}  // namespace frugal
