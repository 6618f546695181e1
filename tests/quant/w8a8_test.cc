// W8A8 INT8 linear (quant/w8a8/) and power-of-two scales (quant/methods/pow2_scales.h): both INT8
// kernels against the scalar reference on fresh random inputs (accumulators exact, outputs within
// one output spacing), the int32 bound at its edge, power-of-two kernels bitwise equal on random
// layers, original-scale kernels at most one bf16 spacing apart, and the requantization (weights
// re-expressed at the new scale, not only the scale rewritten).
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <random>

#include "frugal/core/half.h"
#include "frugal/core/thread_pool.h"
#include "frugal/quant/methods/pow2_scales.h"
#include "frugal/quant/w8a8/fault_injection.h"
#include "frugal/quant/w8a8/int8_gemm.h"
#include "frugal/quant/w8a8/w8a8.h"

namespace frugal::quant::w8a8 {
namespace {

using methods::is_pow2;
using methods::nearest_pow2;

uint32_t fresh_seed() { return std::random_device{}(); }

// Rows with per-row magnitudes over six decades and ~1% outliers: per-channel scales differ.
std::vector<float> random_matrix(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> uni(0.f, 1.f);
  std::vector<float> m(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = std::pow(10.f, -3.f + 6.f * uni(rng));
    for (int64_t k = 0; k < cols; ++k) {
      float v = normal(rng) * scale;
      if (uni(rng) < 0.01f) v *= 10.f;
      m[static_cast<size_t>(r * cols + k)] = v;
    }
  }
  if (rows > 2) std::fill(m.begin() + cols, m.begin() + 2 * cols, 0.f);  // an all-zero row
  return m;
}

struct Layer {
  Int8Weights w;
  Int8Activations a;
  std::vector<float> bias;
};

Layer random_layer(int64_t n, int64_t rows, int64_t cols, std::mt19937& rng) {
  Layer L;
  L.w = quantize_weights(random_matrix(rows, cols, rng).data(), rows, cols);
  const std::vector<float> x = random_matrix(n, cols, rng);
  quantize_activations(x.data(), n, cols, L.a);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int64_t r = 0; r < rows; ++r) L.bias.push_back(normal(rng));
  return L;
}

std::vector<float> run(const Int8GemmKernel& k, const Layer& L, const float* bias, OutputType out,
                       std::vector<int32_t>* acc = nullptr, ThreadPool* pool = nullptr) {
  std::vector<float> y(static_cast<size_t>(L.a.n * L.w.rows), NAN);
  GemmArgs g;
  g.a = &L.a;
  g.w = &L.w;
  g.bias = bias;
  g.out = out;
  g.y = y.data();
  g.pool = pool;
  if (acc != nullptr) {
    acc->assign(y.size(), 0);
    g.acc = acc->data();
  }
  k.gemm(g);
  return y;
}

float spacing_of(float v, OutputType t) {
  // The gap above |v| in the output type.
  const float a = std::fabs(v);
  if (t == OutputType::kBF16) {
    const uint16_t h = f32_to_bf16(a);
    return bf16_to_f32(static_cast<uint16_t>(h + 1)) - bf16_to_f32(h);
  }
  return std::nextafter(a, INFINITY) - a;
}

TEST(W8A8, AccumulatorBound) {
  EXPECT_EQ(kMaxExactK, 133144);
  EXPECT_LE(kMaxExactK * 127 * 127, int64_t{INT_MAX});
  EXPECT_GT((kMaxExactK + 1) * 127 * 127, int64_t{INT_MAX});
  EXPECT_TRUE(accumulator_fits(kMaxExactK));
  EXPECT_FALSE(accumulator_fits(kMaxExactK + 1));
  // At the bound, with every product +-127^2, both kernels' int32 sums are still exact.
  for (int sign : {1, -1}) {
    Layer L;
    L.w.rows = 1;
    L.w.cols = kMaxExactK;
    L.w.q.assign(static_cast<size_t>(kMaxExactK), static_cast<int8_t>(127 * sign));
    L.w.scale = {1.f};
    L.a.n = 1;
    L.a.cols = kMaxExactK;
    L.a.q.assign(static_cast<size_t>(kMaxExactK), 127);
    L.a.scale = {1.f};
    for (const auto& name : int8_kernel_names()) {
      std::vector<int32_t> acc;
      run(*find_int8_kernel(name), L, nullptr, OutputType::kF32, &acc);
      EXPECT_EQ(acc[0], sign * kMaxExactK * 127 * 127) << name;
    }
  }
}

TEST(W8A8, QuantizersAreSymmetricAndRoundTrip) {
  std::mt19937 rng(fresh_seed());
  const int64_t rows = 9, cols = 77;
  const std::vector<float> m = random_matrix(rows, cols, rng);
  const Int8Weights w = quantize_weights(m.data(), rows, cols);
  const std::vector<float> d = dequantize_weights(w);
  EXPECT_EQ(w.scale[1], 1.f);  // the zero row
  for (int64_t r = 0; r < rows; ++r) {
    int amax = 0;
    for (int64_t k = 0; k < cols; ++k) {
      const size_t i = static_cast<size_t>(r * cols + k);
      EXPECT_GE(w.q[i], -127);
      amax = std::max(amax, std::abs(int{w.q[i]}));
      EXPECT_LE(std::fabs(d[i] - m[i]), 0.5001f * w.scale[static_cast<size_t>(r)]) << r << "," << k;
    }
    if (r != 1) {
      EXPECT_EQ(amax, 127) << r;
    }
  }
  Int8Activations a;
  quantize_activations(m.data(), rows, cols, a);
  EXPECT_EQ(a.q, w.q);  // the same rule per row
}

TEST(W8A8, KernelsMatchReferenceOnFreshInputs) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  ThreadPool pool(3);
  const int64_t shapes[][3] = {{1, 1, 1}, {1, 5, 63}, {3, 7, 64}, {5, 9, 65}, {17, 33, 300}, {4, 16, 1027}, {2, 3, 4100}};
  for (const auto& s : shapes) {
    const Layer L = random_layer(s[0], s[1], s[2], rng);
    for (OutputType out : {OutputType::kBF16, OutputType::kF32}) {
      for (bool with_bias : {false, true}) {
        const float* bias = with_bias ? L.bias.data() : nullptr;
        std::vector<float> ref(static_cast<size_t>(s[0] * s[1]));
        gemm_reference(L.a, L.w, bias, out, ref.data());
        for (const auto& name : int8_kernel_names()) {
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            std::vector<int32_t> acc;
            const std::vector<float> y = run(*find_int8_kernel(name), L, bias, out, &acc, p);
            for (int64_t t = 0; t < s[0]; ++t) {
              for (int64_t r = 0; r < s[1]; ++r) {
                const size_t i = static_cast<size_t>(t * s[1] + r);
                ASSERT_EQ(acc[i], dot_exact(L.a.q.data() + t * s[2], L.w.q.data() + r * s[2], s[2]))
                    << name << " K " << s[2];
                ASSERT_EQ(y[i], round_to_output(y[i], out)) << "not a value of the output type";
                if (!with_bias) {
                  ASSERT_LE(spacings_apart(y[i], ref[i], out), 1) << name << " " << y[i] << " vs " << ref[i];
                } else {
                  // The bias may cancel the product: bound the error by the operands' size.
                  const double prod = std::fabs(static_cast<double>(acc[i]) * L.a.scale[static_cast<size_t>(t)] *
                                                L.w.scale[static_cast<size_t>(r)]);
                  const double tol = spacing_of(ref[i], out) + 4 * 0x1p-24 * (prod + std::fabs(L.bias[r]));
                  ASSERT_LE(std::fabs(static_cast<double>(y[i]) - ref[i]), tol) << name;
                }
              }
            }
            // Threads never change a result.
            const std::vector<float> y1 = run(*find_int8_kernel(name), L, bias, out, nullptr, nullptr);
            ASSERT_EQ(0, std::memcmp(y.data(), y1.data(), y.size() * sizeof(float))) << name;
          }
        }
      }
    }
  }
}

