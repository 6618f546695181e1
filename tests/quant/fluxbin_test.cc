// FluxBin (quant/fluxbin.h): the fit's error history never rises and ends well below the greedy
// start, the LUT GEMV equals the dequantize-and-dot reference on random shapes and inputs (pure
// and hybrid), the stored bytes are what bits_per_weight counts, the hybrid stores salient
// columns within half a step and picks the planted outlier / high-importance columns, bad
// shapes are refused with the tensor's name, and the SIMD GEMV equals the scalar LUT GEMV within
// float reassociation on every compiled SIMD target.
#include "frugal/quant/fluxbin.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "frugal/core/half.h"
#include "frugal/quant/simd_targets.h"

namespace frugal {
namespace {

namespace fb = quant::fluxbin;

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.f, 0.05f);
  std::vector<float> w(rows * cols);
  for (float& v : w) v = n(rng);
  return w;
}

// sum_j |W[o][j] x_j| of the dequantized row o (row: scratch of cols floats): the scale of the
// rounding bounds below.
double abs_dot(const fb::View& v, int64_t o, const std::vector<float>& x, std::vector<float>& row) {
  fb::dequantize_row(v, o, row.data());
  double mag = 0;
  for (size_t j = 0; j < x.size(); ++j) mag += std::fabs(row[j] * x[j]);
  return mag;
}

double stored_error(const fb::Matrix& m, const std::vector<float>& w, const float* h = nullptr) {
  std::vector<float> row(m.cols);
  double err = 0;
  for (int64_t o = 0; o < m.rows; ++o) {
    fb::dequantize_row(fb::view_of(m), o, row.data());
    for (int64_t j = 0; j < m.cols; ++j) {
      const double d = w[o * m.cols + j] - row[j];
      err += (h != nullptr ? h[j] : 1.0) * d * d;
    }
  }
  return err;
}

TEST(FluxBin, ErrorHistoryNonIncreasingAndBelowGreedyStart) {
  const int64_t rows = 48, cols = 384;
  const std::vector<float> w = random_matrix(rows, cols, 1);
  fb::FitOptions opt;
  auto m = fb::fit(w.data(), rows, cols, opt);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const std::vector<double>& h = m->error_history;
  ASSERT_GE(h.size(), 3u);
  ASSERT_LE(h.size(), static_cast<size_t>(opt.max_iterations + 1));
  for (size_t i = 1; i < h.size(); ++i) EXPECT_LE(h[i], h[i - 1] * (1 + 1e-9)) << "iteration " << i;
  EXPECT_LT(h.back(), 0.9 * h.front());
  // The stored f16 values reproduce the float fit up to rounding.
  const double se = stored_error(*m, w);
  EXPECT_NEAR(se, h.back(), 0.02 * h.back());
  // A fit with one iteration stops there and is no better than the full one.
  opt.max_iterations = 1;
  auto m1 = fb::fit(w.data(), rows, cols, opt);
  ASSERT_TRUE(m1.ok());
  EXPECT_EQ(m1->error_history.size(), 2u);
  EXPECT_GT(m1->error_history.back(), h.back());
}

TEST(FluxBin, StopsAfterPatienceRoundsOfSmallImprovement) {
  const std::vector<float> w = random_matrix(16, 128, 8);
  fb::FitOptions opt;
  // Every round improves by less than 100 %: the fit stops after `patience` rounds.
  opt.min_improvement = 1.0;
  for (int patience : {1, 3}) {
    opt.patience = patience;
    auto m = fb::fit(w.data(), 16, 128, opt);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(m->error_history.size(), static_cast<size_t>(patience + 1));
  }
  // With the default threshold it runs until the improvement fades, within max_iterations.
  auto full = fb::fit(w.data(), 16, 128, {});
  ASSERT_TRUE(full.ok());
  const std::vector<double>& h = full->error_history;
  ASSERT_GT(h.size(), 4u);
  if (h.size() < 51u) {
    for (size_t i = h.size() - 3; i < h.size(); ++i) EXPECT_LE(h[i - 1] - h[i], 1e-6 * h[i - 1]);
  }
}

