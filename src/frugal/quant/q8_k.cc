// Q8_K: 256 int8 codes with an f32 scale and int16 sums of every 16 codes; the activation side
// of the K-quants. The largest-magnitude element maps to exactly -127.
#include "frugal/quant/blocks.h"
#include "frugal/quant/ref_util.h"
#include "frugal/quant/reference.h"

namespace frugal::quant {

void dequantize_q8_k_ref(const void* src, float* dst, int64_t n) {
  const BlockQ8_K* b = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    for (int j = 0; j < kQK_K; ++j) dst[i * kQK_K + j] = b[i].d * b[i].qs[j];
  }
}

void quantize_q8_k_ref(const float* src, void* dst, int64_t n) {
  BlockQ8_K* b = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* x = src + i * kQK_K;
    const float max = signed_absmax(x, kQK_K);
    if (max == 0.f) {
      b[i] = BlockQ8_K{};
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQK_K; ++j) {
      const int v = nearest_int(iscale * x[j]);
      b[i].qs[j] = static_cast<int8_t>(v < 127 ? v : 127);
    }
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += b[i].qs[16 * g + j];
      b[i].bsums[g] = static_cast<int16_t>(sum);
    }
    b[i].d = 1.f / iscale;
  }
}

}  // namespace frugal::quant