TEST(W8A8, Pow2ScalesMakeKernelsBitwiseEqual) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> dim(1, 300);
  const Int8GemmKernel& a = scale_product_kernel();
  const Int8GemmKernel& b = sequential_fma_kernel();
  int64_t outputs = 0;
  for (int layer = 0; layer < 40; ++layer) {
    Layer L = random_layer(dim(rng) % 24 + 1, dim(rng), dim(rng), rng);
    L.w = methods::requantize_pow2(L.w);
    for (float s : L.w.scale) ASSERT_TRUE(is_pow2(s)) << s;
    for (OutputType out : {OutputType::kBF16, OutputType::kF32}) {
      for (const float* bias : {static_cast<const float*>(nullptr), static_cast<const float*>(L.bias.data())}) {
        const std::vector<float> ya = run(a, L, bias, out), yb = run(b, L, bias, out);
        ASSERT_EQ(0, std::memcmp(ya.data(), yb.data(), ya.size() * sizeof(float)))
            << "layer " << layer << " " << output_type_name(out) << (bias ? " bias" : "");
        outputs += static_cast<int64_t>(ya.size());
      }
    }
  }
  EXPECT_GT(outputs, 10000);
}

TEST(W8A8, OriginalScalesDifferByAtMostOneSpacing) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const Int8GemmKernel& a = scale_product_kernel();
  const Int8GemmKernel& b = sequential_fma_kernel();
  int64_t bf16_diff = 0, f32_diff = 0, outputs = 0;
  for (int layer = 0; layer < 8; ++layer) {
    const Layer L = random_layer(64, 256, 384, rng);
    for (OutputType out : {OutputType::kBF16, OutputType::kF32}) {
      const std::vector<float> ya = run(a, L, nullptr, out), yb = run(b, L, nullptr, out);
      for (size_t i = 0; i < ya.size(); ++i) {
        const int64_t d = spacings_apart(ya[i], yb[i], out);
        if (out == OutputType::kBF16) {
          ASSERT_LE(d, 1) << ya[i] << " vs " << yb[i];
          bf16_diff += d;
          ++outputs;
        } else {
          ASSERT_LE(d, 3) << ya[i] << " vs " << yb[i];
          f32_diff += d > 0;
        }
      }
    }
  }
  // The two epilogues are genuinely different computations: in f32 many outputs differ.
  EXPECT_GT(f32_diff, outputs / 20);
  RecordProperty("bf16_outputs_one_spacing_apart", std::to_string(bf16_diff) + " of " + std::to_string(outputs));
}