TEST(FluxBin, BeatsOneBitSignTimesMeanPerRowGroup) {
  // Independent yardstick: 1-bit sign * mean|w| per (row, group); two bases with fitted row and
  // column scales must do clearly better on Gaussian weights.
  const int64_t rows = 32, cols = 256;
  const std::vector<float> w = random_matrix(rows, cols, 2);
  double one_bit = 0;
  for (int64_t o = 0; o < rows; ++o) {
    for (int64_t g = 0; g < cols / 128; ++g) {
      double mean = 0;
      for (int j = 0; j < 128; ++j) mean += std::fabs(w[o * cols + g * 128 + j]);
      mean /= 128;
      for (int j = 0; j < 128; ++j) {
        const float x = w[o * cols + g * 128 + j];
        const double d = x - (x < 0 ? -mean : mean);
        one_bit += d * d;
      }
    }
  }
  auto m = fb::fit(w.data(), rows, cols, {});
  ASSERT_TRUE(m.ok());
  EXPECT_LT(stored_error(*m, w), 0.5 * one_bit);
}

TEST(FluxBin, LutGemvEqualsReferenceOnRandomShapes) {
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> scratch;
  for (int salient : {0, 8}) {
    for (int64_t rows : {1, 7, 33}) {
      for (int64_t cols : {128, 384, 1024}) {
        const std::vector<float> w = random_matrix(rows, cols, static_cast<uint32_t>(rows * 131 + cols + salient));
        fb::FitOptions opt;
        opt.salient = salient;
        opt.max_iterations = 5;
        auto m = fb::fit(w.data(), rows, cols, opt);
        ASSERT_TRUE(m.ok());
        const fb::View v = fb::view_of(*m);
        for (int trial = 0; trial < 3; ++trial) {
          std::vector<float> x(cols);
          for (float& e : x) e = n(rng);
          std::vector<float> ref(rows), lut(rows);
          fb::gemv_reference(v, x.data(), ref.data(), 0, rows);
          fb::gemv_lut(v, x.data(), lut.data(), 0, rows, scratch);
          std::vector<float> row(cols);
          for (int64_t o = 0; o < rows; ++o) {
            const double mag = abs_dot(v, o, x, row);
            EXPECT_NEAR(lut[o], ref[o], 1e-5 * mag + 1e-6)
                << "salient " << salient << " rows " << rows << " cols " << cols << " row " << o;
          }
          // A sub-range writes only its rows.
          if (rows > 2) {
            std::vector<float> part(rows, 12345.f);
            fb::gemv_lut(v, x.data(), part.data(), 1, rows - 1, scratch);
            EXPECT_EQ(part[0], 12345.f);
            EXPECT_EQ(part[rows - 1], 12345.f);
            for (int64_t o = 1; o < rows - 1; ++o) EXPECT_EQ(part[o], lut[o]);
          }
        }
      }
    }
  }
}

// A random FluxBin matrix in the stored layout, every byte free: random sign bits, row scales of
// either sign over three orders of magnitude, column scales, sorted distinct salient columns and
// random nibbles. The fit's output is a subset of these.
struct RandomFluxBin {
  int64_t rows, cols;
  int salient;
  std::vector<uint8_t> blocks, salient_idx, salient_vals;
  std::vector<uint16_t> col_scales;

  RandomFluxBin(int64_t r, int64_t c, int s, std::mt19937& rng) : rows(r), cols(c), salient(s) {
    const int64_t groups = cols / fb::kGroup;
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> mag(-3.f, 0.f), sign(-1.f, 1.f);
    auto scale = [&] { return f32_to_fp16((sign(rng) < 0 ? -1.f : 1.f) * std::pow(10.f, mag(rng))); };
    blocks.resize(rows * groups * fb::kBlockBytes);
    for (int64_t i = 0; i < rows * groups; ++i) {
      uint8_t* blk = &blocks[i * fb::kBlockBytes];
      for (int b = 0; b < fb::kBases * fb::kSignBytes; ++b) blk[b] = static_cast<uint8_t>(byte(rng));
      for (int k = 0; k < fb::kBases; ++k) {
        const uint16_t h = scale();
        std::memcpy(blk + fb::kBases * fb::kSignBytes + 2 * k, &h, 2);
      }
    }
    col_scales.resize(fb::kBases * cols);
    for (uint16_t& h : col_scales) h = scale();
    salient_idx.resize(groups * salient);
    const int64_t srb = fb::salient_row_bytes(salient);
    salient_vals.resize(rows * groups * srb);
    std::vector<int> perm(fb::kGroup);
    for (int64_t g = 0; g < groups; ++g) {
      for (int j = 0; j < fb::kGroup; ++j) perm[j] = j;
      std::shuffle(perm.begin(), perm.end(), rng);
      std::sort(perm.begin(), perm.begin() + salient);
      for (int t = 0; t < salient; ++t) {
        salient_idx[g * salient + t] = static_cast<uint8_t>(perm[t]);
        // The fit leaves a salient column out of the binary part: its c is 0.
        col_scales[g * fb::kGroup + perm[t]] = 0;
        col_scales[cols + g * fb::kGroup + perm[t]] = 0;
      }
    }
    for (int64_t i = 0; i < rows * groups && salient > 0; ++i) {
      uint8_t* p = &salient_vals[i * srb];
      const uint16_t h = scale();
      std::memcpy(p, &h, 2);
      for (int64_t b = 2; b < srb; ++b) p[b] = static_cast<uint8_t>(byte(rng));
    }
  }
  fb::View view() const {
    return fb::View{rows, cols, salient, blocks.data(), col_scales.data(), salient_idx.data(), salient_vals.data()};
  }
};

