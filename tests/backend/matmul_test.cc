// matmul and get_rows for every registered type, against dequantize-then-dot in double using the
// scalar reference conversions of the type table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "frugal/backend/cpu/repack.h"
#include "frugal/core/dtype.h"
#include "frugal/quant/simd_kernels.h"
#include "frugal/quant/type_traits.h"
#include "test_util.h"

namespace frugal {
namespace {

using testing::backend_with;
using testing::for_each_target_and_threads;
using testing::random_floats;

// A weight matrix quantized with the type's reference quantizer, rows padded apart by a few
// bytes so the row stride is honoured.
struct TestWeight {
  std::vector<uint8_t> bytes;
  std::vector<float> dequant;  // [rows][cols] through to_float_ref
  WeightTensor w;
};

TestWeight make_weight(const TypeTraits& tt, int64_t rows, int64_t cols, std::mt19937& rng) {
  TestWeight tw;
  const size_t rb = static_cast<size_t>(row_bytes(tt.type, cols));
  const size_t stride = rb + 16;
  tw.bytes.assign(stride * rows + 64, 0xAB);
  tw.dequant.resize(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    const auto src = random_floats(rng, cols);
    tt.from_float_ref(src.data(), tw.bytes.data() + r * stride, cols);
    tt.to_float_ref(tw.bytes.data() + r * stride, tw.dequant.data() + r * cols, cols);
  }
  tw.w.type = tt.type;
  tw.w.rows = rows;
  tw.w.cols = cols;
  tw.w.row_stride = stride;
  tw.w.data = tw.bytes.data();
  return tw;
}

// Columns that are a multiple of every block size involved, odd where the type allows.
int64_t test_cols(const TypeTraits& tt) {
  const int64_t b = std::max(dtype_layout(tt.type).block_size, dtype_layout(tt.vec_dot_type).block_size);
  if (b == 1) return 101;
  return b * (b >= 256 ? 3 : 19);
}

// Largest error of quantizing element k of an activation row to `vdt` (round to nearest).
std::vector<double> activation_error_bound(DType vdt, const float* x, int64_t cols) {
  std::vector<double> e(cols, 0.0);
  const int64_t bs = dtype_layout(vdt).block_size;
  for (int64_t b = 0; b < cols; b += bs) {
    double amax = 0;
    for (int64_t k = b; k < b + bs; ++k) amax = std::max(amax, std::abs(static_cast<double>(x[k])));
    for (int64_t k = b; k < b + bs; ++k) {
      switch (vdt) {
        case DType::kF32: e[k] = 0; break;
        case DType::kF16: e[k] = std::abs(x[k]) * std::ldexp(1.0, -11) + 6e-8; break;
        case DType::kBF16: e[k] = std::abs(x[k]) * std::ldexp(1.0, -8) + 1e-38; break;
        default: e[k] = amax / 127.0 * 0.5 * (1 + 1e-3) + 1e-12; break;  // 8-bit codes, scale amax/127
      }
    }
  }
  return e;
}

void check_matmul(const TypeTraits& tt, int64_t rows, int64_t n, bool with_bias, std::mt19937& rng) {
  const int64_t cols = test_cols(tt);
  TestWeight tw = make_weight(tt, rows, cols, rng);
  const auto x = random_floats(rng, n * cols);
  const auto bias = random_floats(rng, rows);

  // Activations as the kernels see them, through the reference quantizer of vec_dot_type.
  std::vector<float> xq(x.size());
  const TypeTraits* vt = type_traits(tt.vec_dot_type);
  if (tt.vec_dot != nullptr && vt != nullptr && tt.vec_dot_type != DType::kF32) {
    std::vector<uint8_t> buf(row_bytes(tt.vec_dot_type, cols));
    for (int64_t t = 0; t < n; ++t) {
      vt->from_float_ref(x.data() + t * cols, buf.data(), cols);
      vt->to_float_ref(buf.data(), xq.data() + t * cols, cols);
    }
  } else {
    xq = x;  // F32 activations, or the dequantize path that dots with the floats themselves
  }

  for_each_target_and_threads([&](Backend& be) {
    std::vector<float> y(n * rows, -777.f);
    be.matmul(tw.w, x.data(), n, y.data(), with_bias ? bias.data() : nullptr);
    for (int64_t t = 0; t < n; ++t) {
      const auto err = activation_error_bound(tt.vec_dot != nullptr ? tt.vec_dot_type : DType::kF32,
                                              x.data() + t * cols, cols);
      for (int64_t r = 0; r < rows; ++r) {
        const float* wr = tw.dequant.data() + r * cols;
        double ref_q = 0, ref_x = 0, mag = 0, bound = 0, extra = 0;
        for (int64_t k = 0; k < cols; ++k) {
          ref_q += static_cast<double>(wr[k]) * xq[t * cols + k];
          ref_x += static_cast<double>(wr[k]) * x[t * cols + k];
          mag += std::abs(static_cast<double>(wr[k]) * xq[t * cols + k]);
          bound += std::abs(static_cast<double>(wr[k])) * err[k];
        }
        // Q8_1 also carries s = d * sum(q) in fp16, which the Q4_1/Q5_1 dots use for the offset
        // term: allow its rounding (relative 2^-11) times the block's largest weight.
        if (tt.vec_dot != nullptr && tt.vec_dot_type == DType::kQ8_1) {
          for (int64_t b0 = 0; b0 < cols; b0 += 32) {
            double wmax = 0, sx = 0;
            for (int64_t k = b0; k < b0 + 32; ++k) {
              wmax = std::max(wmax, std::abs(static_cast<double>(wr[k])));
              sx += xq[t * cols + k];
            }
            extra += wmax * std::abs(sx) * std::ldexp(1.0, -11);
          }
        }
        const double b = with_bias ? bias[r] : 0.0;
        const double got = y[t * rows + r];
        // Same activations (rounded to vec_dot_type, or kept in float where the backend
        // expands the weights instead): only float accumulation order, and rare rounding ties
        // of the fast activation quantizer, may differ.
        const double tight = 1e-4 * mag + extra + 1e-5;
        EXPECT_TRUE(std::abs(got - (ref_q + b)) <= tight || std::abs(got - (ref_x + b)) <= tight)
            << dtype_name(tt.type) << " n " << n << " t " << t << " r " << r
            << ": got " << got << ", with rounded activations " << ref_q + b << ", with float activations "
            << ref_x + b << ", tolerance " << tight;
        // Original activations: within the quantization error bound of vec_dot_type.
        ASSERT_NEAR(got, ref_x + b, bound + tight)
            << dtype_name(tt.type) << " n " << n << " t " << t << " r " << r;
        if (::testing::Test::HasFailure()) return;
      }
    }
  });
}

class MatmulAllTypes : public ::testing::TestWithParam<const TypeTraits*> {};

TEST_P(MatmulAllTypes, MatchesDequantizedDot) {
  const TypeTraits& tt = *GetParam();
  if (tt.from_float_ref == nullptr || tt.to_float_ref == nullptr) GTEST_SKIP() << "no reference conversions";
  std::mt19937 rng(100 + static_cast<int>(tt.type));
  // n = 1 (decode, vec_dot), small batches (gemm_tile), batches on the float path (from 8 or 16
  // tokens), an odd batch over several activation panels.
  for (int64_t n : {1, 2, 5, 16, 70}) check_matmul(tt, 37, n, n % 2 == 1, rng);
  check_matmul(tt, 4, 3, true, rng);
}

std::string type_param_name(const ::testing::TestParamInfo<const TypeTraits*>& info) {
  return std::string(dtype_name(info.param->type));
}

INSTANTIATE_TEST_SUITE_P(Types, MatmulAllTypes, ::testing::ValuesIn(all_type_traits()), type_param_name);

// Row-invariant products (speculative verification): every row of a batch bitwise equal to the
// same row multiplied alone, for every type, batch size (below and on the float path) and SIMD
// target. The oracle is the backend's own one-token product, which the test above checks.
TEST_P(MatmulAllTypes, RowInvariantBatchEqualsOneTokenProductsBitwise) {
  const TypeTraits& tt = *GetParam();
  if (tt.from_float_ref == nullptr || tt.to_float_ref == nullptr) GTEST_SKIP() << "no reference conversions";
  std::mt19937 rng(300 + static_cast<int>(tt.type));
  const int64_t cols = test_cols(tt), rows = 37;
  const TestWeight tw = make_weight(tt, rows, cols, rng);
  for_each_target_and_threads([&](Backend& be) {
    for (int64_t n : {2, 4, 5, 9, 17}) {
      const auto x = random_floats(rng, n * cols);
      const auto bias = random_floats(rng, rows);
      std::vector<float> batch(static_cast<size_t>(n * rows)), one(static_cast<size_t>(rows));
      be.set_row_invariant(true);
      be.matmul(tw.w, x.data(), n, batch.data(), bias.data());
      be.set_row_invariant(false);
      for (int64_t t = 0; t < n; ++t) {
        be.matmul(tw.w, x.data() + t * cols, 1, one.data(), bias.data());
        ASSERT_EQ(0, std::memcmp(one.data(), batch.data() + t * rows, rows * sizeof(float)))
            << dtype_name(tt.type) << " n " << n << " row " << t;
      }
    }
  });
}

class GetRowsAllTypes : public ::testing::TestWithParam<const TypeTraits*> {};

TEST_P(GetRowsAllTypes, MatchesReferenceDequantize) {
  const TypeTraits& tt = *GetParam();
  if (tt.from_float_ref == nullptr || tt.to_float_ref == nullptr) GTEST_SKIP() << "no reference conversions";
  std::mt19937 rng(200 + static_cast<int>(tt.type));
  const int64_t rows = 29, cols = test_cols(tt);
  TestWeight tw = make_weight(tt, rows, cols, rng);
  for_each_target_and_threads([&](Backend& be) {
    for (int64_t n : {1, 4, 60}) {
      std::vector<int32_t> ids(n);
      for (auto& id : ids) id = std::uniform_int_distribution<int32_t>(0, rows - 1)(rng);
      std::vector<float> y(n * cols, -777.f);
      be.get_rows(tw.w, ids.data(), n, y.data());
      for (int64_t i = 0; i < n; ++i) {
        const float* ref = tw.dequant.data() + ids[i] * cols;
        double amax = 0;
        for (int64_t k = 0; k < cols; ++k) amax = std::max(amax, std::abs(static_cast<double>(ref[k])));
        for (int64_t k = 0; k < cols; ++k) {
          ASSERT_NEAR(y[i * cols + k], ref[k], 1e-6 * amax) << dtype_name(tt.type) << " id " << ids[i] << " k " << k;
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Types, GetRowsAllTypes, ::testing::ValuesIn(all_type_traits()), type_param_name);

// A per-tensor scale (NVFP4's global scale) multiplies every product before the bias is added,
// and every looked-up row, on every path (one token, small batches, the float path).
TEST(MatmulScaled, ScaleMultipliesProductsBeforeTheBiasAndLookedUpRows) {
  const TypeTraits& tt = *type_traits(DType::kNVFP4);
  std::mt19937 rng(300);
  const int64_t rows = 21, cols = test_cols(tt);
  TestWeight tw = make_weight(tt, rows, cols, rng);
  const auto bias = random_floats(rng, rows);
  const float scale = 0.0371f;
  WeightTensor scaled = tw.w;
  scaled.scale = scale;
  for_each_target_and_threads([&](Backend& be) {
    for (int64_t n : {1, 3, 16}) {
      const auto x = random_floats(rng, n * cols);
      std::vector<float> plain(n * rows), got(n * rows);
      be.matmul(tw.w, x.data(), n, plain.data(), nullptr);
      be.matmul(scaled, x.data(), n, got.data(), bias.data());
      for (int64_t i = 0; i < n * rows; ++i) {
        const double want = static_cast<double>(plain[i]) * scale + bias[i % rows];
        ASSERT_NEAR(got[i], want, 1e-6 * (std::abs(want) + 1)) << "n " << n << " i " << i;
      }
    }
    const int32_t ids[2] = {4, 17};
    std::vector<float> plain(2 * cols), got(2 * cols);
    be.get_rows(tw.w, ids, 2, plain.data());
    be.get_rows(scaled, ids, 2, got.data());
    for (int64_t k = 0; k < 2 * cols; ++k) ASSERT_EQ(got[k], plain[k] * scale) << k;
  });
}

// Q4_0 repacked in 8-row groups (backend/cpu/repack.h) against the same rows in GGUF's layout,
// through matmul (one token, small batches, the prefill paths) and get_rows, on every target (the
// layout is read everywhere; AVX2 and AVX-512 choose it at load).
TEST(MatmulQ4_0x8, MatchesTheRowLayout) {
  std::mt19937 rng(77);
  const TypeTraits& tt = *type_traits(DType::kQ4_0);
  const int64_t rows = 40, cols = 32 * 19;
  const size_t rb = static_cast<size_t>(row_bytes(DType::kQ4_0, cols));
  std::vector<uint8_t> plain(rb * rows);
  std::vector<float> dequant(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const auto src = random_floats(rng, cols);
    tt.from_float_ref(src.data(), plain.data() + r * rb, cols);
    tt.to_float_ref(plain.data() + r * rb, dequant.data() + r * cols, cols);
  }
  WeightTensor w{DType::kQ4_0, cols, rows, rb, plain.data()};
  std::vector<uint8_t> packed = plain;
  WeightTensor wp = w;
  EXPECT_EQ(cpu::repack_in_place(wp, packed.data(), WeightLayout::kQ4_0x8), rb * rows);
  ASSERT_EQ(wp.layout, WeightLayout::kQ4_0x8);
  EXPECT_NE(packed, plain);
  for_each_target_and_threads([&](Backend& be) {
    for (int64_t n : {1, 3, 16, 37}) {
      const auto x = random_floats(rng, n * cols);
      const auto bias = random_floats(rng, rows);
      std::vector<float> want(n * rows), got(n * rows, -777.f);
      be.matmul(w, x.data(), n, want.data(), bias.data());
      be.matmul(wp, x.data(), n, got.data(), bias.data());
      // Each layout may take a path that rounds the activations to 8 bits per block of 32 (Q8_0,
      // F16 scale) before integer dots, and which path a batch takes depends on the target (AVX3
      // sends 16 tokens of the row layout to its integer panels, the 8-row layout to the float
      // path). So both are held to the float64 product with the bound of that rounding: half a
      // step (amax/127/2) per activation times |w|, plus the F16 scale's 2^-11 relative, plus
      // float32 summation (1e-4 of the magnitude).
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
          double mag = 0, exact = bias[r], qerr = 0;
          for (int64_t b0 = 0; b0 < cols; b0 += 32) {
            double amax = 0, wsum = 0;
            for (int64_t k = b0; k < b0 + 32; ++k) {
              amax = std::max(amax, std::abs(static_cast<double>(x[t * cols + k])));
              wsum += std::abs(static_cast<double>(dequant[r * cols + k]));
            }
            qerr += wsum * amax / 254.0;
          }
          for (int64_t k = 0; k < cols; ++k) {
            const double p = static_cast<double>(dequant[r * cols + k]) * x[t * cols + k];
            mag += std::abs(p);
            exact += p;
          }
          const double bound = qerr + (1e-4 + 1.0 / 2048) * mag + 1e-5;
          ASSERT_NEAR(want[t * rows + r], exact, bound) << "row layout, n " << n << " t " << t << " r " << r;
          ASSERT_NEAR(got[t * rows + r], exact, bound) << "8-row layout, n " << n << " t " << t << " r " << r;
        }
      }
      // Where prefill runs the int8 panels, both layouts reach the same panels: equal bits.
      if (n >= 16 && quant::fast::q4_0_panels_are_fast()) {
        ASSERT_EQ(got, want) << "n " << n;
      }
    }
    std::vector<int32_t> ids = {0, 7, 8, 39, 21};
    std::vector<float> y(ids.size() * cols, -777.f);
    be.get_rows(wp, ids.data(), static_cast<int64_t>(ids.size()), y.data());
    for (size_t i = 0; i < ids.size(); ++i) {
      for (int64_t k = 0; k < cols; ++k) ASSERT_EQ(y[i * cols + k], dequant[ids[i] * cols + k]) << "id " << ids[i];
    }
  });
}

TEST(Matmul, ZeroTokensIsANoOp) {
  std::mt19937 rng(5);
  TestWeight tw = make_weight(*type_traits(DType::kF32), 3, 8, rng);
  auto be = backend_with(2);
  float y = 42.f;
  be->matmul(tw.w, nullptr, 0, &y, nullptr);
  EXPECT_EQ(y, 42.f);
}

}  // namespace
}  // namespace frugal