TEST(Pow2Scales, NearestPowerOfTwoInLog2) {
  EXPECT_EQ(nearest_pow2(1.f), 1.f);
  EXPECT_EQ(nearest_pow2(0.75f), 1.f);    // log2 = -0.415
  EXPECT_EQ(nearest_pow2(0.7f), 0.5f);    // log2 = -0.515
  EXPECT_EQ(nearest_pow2(2.8f), 2.f);     // 1.485
  EXPECT_EQ(nearest_pow2(2.9f), 4.f);     // 1.536
  EXPECT_EQ(nearest_pow2(3e-5f), std::ldexp(1.f, -15));
  std::mt19937 rng(fresh_seed());
  std::uniform_real_distribution<double> e(-30, 30);
  for (int i = 0; i < 10000; ++i) {
    const float s = static_cast<float>(std::exp2(e(rng)));
    const double l = std::log2(static_cast<double>(s));
    if (std::fabs(l - std::floor(l) - 0.5) < 1e-6) continue;  // too near the tie for log2's accuracy
    ASSERT_EQ(nearest_pow2(s), static_cast<float>(std::exp2(std::round(l)))) << s;
    ASSERT_TRUE(is_pow2(nearest_pow2(s)));
  }
  EXPECT_FALSE(is_pow2(0.75f));
  EXPECT_FALSE(is_pow2(0.f));
}