class FluxBinSimd : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override { quant::force_simd_target(GetParam()); }
  void TearDown() override { quant::force_simd_target(0); }
};

// gemv_simd against gemv_lut on fresh random matrices and inputs (the seed is printed on failure).
// Both compute the same sum of terms; only the order of the float additions differs (SIMD lanes,
// 2 * masked sum - group sum instead of a +- table), so each is within gamma_n * B of the exact
// value, B = sum_j (|r_1 c_1j| + |r_2 c_2j|) |x_j| + sum_salient |scale (q - 8) x_j| the sum of the
// terms' magnitudes, gamma_n ~ n * 2^-24 in the worst case with n the number of terms (up to a
// few thousand here); the test allows 1e-5 * B, below that worst case but far above what
// rounding reaches in practice (it grows like sqrt(n) * 2^-24), while a wrong sign, scale or
// salient term moves a row by a sizeable part of B.
TEST_P(FluxBinSimd, GemvEqualsScalarLutOnRandomShapes) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  std::uniform_int_distribution<int> rows_of(1, 70), groups_of(1, 12);
  std::vector<float> scratch_lut, scratch_simd;
  for (int salient : {0, 8, 2, 32}) {
    for (int trial = 0; trial < 6; ++trial) {
      const int64_t rows = rows_of(rng), cols = fb::kGroup * groups_of(rng);
      SCOPED_TRACE("salient " + std::to_string(salient) + " rows " + std::to_string(rows) + " cols " +
                   std::to_string(cols));
      const RandomFluxBin m(rows, cols, salient, rng);
      const fb::View v = m.view();
      std::vector<float> x(cols);
      for (float& e : x) e = n(rng);
      std::vector<float> lut(rows), simd(rows, -1.f);
      fb::gemv_lut(v, x.data(), lut.data(), 0, rows, scratch_lut);
      fb::gemv_simd(v, x.data(), simd.data(), 0, rows, scratch_simd);
      const int64_t groups = cols / fb::kGroup;
      const int64_t srb = fb::salient_row_bytes(salient);
      for (int64_t o = 0; o < rows; ++o) {
        double bound = 0;
        for (int64_t g = 0; g < groups; ++g) {
          const uint8_t* blk = v.blocks + (o * groups + g) * fb::kBlockBytes;
          uint16_t rh[2];
          std::memcpy(rh, blk + fb::kBases * fb::kSignBytes, 4);
          for (int64_t j = g * fb::kGroup; j < (g + 1) * fb::kGroup; ++j) {
            bound += (std::fabs(fp16_to_f32(rh[0]) * fp16_to_f32(v.col_scales[j])) +
                      std::fabs(fp16_to_f32(rh[1]) * fp16_to_f32(v.col_scales[cols + j]))) *
                     std::fabs(x[j]);
          }
          if (salient > 0) {
            const uint8_t* p = v.salient_vals + (o * groups + g) * srb;
            uint16_t sh;
            std::memcpy(&sh, p, 2);
            for (int t = 0; t < salient; ++t) {
              const int q = ((p[2 + t / 2] >> (4 * (t % 2))) & 15) - 8;
              bound += std::fabs(fp16_to_f32(sh) * q * x[g * fb::kGroup + v.salient_idx[g * salient + t]]);
            }
          }
        }
        ASSERT_NEAR(simd[o], lut[o], 1e-5 * bound) << "row " << o << " (B = " << bound << ")";
      }
      // A sub-range writes only its rows, the same values as the whole range.
      if (rows > 2) {
        std::vector<float> part(rows, 12345.f);
        fb::gemv_simd(v, x.data(), part.data(), 1, rows - 1, scratch_simd);
        ASSERT_EQ(part[0], 12345.f);
        ASSERT_EQ(part[rows - 1], 12345.f);
        for (int64_t o = 1; o < rows - 1; ++o) ASSERT_EQ(part[o], simd[o]) << "row " << o;
      }
    }
  }
}

