// INT8 GEMM "sequential_fma": y = out(fma(fl(acc * sa), sw, b)) (fl(fl(acc * sa) * sw) without a
// bias), over register tiles of 4 tokens x 4 rows with K in blocks of 64. See int8_gemm.h.
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "frugal/core/thread_pool.h"
#include "frugal/quant/w8a8/int8_gemm.h"

namespace frugal::quant::w8a8 {
namespace {

constexpr int64_t kTileT = 4;   // tokens per tile
constexpr int64_t kTileR = 4;   // rows per tile
constexpr int64_t kBlockK = 64; // K per block: one int32 partial per block, added to the total

int32_t dot_block(const int8_t* a, const int8_t* w, int64_t k) {
  int32_t s = 0;
  for (int64_t i = 0; i < k; ++i) s += static_cast<int32_t>(a[i]) * static_cast<int32_t>(w[i]);
  return s;
}

class SequentialFma final : public Int8GemmKernel {
 public:
  std::string_view name() const override { return "sequential_fma"; }
  std::string_view epilogue() const override { return "fma(fl(acc * sa), sw, b)"; }

  void gemm(const GemmArgs& g) const override {
    const int64_t rows = g.w->rows;
    const int64_t n = g.a->n;
    const int64_t k = g.w->cols;
    // A chunk is whole row tiles; a tile's outputs are computed by one thread in one order.
    const int64_t n_tiles = (rows + kTileR - 1) / kTileR;
    const auto run = [&](int64_t tile0, int64_t tile1, int /*thread*/) {
      for (int64_t t0 = 0; t0 < n; t0 += kTileT) {
        const int64_t tn = std::min(kTileT, n - t0);
        for (int64_t tile = tile0; tile < tile1; ++tile) {
          const int64_t r0 = tile * kTileR;
          const int64_t rn = std::min(kTileR, rows - r0);
          int32_t acc[kTileT][kTileR] = {};
          for (int64_t k0 = 0; k0 < k; k0 += kBlockK) {
            const int64_t kn = std::min(kBlockK, k - k0);
            for (int64_t i = 0; i < tn; ++i) {
              const int8_t* qa = g.a->q.data() + (t0 + i) * k + k0;
              for (int64_t j = 0; j < rn; ++j) acc[i][j] += dot_block(qa, g.w->q.data() + (r0 + j) * k + k0, kn);
            }
          }
          for (int64_t i = 0; i < tn; ++i) {
            const int64_t t = t0 + i;
            const float sa = g.a->scale[static_cast<size_t>(t)];
            for (int64_t j = 0; j < rn; ++j) {
              const int64_t r = r0 + j;
              const float sw = g.w->scale[static_cast<size_t>(r)];
              const float v1 = static_cast<float>(acc[i][j]) * sa;
              const float v = g.bias != nullptr ? std::fma(v1, sw, g.bias[r]) : v1 * sw;
              g.y[t * rows + r] = round_to_output(v, g.out);
              if (g.acc != nullptr) g.acc[t * rows + r] = acc[i][j];
            }
          }
        }
      }
    };
    if (g.pool != nullptr && g.pool->size() > 1) {
      g.pool->parallel_for(n_tiles, 4, run);
    } else {
      run(0, n_tiles, 0);
    }
  }
};

}  // namespace

const Int8GemmKernel& sequential_fma_kernel() {
  static const SequentialFma k;
  return k;
}

}  // namespace frugal::quant::w8a8
