#include "frugal/decode/speculative/mask_gp.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace frugal::speculative {

int32_t MaskGp::distance(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  int32_t d = 0;
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) d += std::popcount(static_cast<unsigned>(a[i] ^ b[i]));
  for (size_t i = n; i < a.size(); ++i) d += std::popcount(static_cast<unsigned>(a[i]));
  for (size_t i = n; i < b.size(); ++i) d += std::popcount(static_cast<unsigned>(b[i]));
  return d;
}

double MaskGp::kernel(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) const {
  return std::exp(-static_cast<double>(distance(a, b)) / length_scale_);
}

void MaskGp::add(const std::vector<uint8_t>& skip, double score) {
  xs_.push_back(skip);
  ys_.push_back(score);
  fitted_ = false;
}

void MaskGp::fit() {
  const size_t n = xs_.size();
  y_mean_ = 0;
  for (double y : ys_) y_mean_ += y;
  y_mean_ /= static_cast<double>(n);
  double var = 0;
  for (double y : ys_) var += (y - y_mean_) * (y - y_mean_);
  var /= static_cast<double>(n);
  // Identical scores (or one observation) carry no scale: a small one keeps the fit defined.
  y_scale_ = std::sqrt(std::max(var, 1e-6));
  // K + noise I, then its Cholesky factor in place (positive definite: the kernel is a valid
  // covariance on binary vectors and noise > 0).
  chol_.assign(n * n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j <= i; ++j) chol_[i * n + j] = kernel(xs_[i], xs_[j]) + (i == j ? noise_ : 0.0);
  }
  for (size_t j = 0; j < n; ++j) {
    double d = chol_[j * n + j];
    for (size_t k = 0; k < j; ++k) d -= chol_[j * n + k] * chol_[j * n + k];
    d = std::sqrt(std::max(d, 1e-12));
    chol_[j * n + j] = d;
    for (size_t i = j + 1; i < n; ++i) {
      double v = chol_[i * n + j];
      for (size_t k = 0; k < j; ++k) v -= chol_[i * n + k] * chol_[j * n + k];
      chol_[i * n + j] = v / d;
    }
  }
  // alpha = L^-T L^-1 y.
  alpha_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    double v = (ys_[i] - y_mean_) / y_scale_;
    for (size_t k = 0; k < i; ++k) v -= chol_[i * n + k] * alpha_[k];
    alpha_[i] = v / chol_[i * n + i];
  }
  for (size_t i = n; i-- > 0;) {
    double v = alpha_[i];
    for (size_t k = i + 1; k < n; ++k) v -= chol_[k * n + i] * alpha_[k];
    alpha_[i] = v / chol_[i * n + i];
  }
  fitted_ = true;
}

MaskGp::Prediction MaskGp::predict(const std::vector<uint8_t>& skip) {
  const size_t n = xs_.size();
  if (n == 0) return {0.0, 1.0};
  if (!fitted_) fit();
  std::vector<double> k(n), v(n);
  double mean = 0;
  for (size_t i = 0; i < n; ++i) {
    k[i] = kernel(skip, xs_[i]);
    mean += k[i] * alpha_[i];
  }
  // v = L^-1 k; variance = k(x, x) - v.v.
  double vv = 0;
  for (size_t i = 0; i < n; ++i) {
    double t = k[i];
    for (size_t j = 0; j < i; ++j) t -= chol_[i * n + j] * v[j];
    v[i] = t / chol_[i * n + i];
    vv += v[i] * v[i];
  }
  const double var = std::max(1.0 - vv, 0.0);
  return {y_mean_ + y_scale_ * mean, y_scale_ * y_scale_ * var};
}

double MaskGp::expected_improvement(const std::vector<uint8_t>& skip, double best, double xi) {
  const Prediction p = predict(skip);
  const double sd = std::sqrt(p.variance);
  const double gain = p.mean - best - xi;
  if (sd < 1e-12) return std::max(gain, 0.0);
  const double z = gain / sd;
  const double cdf = 0.5 * std::erfc(-z / std::sqrt(2.0));
  const double pdf = std::exp(-0.5 * z * z) / std::sqrt(2.0 * M_PI);
  return gain * cdf + sd * pdf;
}

}  // namespace frugal::speculative
