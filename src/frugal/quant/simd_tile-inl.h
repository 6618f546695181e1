// Turns a gemm tile kernel templated on its tile shape into one taking the shape at run time
// (per target, Highway re-inclusion idiom). Shapes larger than the kernel's maximum are split.

#if defined(FRUGAL_QUANT_SIMD_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FRUGAL_QUANT_SIMD_TILE_INL_H_
#undef FRUGAL_QUANT_SIMD_TILE_INL_H_
#else
#define FRUGAL_QUANT_SIMD_TILE_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace frugal::quant::HWY_NAMESPACE {

// The arguments of a gemm tile, as in type_traits.h's GemmTileFn.
struct TileArgs {
  int64_t n;
  float* s;
  size_t ldc;
  const uint8_t* x;
  size_t bx;
  const uint8_t* y;
  size_t by;
};

// K::template run<RX, RY>(const TileArgs&) for the runtime shape (nrx, nry), 1 <= n <= max.
template <class K, int MaxRX, int MaxRY, int RX = 1, int RY = 1>
HWY_INLINE void run_tile_shape(int nrx, int nry, const TileArgs& a) {
  if constexpr (RX <= MaxRX) {
    if constexpr (RY > MaxRY) {
      run_tile_shape<K, MaxRX, MaxRY, RX + 1, 1>(nrx, nry, a);
    } else {
      if (nrx == RX && nry == RY) {
        K::template run<RX, RY>(a);
        return;
      }
      run_tile_shape<K, MaxRX, MaxRY, RX, RY + 1>(nrx, nry, a);
    }
  }
}

template <class K, int MaxRX, int MaxRY>
HWY_INLINE void run_gemm(int64_t n, float* s, size_t ldc, const void* x, size_t bx, int nrx,
                         const void* y, size_t by, int nry) {
  for (int r0 = 0; r0 < nrx; r0 += MaxRX) {
    for (int c0 = 0; c0 < nry; c0 += MaxRY) {
      const int rx = nrx - r0 < MaxRX ? nrx - r0 : MaxRX;
      const int ry = nry - c0 < MaxRY ? nry - c0 : MaxRY;
      const TileArgs a{n,   s + static_cast<size_t>(c0) * ldc + r0,
                       ldc, static_cast<const uint8_t*>(x) + static_cast<size_t>(r0) * bx,
                       bx,  static_cast<const uint8_t*>(y) + static_cast<size_t>(c0) * by,
                       by};
      run_tile_shape<K, MaxRX, MaxRY>(rx, ry, a);
    }
  }
}

}  // namespace frugal::quant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
