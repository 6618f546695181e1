// The fast (SIMD) kernels against the scalar references, on every SIMD target compiled in and
// supported by this CPU: dequantization and activation quantization exactly, dot products and
// gemm tiles within a tight bound of the reference dot, and the reference dot within a stated
// bound of a float64 dot of the dequantized rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "frugal/quant/blocks.h"
#include "frugal/quant/reference.h"
#include "frugal/quant/simd_kernels.h"
#include "frugal/quant/simd_targets.h"
#include "quant/quant_test_util.h"

namespace frugal {
namespace {

using quant_test::abs_dot_f64;
using quant_test::dequantize;
using quant_test::dot_f64;
using quant_test::quantize;
using quant_test::random_row;

// Row lengths: odd multiples of the block size; odd lengths for the float types (vector tails).
std::vector<int64_t> lengths(const TypeTraits& t) {
  if (!t.quantized) return {7, 45, 333};
  return {quant_test::row_length(t, 1), quant_test::row_length(t, 3), quant_test::row_length(t, 7)};
}

std::string name(DType t) { return std::string(dtype_name(t)); }

// Relative error bound of fast vs reference dot (both sum the same exact integer block sums
// or float products in a different order): a few float ulps of sum|x*y| per block.
double kernel_tolerance(int64_t n) { return 4e-7 * std::sqrt(static_cast<double>(n)) + 1e-6; }

// Reference dot vs float64 dot of the dequantized rows, relative to sum|x*y|. Q8_1 carries its
// block sum as fp16 (2^-11 relative), which Q4_1/Q5_1 dots use for the offset term.
double dequant_tolerance(const TypeTraits& t) {
  return t.vec_dot_type == DType::kQ8_1 ? 2e-3 : 2e-5;
}

class QuantKernels : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override { quant::force_simd_target(GetParam()); }
  void TearDown() override { quant::force_simd_target(0); }
};

TEST_P(QuantKernels, DispatchesToTheForcedTarget) {
  EXPECT_EQ(std::string(simd_target_name()), quant::simd_target_label(GetParam()));
}

TEST_P(QuantKernels, ToFloatMatchesReferenceExactly) {
  for (const TypeTraits* t : all_type_traits()) {
    SCOPED_TRACE(name(t->type));
    for (const int64_t n : lengths(*t)) {
      for (uint32_t seed = 1; seed <= 2; ++seed) {
        const auto q = quantize(t->type, t->from_float_ref, random_row(n, seed * 31 + n));
        const auto want = dequantize(t->to_float_ref, q, n);
        const auto got = dequantize(t->to_float, q, n);
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * n)) << "n=" << n;
      }
    }
  }
}

TEST_P(QuantKernels, FromFloatMatchesReferenceExactly) {
  for (const TypeTraits* t : all_type_traits()) {
    SCOPED_TRACE(name(t->type));
    if (t->from_float == t->from_float_ref) continue;
    for (const int64_t n : lengths(*t)) {
      for (uint32_t seed = 1; seed <= 3; ++seed) {
        std::vector<float> x = random_row(n, seed * 17 + n);
        if (!t->quantized && n > 6) {  // values at the edges of the 16-bit formats
          x[0] = 6.0e-8f;              // fp16 subnormal
          x[1] = 65520.f;              // rounds to fp16 infinity
          x[2] = -0.f;
          x[3] = 1.f + 1.f / 2048;  // fp16 tie
          x[4] = 1.00390625f;       // bf16 tie
          x[5] = t->type == DType::kBF16 ? std::numeric_limits<float>::quiet_NaN() : 3.f;
        }
        const auto want = quantize(t->type, t->from_float_ref, x);
        const auto got = quantize(t->type, t->from_float, x);
        ASSERT_EQ(want, got) << "n=" << n << " seed=" << seed;
      }
    }
  }
}