// gemv_bytes against gemv_lut on fresh random matrices and inputs. Its only approximation is the
// bytes: with u_j = c_k[g, j] x_j (each as float) and d = max_j |u_j| / 255 per group and basis,
// | |u_j| - d q_j | <= d / 2, so a row's basis-k term sum_j B_j u_j moves by at most
// |r_k| * 128 * d / 2 per group (kGroup * d / 2); the bound below is that summed over groups and
// bases, plus the float reassociation allowance of gemv_simd's test (1e-5 * B). Where the target
// has fewer than 8 float lanes gemv_bytes runs gemv_simd, which is within the same bound. On the
// others the result is also checked against the exact sum of the bytes as the kernel forms them.
TEST_P(FluxBinSimd, BytesGemvWithinQuantizationBoundOfScalarLut) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  std::uniform_int_distribution<int> rows_of(1, 70), groups_of(1, 12);
  std::vector<float> scratch_lut, scratch_bytes;
  double worst = 0;  // largest |error| / quantization bound seen
  for (int salient : {0, 8, 2, 32}) {
    for (int trial = 0; trial < 6; ++trial) {
      const int64_t rows = rows_of(rng), cols = fb::kGroup * groups_of(rng);
      SCOPED_TRACE("salient " + std::to_string(salient) + " rows " + std::to_string(rows) + " cols " +
                   std::to_string(cols));
      const RandomFluxBin m(rows, cols, salient, rng);
      const fb::View v = m.view();
      std::vector<float> x(cols);
      for (float& e : x) e = n(rng);
      // One trial in three: inputs over six decades, so that small |u| round to 0 bytes; one in
      // six: inputs near 1e-37, below the kernel's floor on the largest |u| of a group.
      if (trial % 3 == 2) {
        std::uniform_real_distribution<float> dec(-6.f, 0.f);
        for (float& e : x) e *= std::pow(10.f, dec(rng));
      }
      if (trial == 4) {
        for (float& e : x) e *= 1e-37f;
      }
      std::vector<float> lut(rows), bytes(rows, -1.f);
      fb::gemv_lut(v, x.data(), lut.data(), 0, rows, scratch_lut);
      fb::gemv_bytes(v, x.data(), bytes.data(), 0, rows, scratch_bytes);
      const int64_t groups = cols / fb::kGroup;
      const int64_t srb = fb::salient_row_bytes(salient);
      // The bytes as the kernel forms them (float products, round to nearest even), so that the
      // kernel's sum can also be checked against the exact sum of its own terms.
      std::vector<double> dk(2 * groups);
      std::vector<double> su(2 * cols);  // sign(u_j) * d * q_j
      for (int64_t g = 0; g < groups; ++g) {
        for (int k = 0; k < 2; ++k) {
          float mx = 0.f;
          for (int64_t j = g * fb::kGroup; j < (g + 1) * fb::kGroup; ++j) {
            mx = std::max(mx, std::fabs(fp16_to_f32(v.col_scales[k * cols + j]) * x[j]));
          }
          mx = std::max(mx, 1e-35f);  // the kernel's floor on the largest |u|
          dk[2 * g + k] = mx / 255.0;
          const float inv = 255.f / mx;
          for (int64_t j = g * fb::kGroup; j < (g + 1) * fb::kGroup; ++j) {
            const float u = fp16_to_f32(v.col_scales[k * cols + j]) * x[j];
            const float q = std::min(std::nearbyint(std::fabs(u) * inv), 255.f);
            su[k * cols + j] = (u < 0 ? -1.0 : 1.0) * static_cast<double>(mx / 255.f) * q;
          }
        }
      }
      for (int64_t o = 0; o < rows; ++o) {
        double b = 0, qbound = 0, emu = 0, emu_mag = 0;
        for (int64_t g = 0; g < groups; ++g) {
          const uint8_t* blk = v.blocks + (o * groups + g) * fb::kBlockBytes;
          uint16_t rh[2];
          std::memcpy(rh, blk + fb::kBases * fb::kSignBytes, 4);
          for (int k = 0; k < 2; ++k) {
            qbound += std::fabs(fp16_to_f32(rh[k])) * fb::kGroup * dk[2 * g + k] / 2;
            for (int j = 0; j < fb::kGroup; ++j) {
              const bool bit = (blk[k * fb::kSignBytes + j / 8] >> (j % 8)) & 1;
              const double t = fp16_to_f32(rh[k]) * su[k * cols + g * fb::kGroup + j];
              emu += bit ? t : -t;
              emu_mag += std::fabs(t);
            }
          }
          for (int64_t j = g * fb::kGroup; j < (g + 1) * fb::kGroup; ++j) {
            b += (std::fabs(fp16_to_f32(rh[0]) * fp16_to_f32(v.col_scales[j])) +
                  std::fabs(fp16_to_f32(rh[1]) * fp16_to_f32(v.col_scales[cols + j]))) *
                 std::fabs(x[j]);
          }
          if (salient > 0) {
            const uint8_t* p = v.salient_vals + (o * groups + g) * srb;
            uint16_t sh;
            std::memcpy(&sh, p, 2);
            for (int t = 0; t < salient; ++t) {
              const int q = ((p[2 + t / 2] >> (4 * (t % 2))) & 15) - 8;
              const double st = static_cast<double>(fp16_to_f32(sh)) * q * x[g * fb::kGroup + v.salient_idx[g * salient + t]];
              b += std::fabs(st);
              emu += st;
              emu_mag += std::fabs(st);
            }
          }
        }
        if (quant::simd_target_label(GetParam()).rfind("AVX", 0) == 0) {
          // Targets with 8 or more float lanes (AVX2, the AVX3 family) run the bytes path: its
          // sum equals the emulated one up to reassociation (this catches a wrong byte scale,
          // which the worst-case bound above would not).
          ASSERT_NEAR(bytes[o], emu, 1e-5 * emu_mag) << "row " << o;
        }
        const double err = std::fabs(static_cast<double>(bytes[o]) - lut[o]);
        ASSERT_LE(err, qbound + 1e-5 * b) << "row " << o << " (quantization bound " << qbound << ", B = " << b << ")";
        if (qbound > 0) worst = std::max(worst, err / qbound);
      }
      if (rows > 2) {
        std::vector<float> part(rows, 12345.f);
        fb::gemv_bytes(v, x.data(), part.data(), 1, rows - 1, scratch_bytes);
        ASSERT_EQ(part[0], 12345.f);
        ASSERT_EQ(part[rows - 1], 12345.f);
        for (int64_t o = 1; o < rows - 1; ++o) ASSERT_EQ(part[o], bytes[o]) << "row " << o;
      }
    }
  }
  // The bound is a worst case (every rounding error at d / 2 and of one sign); random errors
  // cancel, so the bound is not met with equality, but the bytes path does round.
  RecordProperty("worst_error_over_bound", std::to_string(worst));
}

