// quantize_rows -> to_float on fresh random inputs: every type frugal writes reconstructs its input
// within a bound set by its bits, with and without an importance matrix, and the importance
// matrix lowers the importance-weighted error where it is used.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "frugal/core/dtype.h"
#include "frugal/quant/type_traits.h"

namespace frugal {
namespace {

struct Case {
  DType type;
  double max_rel_rmse;  // RMS error / RMS of the input, Gaussian rows
};

const Case kCases[] = {
    {DType::kF16, 1e-3},  {DType::kBF16, 5e-3}, {DType::kQ8_0, 0.01},  {DType::kQ6_K, 0.03},
    {DType::kQ5_0, 0.06}, {DType::kQ5_1, 0.06}, {DType::kQ5_K, 0.06},  {DType::kQ4_0, 0.12},
    {DType::kQ4_1, 0.12}, {DType::kQ4_K, 0.12}, {DType::kIQ4_NL, 0.12}, {DType::kQ3_K, 0.25},
    {DType::kQ2_K, 0.45},
};

double weighted_err(const std::vector<float>& x, const std::vector<float>& y, const std::vector<float>& w, int64_t n) {
  double e = 0;
  for (size_t i = 0; i < x.size(); ++i) e += w[i % static_cast<size_t>(n)] * (x[i] - y[i]) * (x[i] - y[i]);
  return e;
}

TEST(QuantizeRoundTrip, EveryWrittenTypeOnFreshInputs) {
  std::random_device rd;
  const unsigned seed = rd();
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::exponential_distribution<float> ed(1.f);
  const int64_t n = 768;  // three K-quant super-blocks
  const int64_t rows = 6;
  std::vector<float> x(static_cast<size_t>(n * rows));
  for (auto& v : x) v = nd(rng) * 0.05f;
  std::vector<float> w(static_cast<size_t>(n));
  // A few columns matter far more than the rest, as activations' outlier channels do.
  for (auto& v : w) v = ed(rng);
  for (int k = 0; k < 24; ++k) w[static_cast<size_t>(rng() % n)] *= 100.f;
  double rms = 0;
  for (float v : x) rms += static_cast<double>(v) * v;
  rms = std::sqrt(rms / static_cast<double>(x.size()));
  for (const Case& c : kCases) {
    const TypeTraits* t = type_traits(c.type);
    ASSERT_NE(t->quantize_rows, nullptr) << dtype_name(c.type);
    std::vector<uint8_t> q(static_cast<size_t>(row_bytes(c.type, n) * rows));
    std::vector<float> y(x.size());
    double err[2];
    double werr[2];
    // F16, BF16 and Q8_0 ignore the importance matrix.
    const bool uses_imatrix = dtype_layout(c.type).block_size > 1 && c.type != DType::kQ8_0;
    for (int wi = 0; wi < 2; ++wi) {
      t->quantize_rows(x.data(), q.data(), rows, n, wi ? w.data() : nullptr);
      t->to_float_ref(q.data(), y.data(), n * rows);
      double e = 0;
      for (size_t i = 0; i < x.size(); ++i) e += (x[i] - y[i]) * (x[i] - y[i]);
      err[wi] = std::sqrt(e / static_cast<double>(x.size())) / rms;
      werr[wi] = weighted_err(x, y, w, n);
      // With an importance matrix the quantizer minimises the weighted error, and the plain error
      // may grow where it buys weighted error (the 24 heavy columns pull the block scales): both
      // get 1.5x the type's bound there. Over 3,000 seeds the worst seen was 1.05x (plain) and
      // 1.12x (weighted, relative to the weighted input energy, for the types that use the
      // matrix), both Q5_0; without the matrix the plain error stayed below 0.76x. (The plain
      // bound alone failed about one seed in 1,000 with the matrix; 8,000 seeds pass now.)
      const double bound = wi ? 1.5 * c.max_rel_rmse : c.max_rel_rmse;
      EXPECT_LT(err[wi], bound) << dtype_name(c.type) << " imatrix " << wi << " seed " << seed;
      if (wi && uses_imatrix) {
        EXPECT_LT(std::sqrt(werr[wi] / weighted_err(x, std::vector<float>(x.size(), 0.f), w, n)), bound)
            << dtype_name(c.type) << ": weighted error with the importance matrix, seed " << seed;
      }
    }
    if (uses_imatrix) {
      EXPECT_LT(werr[1], werr[0]) << dtype_name(c.type) << ": the importance matrix did not help, seed " << seed;
    }
  }
}

TEST(QuantizeRoundTrip, AllZeroRowsStayZero) {
  const int64_t n = 512;
  std::vector<float> x(static_cast<size_t>(n), 0.f);
  std::vector<float> w(static_cast<size_t>(n), 1.f);
  for (const Case& c : kCases) {
    const TypeTraits* t = type_traits(c.type);
    std::vector<uint8_t> q(static_cast<size_t>(row_bytes(c.type, n)));
    std::vector<float> y(x.size(), 1.f);
    t->quantize_rows(x.data(), q.data(), 1, n, w.data());
    t->to_float_ref(q.data(), y.data(), n);
    for (float v : y) ASSERT_EQ(v, 0.f) << dtype_name(c.type);
  }
}

}  // namespace
}  // namespace frugal