TEST_P(QuantKernels, VecDotMatchesReference) {
  for (const TypeTraits* t : all_type_traits()) {
    if (!t->vec_dot_ref) continue;
    SCOPED_TRACE(name(t->type));
    const TypeTraits* ty = type_traits(t->vec_dot_type);
    ASSERT_NE(ty, nullptr);
    for (const int64_t n : lengths(*t)) {
      for (uint32_t seed = 1; seed <= 3; ++seed) {
        const auto qx = quantize(t->type, t->from_float_ref, random_row(n, seed * 7 + n));
        const auto qy = quantize(ty->type, ty->from_float_ref, random_row(n, seed * 13 + n + 1));
        const auto dx = dequantize(t->to_float_ref, qx, n);
        const auto dy = dequantize(ty->to_float_ref, qy, n);
        const double exact = dot_f64(dx, dy);
        const double scale = abs_dot_f64(dx, dy) + 1e-30;
        float ref = 0.f;
        float fast = 0.f;
        t->vec_dot_ref(n, &ref, qx.data(), qy.data());
        t->vec_dot(n, &fast, qx.data(), qy.data());
        EXPECT_LE(std::fabs(ref - exact) / scale, dequant_tolerance(*t)) << "n=" << n;
        EXPECT_LE(std::fabs(fast - ref) / scale, kernel_tolerance(n))
            << "n=" << n << " ref=" << ref << " fast=" << fast;
      }
    }
  }
}

// The Q8 group layout holds Q8_0's codes and scales, so the Q4_0 dot against it must match the
// Q4_0 x Q8_0 reference dot; lengths cover whole groups, partial groups and odd block counts.
TEST_P(QuantKernels, Q4_0GroupDotMatchesReference) {
  const TypeTraits* t = type_traits(DType::kQ4_0);
  for (const int64_t blocks : {1, 3, 7, 8, 9, 28, 64, 71}) {
    const int64_t n = blocks * 32;
    for (uint32_t seed = 1; seed <= 3; ++seed) {
      const auto qx = quantize(DType::kQ4_0, t->from_float_ref, random_row(n, seed * 5 + n));
      const auto fy = random_row(n, seed * 11 + n + 3);
      const auto qy = quantize(DType::kQ8_0, type_traits(DType::kQ8_0)->from_float_ref, fy);
      std::vector<uint8_t> gy(static_cast<size_t>(quant::fast::q8_group_bytes(n)));
      quant::fast::from_float_q8_group(fy.data(), gy.data(), n);
      const auto dx = dequantize(t->to_float_ref, qx, n);
      const auto dy = dequantize(type_traits(DType::kQ8_0)->to_float_ref, qy, n);
      const double scale = abs_dot_f64(dx, dy) + 1e-30;
      float ref = 0.f;
      float fast = 0.f;
      quant::vec_dot_q4_0_q8_0_ref(n, &ref, qx.data(), qy.data());
      quant::fast::vec_dot_q4_0_q8_group(n, &fast, qx.data(), gy.data());
      EXPECT_LE(std::fabs(fast - ref) / scale, kernel_tolerance(n))
          << "n=" << n << " ref=" << ref << " fast=" << fast;
    }
  }
}

// The 8-row group layout holds exactly the bytes of its rows: unpacking a row (the reference) and
// the dispatched group expansion both equal the Q4_0 reference dequantization of the original.
TEST_P(QuantKernels, Q4_0x8LayoutRoundTripsExactly) {
  const TypeTraits* t = type_traits(DType::kQ4_0);
  for (const int64_t blocks : {1, 3, 9}) {
    const int64_t n = blocks * 32;
    std::vector<uint8_t> rows;
    std::vector<float> want;
    for (int r = 0; r < 8; ++r) {
      const auto q = quantize(DType::kQ4_0, t->from_float_ref, random_row(n, 31 * r + n));
      rows.insert(rows.end(), q.begin(), q.end());
      const auto d = dequantize(t->to_float_ref, q, n);
      want.insert(want.end(), d.begin(), d.end());
    }
    const std::vector<uint8_t> before = rows;
    quant::fast::repack_q4_0x8(rows.data(), n);
    // Unpacking gives back the bytes of the 8 rows (prefill on AVX-512 reads groups that way).
    std::vector<uint8_t> back(rows.size(), 0xAB);
    quant::fast::unpack_q4_0x8(rows.data(), 1, n, back.data());
    ASSERT_EQ(back, before) << blocks << " blocks";
    std::vector<float> one(static_cast<size_t>(n));
    std::vector<float> all(static_cast<size_t>(8 * n), -1.f);
    quant::fast::to_float_q4_0x8(rows.data(), n, all.data(), n);
    for (int r = 0; r < 8; ++r) {
      quant::fast::to_float_q4_0x8_row(rows.data(), r, n, one.data());
      for (int64_t k = 0; k < n; ++k) {
        ASSERT_EQ(one[k], want[r * n + k]) << "row " << r << " k " << k;
        ASSERT_EQ(all[r * n + k], want[r * n + k]) << "row " << r << " k " << k;
      }
    }
  }
}