// A fitted matrix too: the values the fit stores, through the same comparison to the reference as
// gemv_lut's test.
TEST_P(FluxBinSimd, GemvEqualsReferenceOnFittedMatrices) {
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> scratch;
  for (int salient : {0, 8}) {
    for (int64_t rows : {1, 33}) {
      for (int64_t cols : {128, 1024}) {
        const std::vector<float> w = random_matrix(rows, cols, static_cast<uint32_t>(rows * 17 + cols + salient));
        fb::FitOptions opt;
        opt.salient = salient;
        opt.max_iterations = 3;
        auto m = fb::fit(w.data(), rows, cols, opt);
        ASSERT_TRUE(m.ok());
        const fb::View v = fb::view_of(*m);
        std::vector<float> x(cols);
        for (float& e : x) e = n(rng);
        std::vector<float> ref(rows), simd(rows);
        fb::gemv_reference(v, x.data(), ref.data(), 0, rows);
        fb::gemv_simd(v, x.data(), simd.data(), 0, rows, scratch);
        std::vector<float> row(cols);
        for (int64_t o = 0; o < rows; ++o) {
          const double mag = abs_dot(v, o, x, row);
          EXPECT_NEAR(simd[o], ref[o], 1e-5 * mag + 1e-6)
              << "salient " << salient << " rows " << rows << " cols " << cols << " row " << o;
        }
      }
    }
  }
}

std::string target_label(const ::testing::TestParamInfo<int64_t>& info) {
  return quant::simd_target_label(info.param);
}

INSTANTIATE_TEST_SUITE_P(AllTargets, FluxBinSimd, ::testing::ValuesIn(quant::available_simd_targets()),
                         target_label);