TEST(Pow2Scales, RequantizesTheWeightsNotOnlyTheScales) {
  std::mt19937 rng(fresh_seed());
  const int64_t rows = 64, cols = 200;
  const std::vector<float> m = random_matrix(rows, cols, rng);
  const Int8Weights w = quantize_weights(m.data(), rows, cols);
  methods::Pow2Stats st;
  const Int8Weights p = methods::requantize_pow2(w, &st);
  const Int8Weights only = methods::rewrite_scales_only(w);
  EXPECT_EQ(st.rows, rows);
  EXPECT_EQ(only.q, w.q);
  const std::vector<float> dw = dequantize_weights(w), dp = dequantize_weights(p), donly = dequantize_weights(only);
  double err_p = 0, err_only = 0;
  int64_t changed_rows = 0, changed_q_rows = 0, clipped = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float s = w.scale[static_cast<size_t>(r)], ps = p.scale[static_cast<size_t>(r)];
    ASSERT_EQ(ps, nearest_pow2(s));
    ASSERT_EQ(only.scale[static_cast<size_t>(r)], ps);
    bool q_changed = false;
    double row_p = 0, row_only = 0, row_norm = 0;
    for (int64_t k = 0; k < cols; ++k) {
      const size_t i = static_cast<size_t>(r * cols + k);
      q_changed |= p.q[i] != w.q[i];
      // q' = round(q s / p): within half a new step of what the int8 tensor stood for, unless clipped.
      const double target = static_cast<double>(w.q[i]) * s / ps;
      if (std::fabs(target) > 127.5) {
        ++clipped;
        ASSERT_EQ(std::abs(int{p.q[i]}), 127);
      } else {
        ASSERT_EQ(p.q[i], static_cast<int8_t>(std::nearbyint(target))) << r << "," << k;
        ASSERT_LE(std::fabs(dp[i] - dw[i]), 0.5 * ps + 1e-12);
      }
      row_p += (static_cast<double>(dp[i]) - dw[i]) * (static_cast<double>(dp[i]) - dw[i]);
      row_only += (static_cast<double>(donly[i]) - dw[i]) * (static_cast<double>(donly[i]) - dw[i]);
      row_norm += static_cast<double>(dw[i]) * dw[i];
    }
    if (row_norm > 0) {  // relative to the row, so rows of every magnitude count alike
      err_p += row_p / row_norm;
      err_only += row_only / row_norm;
    }
    if (is_pow2(s)) {
      ASSERT_FALSE(q_changed) << "a power-of-two row is kept as it is";
    } else {
      ++changed_rows;
      changed_q_rows += q_changed;
    }
  }
  EXPECT_EQ(changed_rows, st.rows_rescaled);
  // The scale moved by a factor of up to sqrt(2) and the integers moved with it (a row whose
  // weights are all small but one clipped outlier may keep its integers).
  EXPECT_GT(changed_q_rows * 10, changed_rows * 9);
  EXPECT_EQ(clipped, st.clipped);
  // Rewriting the scale alone scales each row by p/s: far larger errors than requantizing (whose
  // error is the rounding to the new step and the clipping of the largest weights when p < s).
  EXPECT_LT(err_p * 4, err_only) << err_p << " vs " << err_only;
}

TEST(W8A8, SpacingsAreCountedAcrossSignsAndBinades) {
  const float one = 1.f;
  const float next_bf = bf16_to_f32(static_cast<uint16_t>(f32_to_bf16(one) + 1));
  EXPECT_EQ(spacings_apart(one, next_bf, OutputType::kBF16), 1);
  EXPECT_EQ(spacings_apart(one, std::nextafter(one, 2.f), OutputType::kF32), 1);
  EXPECT_EQ(spacings_apart(0.f, -0.f, OutputType::kF32), 0);
  const float tiny = bf16_to_f32(1);
  EXPECT_EQ(spacings_apart(tiny, -tiny, OutputType::kBF16), 2);
  const float below_two = bf16_to_f32(static_cast<uint16_t>(f32_to_bf16(2.f) - 1));
  EXPECT_EQ(spacings_apart(below_two, 2.f, OutputType::kBF16), 1);
  EXPECT_EQ(find_int8_kernel("nope"), nullptr);
  EXPECT_EQ(int8_kernel_names().size(), 2u);
}


