#include "frugal/quant/methods/nvfp4_activation.h"

#include <algorithm>
#include <cmath>

#include "frugal/quant/fp4_codes.h"
#include "frugal/quant/reference.h"

namespace frugal::quant::methods {

void nvfp4_fake_quantize_row(const float* x, float* y, int64_t n) {
  float amax = 0.f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  // The same global scale and group rules as the weights' quantizer (nvfp4.cc), so that an
  // activation row and a weight row with the same values get the same codes.
  const float g = nvfp4_global_scale(amax);
  for (int64_t b = 0; b < n; b += kNvfp4ActGroup) {
    const uint8_t code = nvfp4_rtn_scale_code(x + b, g);
    const float div = ue4m3_to_f32(code) * g;
    for (int j = 0; j < kNvfp4ActGroup; ++j) {
      const float v = e2m1_to_f32(e2m1_round_even(x[b + j] / div));
      y[b + j] = v * div;
    }
  }
}

}  // namespace frugal::quant::methods
