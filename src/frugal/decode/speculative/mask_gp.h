// A small Gaussian process over skip sets, the Bayesian-optimisation half of SWIFT's skip-set
// search (swift.h): observations are (skip set, measured score) pairs, the kernel is
// exp(-d / length_scale) with d the Hamming distance between the sets' skipped sublayers
// (attention and MLP bits of Batch::skip_layers), and expected improvement picks the next set to
// measure. Scores are centred on their mean and scaled by their spread before fitting, so the
// noise is a fraction of the observed variance. A few dozen observations: a dense Cholesky
// factorisation per fit is cheap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace frugal::speculative {

class MaskGp {
 public:
  // `length_scale`: distance over which sets stop resembling each other (in sublayers);
  // `noise`: observation noise variance relative to the scores' variance.
  MaskGp(double length_scale, double noise) : length_scale_(length_scale), noise_(noise) {}

  void add(const std::vector<uint8_t>& skip, double score);
  size_t size() const { return xs_.size(); }

  struct Prediction {
    double mean = 0;
    double variance = 0;
  };
  // The posterior at `skip` (the prior, mean 0 and variance 1 in score units, before any
  // observation).
  Prediction predict(const std::vector<uint8_t>& skip);
  // E[max(0, f(skip) - best - xi)] under the posterior.
  double expected_improvement(const std::vector<uint8_t>& skip, double best, double xi = 0.01);
  // Hamming distance between two sets' skipped sublayers.
  static int32_t distance(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b);

 private:
  void fit();
  double kernel(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) const;

  double length_scale_;
  double noise_;
  std::vector<std::vector<uint8_t>> xs_;
  std::vector<double> ys_;
  bool fitted_ = false;
  double y_mean_ = 0, y_scale_ = 1;
  std::vector<double> chol_;   // [n][n] lower Cholesky factor of K + noise I (standardized scores)
  std::vector<double> alpha_;  // (K + noise I)^-1 y
};

}  // namespace frugal::speculative
