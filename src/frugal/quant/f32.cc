// F32: plain IEEE floats; the identity conversions and a dot product accumulated in double.
#include <cstring>

#include "frugal/quant/reference.h"

namespace frugal::quant {

void dequantize_f32_ref(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void quantize_f32_ref(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void vec_dot_f32_ref(int64_t n, float* s, const void* x, const void* y) {
  const float* a = static_cast<const float*>(x);
  const float* b = static_cast<const float*>(y);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(a[i] * b[i]);
  *s = static_cast<float>(sum);
}

}  // namespace frugal::quant
