// BF16: the top half of an IEEE float. Rounding to bf16 is nearest-even with NaNs kept quiet.
#include "frugal/core/half.h"
#include "frugal/quant/reference.h"

namespace frugal::quant {

void dequantize_bf16_ref(const void* src, float* dst, int64_t n) {
  const uint16_t* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
}

void quantize_bf16_ref(const float* src, void* dst, int64_t n) {
  uint16_t* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
}

void vec_dot_bf16_ref(int64_t n, float* s, const void* x, const void* y) {
  const uint16_t* a = static_cast<const uint16_t*>(x);
  const uint16_t* b = static_cast<const uint16_t*>(y);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(bf16_to_f32(a[i]) * bf16_to_f32(b[i]));
  *s = static_cast<float>(sum);
}

}  // namespace frugal::quant