TEST(FluxBin, BitsPerWeightMatchStoredBytes) {
  for (int salient : {0, 8}) {
    const int64_t rows = 20, cols = 256;
    const std::vector<float> w = random_matrix(rows, cols, 3);
    fb::FitOptions opt;
    opt.salient = salient;
    opt.max_iterations = 2;
    auto m = fb::fit(w.data(), rows, cols, opt);
    ASSERT_TRUE(m.ok());
    const double bytes = static_cast<double>(m->blocks.size() + m->col_scales.size() * 2 + m->salient_idx.size() +
                                             m->salient_vals.size());
    EXPECT_DOUBLE_EQ(fb::bits_per_weight(rows, cols, salient), bytes * 8 / (rows * cols));
  }
  // Large matrices: 36 bytes per 128 (2.25 bits) plus 6 bytes per 128 (0.375) for 8 salient.
  EXPECT_NEAR(fb::bits_per_weight(4096, 4096, 0), 2.25, 0.01);
  EXPECT_NEAR(fb::bits_per_weight(4096, 4096, 8), 2.625, 0.01);
}

TEST(FluxBin, HybridKeepsPlantedOutlierColumnsAndImportanceSteers) {
  const int64_t rows = 64, cols = 256;
  std::vector<float> w = random_matrix(rows, cols, 4);
  std::mt19937 rng(5);
  std::normal_distribution<float> big(0.f, 1.f);
  const std::vector<int> outliers = {3, 77, 130, 250};
  for (int64_t o = 0; o < rows; ++o) {
    for (int j : outliers) w[o * cols + j] = big(rng);
  }
  fb::FitOptions pure_opt;
  auto pure = fb::fit(w.data(), rows, cols, pure_opt);
  fb::FitOptions hyb_opt;
  hyb_opt.salient = 8;
  auto hyb = fb::fit(w.data(), rows, cols, hyb_opt);
  ASSERT_TRUE(pure.ok() && hyb.ok());
  for (int j : outliers) {
    const int g = j / 128;
    const auto* idx = &hyb->salient_idx[g * 8];
    EXPECT_TRUE(std::find(idx, idx + 8, static_cast<uint8_t>(j % 128)) != idx + 8) << "column " << j;
  }
  const double pure_err = stored_error(*pure, w), hyb_err = stored_error(*hyb, w);
  std::printf("  planted outliers: squared error pure %.4f, hybrid %.4f\n", pure_err, hyb_err);
  EXPECT_LT(hyb_err, 0.75 * pure_err);
  // Salient columns leave the binary part (c = 0 there), and each salient element is within half
  // a step of its row-group scale.
  std::vector<float> row(cols);
  const int64_t srb = fb::salient_row_bytes(8);
  for (int64_t o = 0; o < rows; ++o) {
    fb::dequantize_row(fb::view_of(*hyb), o, row.data());
    for (int g = 0; g < 2; ++g) {
      uint16_t sh;
      std::memcpy(&sh, &hyb->salient_vals[(o * 2 + g) * srb], 2);
      const float sc = fp16_to_f32(sh);
      for (int t = 0; t < 8; ++t) {
        const int j = g * 128 + hyb->salient_idx[g * 8 + t];
        EXPECT_EQ(hyb->col_scales[j], 0);
        EXPECT_EQ(hyb->col_scales[cols + j], 0);
        EXPECT_LE(std::fabs(row[j] - w[o * cols + j]), 0.5f * sc * 1.001f + 1e-7f);
      }
    }
  }
  // With flat weights an importance spike decides which columns are salient.
  const std::vector<float> flat = random_matrix(rows, cols, 6);
  std::vector<float> imp(cols, 1.f);
  const std::vector<int> hot = {10, 20, 30, 40, 50, 60, 70, 80};
  for (int j : hot) imp[j] = 1000.f;
  hyb_opt.importance = imp.data();
  auto steered = fb::fit(flat.data(), rows, cols, hyb_opt);
  ASSERT_TRUE(steered.ok());
  for (int t = 0; t < 8; ++t) EXPECT_EQ(steered->salient_idx[t], hot[t]);
}

TEST(FluxBin, RefusesColumnsNotMultipleOf128WithTensorName) {
  std::vector<float> w(4 * 200, 0.1f);
  auto m = fb::fit(w.data(), 4, 200, {}, "blk.3.ffn_down.weight");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("blk.3.ffn_down.weight"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("128"), std::string::npos);
  fb::FitOptions odd;
  odd.salient = 3;
  std::vector<float> w2(4 * 128, 0.1f);
  EXPECT_FALSE(fb::fit(w2.data(), 4, 128, odd).ok());
}

}  // namespace
}  // namespace frugal