// 8-row groups against Q8 group activations: each row's result is the Q4_0 x Q8_0 reference dot
// of the row as it was before repacking; several groups, whole and partial activation groups.
TEST_P(QuantKernels, Q4_0x8GemvMatchesReference) {
  const TypeTraits* t = type_traits(DType::kQ4_0);
  for (const int64_t blocks : {1, 2, 3, 7, 8, 9, 28, 71}) {
    const int64_t n = blocks * 32;
    for (const int64_t groups : {1, 3}) {
      const uint32_t seed = static_cast<uint32_t>(blocks * 7 + groups);
      std::vector<uint8_t> w;
      for (int64_t r = 0; r < 8 * groups; ++r) {
        const auto q = quantize(DType::kQ4_0, t->from_float_ref, random_row(n, seed * 13 + static_cast<uint32_t>(r)));
        w.insert(w.end(), q.begin(), q.end());
      }
      const std::vector<uint8_t> orig = w;
      const size_t rb = w.size() / static_cast<size_t>(8 * groups);
      for (int64_t g = 0; g < groups; ++g) quant::fast::repack_q4_0x8(w.data() + g * 8 * rb, n);
      const auto fy = random_row(n, seed + 1000);
      const auto qy = quantize(DType::kQ8_0, type_traits(DType::kQ8_0)->from_float_ref, fy);
      std::vector<uint8_t> gy(static_cast<size_t>(quant::fast::q8_group_bytes(n)));
      quant::fast::from_float_q8_group(fy.data(), gy.data(), n);
      std::vector<float> y(static_cast<size_t>(8 * groups), -777.f);
      quant::fast::gemv_q4_0x8(n, w.data(), groups, gy.data(), y.data());
      const auto dy = dequantize(type_traits(DType::kQ8_0)->to_float_ref, qy, n);
      for (int64_t r = 0; r < 8 * groups; ++r) {
        const std::vector<uint8_t> row(orig.begin() + r * rb, orig.begin() + (r + 1) * rb);
        float ref = 0.f;
        quant::vec_dot_q4_0_q8_0_ref(n, &ref, row.data(), qy.data());
        const double scale = abs_dot_f64(dequantize(t->to_float_ref, row, n), dy) + 1e-30;
        EXPECT_LE(std::fabs(y[r] - ref) / scale, kernel_tolerance(n))
            << "n=" << n << " row " << r << " ref=" << ref << " fast=" << y[r];
      }
    }
  }
}

// Packed Q4_0 panels against Q8 group activations: every (row, activation row) of shapes that
// leave partial panels (rows not a multiple of 16), partial activation tiles and partial groups.
TEST_P(QuantKernels, Q4_0PanelGemmMatchesReference) {
  const TypeTraits* t = type_traits(DType::kQ4_0);
  const TypeTraits* t8 = type_traits(DType::kQ8_0);
  struct Shape {
    int64_t blocks, rows, cols;
  };
  for (const Shape sh : {Shape{1, 5, 1}, Shape{9, 37, 11}, Shape{28, 16, 8}, Shape{8, 33, 17}}) {
    const int64_t n = sh.blocks * 32;
    const size_t bx = static_cast<size_t>(row_bytes(DType::kQ4_0, n));
    const size_t by = static_cast<size_t>(row_bytes(DType::kQ8_0, n));
    const size_t bg = static_cast<size_t>(quant::fast::q8_group_bytes(n));
    std::vector<uint8_t> xs;
    std::vector<uint8_t> ys;
    std::vector<uint8_t> gs(bg * static_cast<size_t>(sh.cols));
    for (int64_t r = 0; r < sh.rows; ++r) {
      const auto q = quantize(DType::kQ4_0, t->from_float_ref, random_row(n, 300 + r + n));
      xs.insert(xs.end(), q.begin(), q.end());
    }
    for (int64_t c = 0; c < sh.cols; ++c) {
      const auto f = random_row(n, 700 + c + n);
      const auto q = quantize(DType::kQ8_0, t8->from_float_ref, f);
      ys.insert(ys.end(), q.begin(), q.end());
      quant::fast::from_float_q8_group(f.data(), gs.data() + c * bg, n);
    }
    std::vector<uint8_t> panels(static_cast<size_t>(quant::fast::q4_0_panels_bytes(sh.rows, n)));
    quant::fast::pack_q4_0_panels(xs.data(), bx, sh.rows, n, panels.data());
    const size_t ldy = static_cast<size_t>(sh.rows) + 3;
    std::vector<float> y(ldy * static_cast<size_t>(sh.cols), -1.f);
    quant::fast::gemm_q4_0_panels(n, panels.data(), sh.rows, gs.data(), bg, sh.cols, y.data(), ldy);
    for (int64_t c = 0; c < sh.cols; ++c) {
      const std::vector<uint8_t> qy(ys.begin() + c * by, ys.begin() + (c + 1) * by);
      const auto dy = dequantize(t8->to_float_ref, qy, n);
      for (int64_t r = 0; r < sh.rows; ++r) {
        const std::vector<uint8_t> qx(xs.begin() + r * bx, xs.begin() + (r + 1) * bx);
        const double scale = abs_dot_f64(dequantize(t->to_float_ref, qx, n), dy) + 1e-30;
        float ref = 0.f;
        quant::vec_dot_q4_0_q8_0_ref(n, &ref, qx.data(), qy.data());
        const float got = y[c * ldy + r];
        ASSERT_LE(std::fabs(got - ref) / scale, kernel_tolerance(n))
            << "n=" << n << " r=" << r << " c=" << c << " ref=" << ref << " got=" << got;
      }
      // Rows past the last are left alone.
      for (size_t r = static_cast<size_t>(sh.rows); r < ldy; ++r) ASSERT_EQ(y[c * ldy + r], -1.f);
    }
  }
}