// The fault-injection kernels against the unchanged scale_product kernel on fresh random operands
// (int8 values over the whole range, K = 1024, so sums exceed 16 bits; scales and a bias of
// comparable size): the bitwise probe sees every fault in one output type or the other, the
// epilogue-order faults stay within one bf16 spacing (a one-spacing tolerance test passes them), the
// int16 accumulator breaks the sum by far more, and fusing is inert without a bias. The one-spacing
// bound is asserted where it is a theorem: without a bias (two reals within 2^-9 of each other
// round to bf16 values at most one apart); with one, cancellation can stretch any fault.
TEST(W8A8Faults, BitwiseProbeSeesEveryFaultToleranceOnlyTheGrossOne) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  constexpr int64_t kN = 8, kRows = 128, kK = 1024;
  Layer L;
  std::uniform_int_distribution<int> q(-127, 127);
  std::uniform_real_distribution<float> log_scale(-4.f, -2.f);
  std::normal_distribution<float> normal(0.f, 1.f);
  L.w.rows = kRows;
  L.w.cols = kK;
  for (int64_t i = 0; i < kRows * kK; ++i) L.w.q.push_back(static_cast<int8_t>(q(rng)));
  for (int64_t r = 0; r < kRows; ++r) L.w.scale.push_back(std::pow(10.f, log_scale(rng)));
  L.a.n = kN;
  L.a.cols = kK;
  for (int64_t i = 0; i < kN * kK; ++i) L.a.q.push_back(static_cast<int8_t>(q(rng)));
  for (int64_t t = 0; t < kN; ++t) L.a.scale.push_back(std::pow(10.f, log_scale(rng)));
  for (int64_t r = 0; r < kRows; ++r) L.bias.push_back(normal(rng) * 1e-3f);
  const Int8GemmKernel& ref = scale_product_kernel();
  std::vector<int32_t> acc_ref;
  const std::vector<float> bf_ref = run(ref, L, L.bias.data(), OutputType::kBF16, &acc_ref);
  const std::vector<float> f32_ref = run(ref, L, L.bias.data(), OutputType::kF32);
  const std::vector<float> nobias_ref = run(ref, L, nullptr, OutputType::kF32);
  const std::vector<float> nobias_bf_ref = run(ref, L, nullptr, OutputType::kBF16);
  ASSERT_EQ(fault_names().size(), 6u);
  EXPECT_EQ(find_fault_kernel("no_such_fault"), nullptr);
  const auto differing = [](const std::vector<float>& a, const std::vector<float>& b) {
    int64_t n = 0;
    for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], 4) != 0;
    return n;
  };
  for (const std::string& name : fault_names()) {
    SCOPED_TRACE(name);
    const Int8GemmKernel* f = find_fault_kernel(name);
    ASSERT_NE(f, nullptr);
    std::vector<int32_t> acc;
    const std::vector<float> bf = run(*f, L, L.bias.data(), OutputType::kBF16, &acc);
    const std::vector<float> f32 = run(*f, L, L.bias.data(), OutputType::kF32);
    const std::vector<float> nobias_bf = run(*f, L, nullptr, OutputType::kBF16);
    int64_t max_spacings = 0, max_spacings_nobias = 0;
    for (size_t i = 0; i < bf.size(); ++i) {
      max_spacings = std::max(max_spacings, spacings_apart(bf[i], bf_ref[i], OutputType::kBF16));
      max_spacings_nobias =
          std::max(max_spacings_nobias, spacings_apart(nobias_bf[i], nobias_bf_ref[i], OutputType::kBF16));
    }
    EXPECT_GT(differing(bf, bf_ref) + differing(f32, f32_ref), 0) << "the bitwise probe must see the fault";
    if (name != "accumulator_wrap") {
      EXPECT_LE(max_spacings_nobias, 1) << "this fault moves a bf16 output by at most one spacing";
    }
    if (name == "accumulator_wrap") {
      EXPECT_GT(max_spacings, 1) << "a wrapped int16 sum is far off";
      EXPECT_NE(acc, acc_ref);
    } else {
      EXPECT_EQ(acc, acc_ref) << "only the epilogue is changed";
    }
    if (name == "fused_ordering") {
      EXPECT_EQ(differing(run(*f, L, nullptr, OutputType::kF32), nobias_ref), 0) << "fma(a, b, 0) is a * b";
    }
  }
}

}  // namespace
}  // namespace frugal::quant::w8a8
