// INT8 GEMM "scale_product": y = out(fl(fl(acc * fl(sa * sw)) + b)). See int8_gemm.h.
#include <cstddef>

#include "frugal/core/thread_pool.h"
#include "frugal/quant/w8a8/int8_gemm.h"

namespace frugal::quant::w8a8 {
namespace {

// One dot product, int8 x int8 into int32 (exact: K <= kMaxExactK). Written plainly so the
// compiler vectorizes it (widening multiply-add).
int32_t dot_i8(const int8_t* a, const int8_t* w, int64_t k) {
  int32_t s = 0;
  for (int64_t i = 0; i < k; ++i) s += static_cast<int32_t>(a[i]) * static_cast<int32_t>(w[i]);
  return s;
}

class ScaleProduct final : public Int8GemmKernel {
 public:
  std::string_view name() const override { return "scale_product"; }
  std::string_view epilogue() const override { return "fl(fl(acc * fl(sa * sw)) + b)"; }

  void gemm(const GemmArgs& g) const override {
    const int64_t rows = g.w->rows;
    const int64_t k = g.w->cols;
    const auto run = [&](int64_t r0, int64_t r1, int /*thread*/) {
      for (int64_t t = 0; t < g.a->n; ++t) {
        const int8_t* qa = g.a->q.data() + t * k;
        const float sa = g.a->scale[static_cast<size_t>(t)];
        for (int64_t r = r0; r < r1; ++r) {
          const int32_t acc = dot_i8(qa, g.w->q.data() + r * k, k);
          const float s = sa * g.w->scale[static_cast<size_t>(r)];
          float v = static_cast<float>(acc) * s;
          if (g.bias != nullptr) v = v + g.bias[r];
          g.y[t * rows + r] = round_to_output(v, g.out);
          if (g.acc != nullptr) g.acc[t * rows + r] = acc;
        }
      }
    };
    if (g.pool != nullptr && g.pool->size() > 1) {
      g.pool->parallel_for(rows, 16, run);
    } else {
      run(0, rows, 0);
    }
  }
};

}  // namespace

const Int8GemmKernel& scale_product_kernel() {
  static const ScaleProduct k;
  return k;
}

}  // namespace frugal::quant::w8a8