// Packed Q8_0 panels (codes stored plus 128) against Q8 group activations, on fresh random rows
// (the seed is printed on failure): the same shapes as the Q4_0 panels, every (row, activation
// row) against the Q8_0 x Q8_0 reference dot.
TEST_P(QuantKernels, Q8_0PanelGemmMatchesReference) {
  const TypeTraits* t8 = type_traits(DType::kQ8_0);
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  struct Shape {
    int64_t blocks, rows, cols;
  };
  for (const Shape sh : {Shape{1, 5, 1}, Shape{9, 37, 11}, Shape{28, 16, 8}, Shape{8, 33, 17}}) {
    const int64_t n = sh.blocks * 32;
    const size_t bx = static_cast<size_t>(row_bytes(DType::kQ8_0, n));
    const size_t bg = static_cast<size_t>(quant::fast::q8_group_bytes(n));
    std::vector<uint8_t> xs, ys, gs(bg * static_cast<size_t>(sh.cols));
    for (int64_t r = 0; r < sh.rows; ++r) {
      const auto q = quantize(DType::kQ8_0, t8->from_float_ref, random_row(n, seed + static_cast<uint32_t>(300 + r + n)));
      xs.insert(xs.end(), q.begin(), q.end());
    }
    // One row at the extremes of the codes (-127 and 127 in every block).
    for (int64_t b = 0; b < sh.blocks; ++b) {
      auto* blk = reinterpret_cast<quant::BlockQ8_0*>(xs.data()) + b;
      for (int j = 0; j < 32; ++j) blk->qs[j] = static_cast<int8_t>(j % 2 == 0 ? 127 : -127);
    }
    for (int64_t c = 0; c < sh.cols; ++c) {
      const auto f = random_row(n, seed + static_cast<uint32_t>(700 + c + n));
      const auto q = quantize(DType::kQ8_0, t8->from_float_ref, f);
      ys.insert(ys.end(), q.begin(), q.end());
      quant::fast::from_float_q8_group(f.data(), gs.data() + c * bg, n);
    }
    std::vector<uint8_t> panels(static_cast<size_t>(quant::fast::q4_0_panels_bytes(sh.rows, n)));
    quant::fast::pack_q8_0_panels(xs.data(), bx, sh.rows, n, panels.data());
    const size_t ldy = static_cast<size_t>(sh.rows) + 3;
    std::vector<float> y(ldy * static_cast<size_t>(sh.cols), -1.f);
    quant::fast::gemm_q8_0_panels(n, panels.data(), sh.rows, gs.data(), bg, sh.cols, y.data(), ldy);
    for (int64_t c = 0; c < sh.cols; ++c) {
      const std::vector<uint8_t> qy(ys.begin() + c * bx, ys.begin() + (c + 1) * bx);
      const auto dy = dequantize(t8->to_float_ref, qy, n);
      for (int64_t r = 0; r < sh.rows; ++r) {
        const std::vector<uint8_t> qx(xs.begin() + r * bx, xs.begin() + (r + 1) * bx);
        const double scale = abs_dot_f64(dequantize(t8->to_float_ref, qx, n), dy) + 1e-30;
        float ref = 0.f;
        t8->vec_dot_ref(n, &ref, qx.data(), qy.data());
        const float got = y[c * ldy + r];
        ASSERT_LE(std::fabs(got - ref) / scale, kernel_tolerance(n))
            << "n=" << n << " r=" << r << " c=" << c << " ref=" << ref << " got=" << got;
      }
      for (size_t r = static_cast<size_t>(sh.rows); r < ldy; ++r) ASSERT_EQ(y[c * ldy + r], -1.f);
    }
  }
}

