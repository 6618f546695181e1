#include "frugal/quant/w8a8/w8a8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "frugal/core/half.h"

namespace frugal::quant::w8a8 {
namespace {

int8_t to_int8(float v) {
  // nearbyint: round half to even in the default rounding mode.
  const float r = std::nearbyint(v);
  return static_cast<int8_t>(std::clamp(r, -static_cast<float>(kQMax), static_cast<float>(kQMax)));
}

// A monotone integer image of a float: equal floats map to equal keys, neighbours to keys 1 apart,
// -0 and +0 to the same key.
int64_t ordered_key(uint32_t bits) {
  const int64_t mag = static_cast<int64_t>(bits & 0x7fffffffu);
  return (bits & 0x80000000u) ? -mag : mag;
}

}  // namespace

const char* output_type_name(OutputType t) { return t == OutputType::kBF16 ? "bf16" : "f32"; }

float round_to_output(float v, OutputType t) {
  return t == OutputType::kBF16 ? bf16_to_f32(f32_to_bf16(v)) : v;
}

int64_t spacings_apart(float a, float b, OutputType t) {
  uint32_t ua = 0, ub = 0;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  if (t == OutputType::kBF16) {
    ua >>= 16;  // bf16 values: the low half is zero, the key of the top half orders them
    ub >>= 16;
    const auto key16 = [](uint32_t h) {
      const int64_t mag = static_cast<int64_t>(h & 0x7fffu);
      return (h & 0x8000u) ? -mag : mag;
    };
    const int64_t d = key16(ua) - key16(ub);
    return d < 0 ? -d : d;
  }
  const int64_t d = ordered_key(ua) - ordered_key(ub);
  return d < 0 ? -d : d;
}

Int8Weights quantize_weights(const float* w, int64_t rows, int64_t cols) {
  Int8Weights out;
  out.rows = rows;
  out.cols = cols;
  out.q.resize(static_cast<size_t>(rows * cols));
  out.scale.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    float amax = 0;
    for (int64_t k = 0; k < cols; ++k) amax = std::max(amax, std::fabs(row[k]));
    const float s = amax > 0 ? amax / kQMax : 1.f;
    out.scale[static_cast<size_t>(r)] = s;
    int8_t* q = out.q.data() + r * cols;
    for (int64_t k = 0; k < cols; ++k) q[k] = to_int8(row[k] / s);
  }
  return out;
}

std::vector<float> dequantize_weights(const Int8Weights& w) {
  std::vector<float> out(w.q.size());
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t k = 0; k < w.cols; ++k) {
      const size_t i = static_cast<size_t>(r * w.cols + k);
      out[i] = static_cast<float>(w.q[i]) * w.scale[static_cast<size_t>(r)];
    }
  }
  return out;
}

void quantize_activations(const float* x, int64_t n, int64_t cols, Int8Activations& out) {
  out.n = n;
  out.cols = cols;
  out.q.resize(static_cast<size_t>(n * cols));
  out.scale.resize(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    const float* row = x + t * cols;
    float amax = 0;
    for (int64_t k = 0; k < cols; ++k) amax = std::max(amax, std::fabs(row[k]));
    const float s = amax > 0 ? amax / kQMax : 1.f;
    out.scale[static_cast<size_t>(t)] = s;
    int8_t* q = out.q.data() + t * cols;
    for (int64_t k = 0; k < cols; ++k) q[k] = to_int8(row[k] / s);
  }
}

int64_t dot_exact(const int8_t* a, const int8_t* w, int64_t k) {
  int64_t s = 0;
  for (int64_t i = 0; i < k; ++i) s += int64_t{a[i]} * int64_t{w[i]};
  return s;
}

void gemm_reference(const Int8Activations& a, const Int8Weights& w, const float* bias, OutputType out, float* y) {
  for (int64_t t = 0; t < a.n; ++t) {
    for (int64_t r = 0; r < w.rows; ++r) {
      const int64_t acc = dot_exact(a.q.data() + t * a.cols, w.q.data() + r * w.cols, w.cols);
      double v = static_cast<double>(acc) * static_cast<double>(a.scale[static_cast<size_t>(t)]) *
                 static_cast<double>(w.scale[static_cast<size_t>(r)]);
      if (bias != nullptr) v += static_cast<double>(bias[r]);
      y[t * w.rows + r] = round_to_output(static_cast<float>(v), out);
    }
  }
}

}  // namespace frugal::quant::w8a8
