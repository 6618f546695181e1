// FluxBin on the GPU (backend/cuda/fluxbin.cu) against the format's scalar reference
// (quant::fluxbin::gemv_reference, dequantize_row) on fresh random matrices of every byte: sign
// bits, row scales of either sign, column scales, salient indices, scales and codes. Shapes cover
// a group count that is not a multiple of the kernel's 4-group chunks (padding), one row, rows
// that end mid-block, and salient counts of 0, 2, 8 and 32. The seed is printed on failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda/gpu_skip.h"
#include "frugal/backend/cuda/cuda_backend.h"
#include "frugal/core/half.h"
#include "frugal/quant/fluxbin.h"

namespace frugal {
namespace {

namespace fb = quant::fluxbin;

struct RandomFluxBin {
  int64_t rows = 0, cols = 0;
  int salient = 0;
  std::vector<uint8_t> blocks;
  std::vector<uint16_t> col_scales;
  std::vector<uint8_t> salient_idx, salient_vals;

  fb::View view() const {
    return {rows, cols, salient, blocks.data(), col_scales.data(), salient > 0 ? salient_idx.data() : nullptr,
            salient > 0 ? salient_vals.data() : nullptr};
  }
  WeightTensor weight() const {
    WeightTensor w;
    w.type = DType::kFLUXBIN;
    w.rows = rows;
    w.cols = cols;
    w.row_stride = static_cast<size_t>(cols / fb::kGroup * fb::kBlockBytes);
    w.data = blocks.data();
    w.fluxbin.col_scales = col_scales.data();
    w.fluxbin.salient = salient;
    w.fluxbin.salient_idx = salient > 0 ? salient_idx.data() : nullptr;
    w.fluxbin.salient_vals = salient > 0 ? salient_vals.data() : nullptr;
    return w;
  }
};

// A magnitude in [lo, hi) on a log scale, with a random sign when `sign`, as F16 bits.
uint16_t random_half(std::mt19937& rng, float lo, float hi, bool sign) {
  std::uniform_real_distribution<float> e(std::log(lo), std::log(hi));
  float v = std::exp(e(rng));
  if (sign && (rng() & 1u) != 0) v = -v;
  return f32_to_fp16(v);
}

RandomFluxBin random_fluxbin(int64_t rows, int64_t cols, int salient, std::mt19937& rng) {
  RandomFluxBin m;
  m.rows = rows;
  m.cols = cols;
  m.salient = salient;
  const int64_t groups = cols / fb::kGroup;
  m.blocks.resize(static_cast<size_t>(rows * groups * fb::kBlockBytes));
  for (int64_t b = 0; b < rows * groups; ++b) {
    uint8_t* blk = m.blocks.data() + b * fb::kBlockBytes;
    for (int i = 0; i < 2 * fb::kSignBytes; ++i) blk[i] = static_cast<uint8_t>(rng());
    for (int k = 0; k < 2; ++k) {
      const uint16_t r = random_half(rng, 1e-3f, 2.f, true);
      blk[2 * fb::kSignBytes + 2 * k] = static_cast<uint8_t>(r & 0xFF);
      blk[2 * fb::kSignBytes + 2 * k + 1] = static_cast<uint8_t>(r >> 8);
    }
  }
  m.col_scales.resize(static_cast<size_t>(2 * cols));
  for (uint16_t& c : m.col_scales) c = random_half(rng, 0.05f, 3.f, true);
  if (salient > 0) {
    std::vector<int> cols128(fb::kGroup);
    for (int j = 0; j < fb::kGroup; ++j) cols128[static_cast<size_t>(j)] = j;
    for (int64_t g = 0; g < groups; ++g) {
      std::shuffle(cols128.begin(), cols128.end(), rng);
      std::vector<int> pick(cols128.begin(), cols128.begin() + salient);
      std::sort(pick.begin(), pick.end());
      for (int e = 0; e < salient; ++e) m.salient_idx.push_back(static_cast<uint8_t>(pick[static_cast<size_t>(e)]));
    }
    const int64_t srb = fb::salient_row_bytes(salient);
    m.salient_vals.resize(static_cast<size_t>(rows * groups * srb));
    for (int64_t b = 0; b < rows * groups; ++b) {
      uint8_t* p = m.salient_vals.data() + b * srb;
      const uint16_t s = random_half(rng, 1e-2f, 1.f, false);
      p[0] = static_cast<uint8_t>(s & 0xFF);
      p[1] = static_cast<uint8_t>(s >> 8);
      for (int64_t i = 2; i < srb; ++i) p[i] = static_cast<uint8_t>(rng());
    }
  }
  return m;
}

std::vector<float> random_input(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = normal(rng);
  return x;
}

// sum_j |W'[o, j] x_j| per row: every term's size, the scale of the float rounding of the sum.
std::vector<double> row_bounds(const fb::View& v, const float* x) {
  std::vector<double> b(static_cast<size_t>(v.rows));
  std::vector<float> row(static_cast<size_t>(v.cols));
  for (int64_t o = 0; o < v.rows; ++o) {
    fb::dequantize_row(v, o, row.data());
    double s = 0;
    for (int64_t j = 0; j < v.cols; ++j) s += std::fabs(static_cast<double>(row[static_cast<size_t>(j)]) * x[j]);
    b[static_cast<size_t>(o)] = s;
  }
  return b;
}

struct Shape {
  int64_t rows, cols;
  int salient;
};
const Shape kShapes[] = {{1, 128, 0},   {7, 384, 8},   {33, 512, 0},  {300, 1152, 8},
                         {64, 640, 2},  {45, 256, 32}, {130, 4096, 8}, {17, 896, 0}};

// The GEMV (1-8 tokens, float activations) within 1e-5 of the row bound: both sides add the same
// terms in float or better, so the difference is rounding, which stays far below that (a wrong
// sign, scale, nibble or salient column moves a row by a whole term, 1e-2 of the bound or more).
// 12 tokens go through F16 dequantization and cuBLAS (F16 operands): 2e-3 of the bound.
TEST(CudaFluxBin, ProductsMatchReferenceOnRandomMatrices) {
  SKIP_WITHOUT_GPU();
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  // Every block shape of the GEMV (rows per warp and warps per block change which rows a block
  // builds tables for, how many table inputs each thread loads, and who stores which row).
  // The default (8x4) last, so that the tests after this one run on it.
  for (const char* block : {"8x2", "16x2", "16x4", "8x4"}) {
    ASSERT_TRUE(cuda::set_fluxbin_gemv_shape(block).ok());
    SCOPED_TRACE(std::string("block shape ") + block);
    for (const Shape& s : kShapes) {
      const RandomFluxBin m = random_fluxbin(s.rows, s.cols, s.salient, rng);
      const fb::View v = m.view();
      const WeightTensor w = m.weight();
      for (int n : {1, 2, 3, 8, 12}) {
        if (n == 12 && std::string(block) != "8x4") continue;  // cuBLAS: not the GEMV
        SCOPED_TRACE(std::to_string(s.rows) + " x " + std::to_string(s.cols) + " salient " + std::to_string(s.salient) +
                     ", " + std::to_string(n) + " tokens");
        const std::vector<float> x = random_input(n * s.cols, rng);
        for (bool accumulate : {false, true}) {
          std::vector<float> y0 = random_input(n * s.rows, rng);
          std::vector<float> y = y0;
          const Status st = cuda::matmul_on_device(w, x.data(), n, y.data(), false, accumulate);
          ASSERT_TRUE(st.ok()) << st.to_string();
          const double tol = n <= 8 ? 1e-5 : 2e-3;
          double worst = 0;
          for (int t = 0; t < n; ++t) {
            const float* xt = x.data() + t * s.cols;
            std::vector<float> want(static_cast<size_t>(s.rows));
            fb::gemv_reference(v, xt, want.data(), 0, s.rows);
            const std::vector<double> bound = row_bounds(v, xt);
            for (int64_t o = 0; o < s.rows; ++o) {
              const size_t i = static_cast<size_t>(t * s.rows + o);
              const double expect = want[static_cast<size_t>(o)] + (accumulate ? y0[i] : 0.0);
              const double err = std::fabs(y[i] - expect);
              const double lim = tol * bound[static_cast<size_t>(o)] + (accumulate ? 1e-6 * std::fabs(y0[i]) : 0.0) + 1e-30;
              worst = std::max(worst, err / lim);
              ASSERT_LE(err, lim) << "token " << t << " row " << o << ": " << y[i] << " vs " << expect
                                  << (accumulate ? " (accumulated)" : "");
            }
          }
          std::printf("fluxbin %-4s %4lld x %4lld S=%2d n=%2d%s: worst error %.3f of the bound\n", block,
                      static_cast<long long>(s.rows), static_cast<long long>(s.cols), s.salient, n,
                      accumulate ? " acc" : "    ", worst);
        }
      }
    }
  }
  EXPECT_FALSE(cuda::set_fluxbin_gemv_shape("32x1").ok());
}

// Embedding rows: the reference's arithmetic in its order, so equal up to a possible fused
// multiply-add in the host build of the reference (1e-6 relative).
TEST(CudaFluxBin, RowsMatchDequantizeRow) {
  SKIP_WITHOUT_GPU();
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (const Shape& s : kShapes) {
    const RandomFluxBin m = random_fluxbin(s.rows, s.cols, s.salient, rng);
    std::vector<int32_t> ids = {0, static_cast<int32_t>(s.rows - 1)};
    for (int i = 0; i < 5; ++i) ids.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(s.rows)));
    std::vector<float> y(ids.size() * static_cast<size_t>(s.cols));
    const Status st = cuda::get_rows_on_device(m.weight(), ids.data(), static_cast<int64_t>(ids.size()), y.data());
    ASSERT_TRUE(st.ok()) << st.to_string();
    std::vector<float> want(static_cast<size_t>(s.cols));
    for (size_t t = 0; t < ids.size(); ++t) {
      fb::dequantize_row(m.view(), ids[t], want.data());
      for (int64_t j = 0; j < s.cols; ++j) {
        const float got = y[t * static_cast<size_t>(s.cols) + static_cast<size_t>(j)];
        ASSERT_NEAR(got, want[static_cast<size_t>(j)], 1e-6f * std::fabs(want[static_cast<size_t>(j)]) + 1e-30f)
            << s.rows << " x " << s.cols << " salient " << s.salient << ": row " << ids[t] << " column " << j;
      }
    }
  }
}

// A FluxBin weight whose companions were not bound is refused with a message naming the format,
// and the row length is checked before anything is read.
TEST(CudaFluxBin, WeightWithoutCompanionsIsRefused) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(5);
  const RandomFluxBin m = random_fluxbin(4, 256, 0, rng);
  WeightTensor w = m.weight();
  w.fluxbin.col_scales = nullptr;
  const std::vector<float> x(256, 1.f);
  std::vector<float> y(4);
  Status st = cuda::matmul_on_device(w, x.data(), 1, y.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.to_string().find("FluxBin"), std::string::npos) << st.to_string();
  w = m.weight();
  w.row_stride = 40;
  st = cuda::matmul_on_device(w, x.data(), 1, y.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.to_string().find("FluxBin"), std::string::npos) << st.to_string();
}

}  // namespace
}  // namespace frugal