TEST_P(QuantKernels, GemmTileMatchesReferenceForEveryShape) {
  for (const TypeTraits* t : all_type_traits()) {
    if (!t->gemm_tile) continue;
    SCOPED_TRACE(name(t->type));
    const TypeTraits* ty = type_traits(t->vec_dot_type);
    const int64_t n = lengths(*t)[1];
    const size_t bx = static_cast<size_t>(row_bytes(t->type, n));
    const size_t by = static_cast<size_t>(row_bytes(ty->type, n));
    // One row more than the preferred tile in each direction: larger shapes must be split.
    const int max_rows = t->tile_rows + 1;
    const int max_cols = t->tile_cols + 1;
    std::vector<uint8_t> xs;
    std::vector<uint8_t> ys;
    for (int r = 0; r < max_rows; ++r) {
      const auto q = quantize(t->type, t->from_float_ref, random_row(n, 1000 + r));
      xs.insert(xs.end(), q.begin(), q.end());
    }
    for (int c = 0; c < max_cols; ++c) {
      const auto q = quantize(ty->type, ty->from_float_ref, random_row(n, 2000 + c));
      ys.insert(ys.end(), q.begin(), q.end());
    }
    // Reference dots and their magnitudes, once per (row, column).
    std::vector<float> ref(static_cast<size_t>(max_rows * max_cols));
    std::vector<double> scale(ref.size());
    for (int r = 0; r < max_rows; ++r) {
      const auto dx =
          dequantize(t->to_float_ref, {xs.begin() + r * bx, xs.begin() + (r + 1) * bx}, n);
      for (int c = 0; c < max_cols; ++c) {
        const auto dy =
            dequantize(ty->to_float_ref, {ys.begin() + c * by, ys.begin() + (c + 1) * by}, n);
        t->vec_dot_ref(n, &ref[r * max_cols + c], xs.data() + r * bx, ys.data() + c * by);
        scale[r * max_cols + c] = abs_dot_f64(dx, dy) + 1e-30;
      }
    }
    for (int nrx = 1; nrx <= max_rows; ++nrx) {
      for (int nry = 1; nry <= max_cols; ++nry) {
        const size_t ldc = static_cast<size_t>(nrx) + 3;
        std::vector<float> s(ldc * static_cast<size_t>(nry), -12345.f);
        t->gemm_tile(n, s.data(), ldc, xs.data(), bx, nrx, ys.data(), by, nry);
        for (int c = 0; c < nry; ++c) {
          for (int r = 0; r < static_cast<int>(ldc); ++r) {
            const float got = s[static_cast<size_t>(c) * ldc + r];
            if (r >= nrx) {
              ASSERT_EQ(got, -12345.f)
                  << "tile " << nrx << "x" << nry << " wrote outside at r=" << r;
              continue;
            }
            const float want = ref[r * max_cols + c];
            ASSERT_LE(std::fabs(got - want) / scale[r * max_cols + c], kernel_tolerance(n))
                << "tile " << nrx << "x" << nry << " r=" << r << " c=" << c << " got " << got
                << " want " << want;
          }
        }
      }
    }
  }
}

std::string target_label(const ::testing::TestParamInfo<int64_t>& info) {
  return quant::simd_target_label(info.param);
}

INSTANTIATE_TEST_SUITE_P(AllTargets, QuantKernels,
                         ::testing::ValuesIn(quant::available_simd_targets()), target_label);

}  // namespace
}  // namespace frugal
