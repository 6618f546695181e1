// Kernels of the plain float formats (F32, F16, BF16): conversions, dot products and gemm
// tiles. Everything is Highway code; F16 goes through the F16C conversions on x86.
#include "frugal/quant/simd_config.h"

#include <algorithm>
#include <type_traits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "frugal/quant/simd_float.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "frugal/quant/simd_common-inl.h"
#include "frugal/quant/simd_panel-inl.h"
#include "frugal/quant/simd_tile-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace frugal::quant::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;

// Element loaders: a vector of floats from element i, and one element as a float.
struct F32Elems {
  using T = float;
  static HWY_INLINE hn::Vec<DF> load(DF d, const T* p) { return hn::LoadU(d, p); }
  static HWY_INLINE float one(const T* p) { return *p; }
};
struct F16Elems {
  using T = uint16_t;
  static HWY_INLINE hn::Vec<DF> load(DF d, const T* p) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
  }
  static HWY_INLINE float one(const T* p) { return half_to_float(*p); }
};
struct BF16Elems {
  using T = uint16_t;
  static HWY_INLINE hn::Vec<DF> load(DF d, const T* p) {
    const hn::RebindToUnsigned<DF> du32;
    const hn::Rebind<uint16_t, DF> du16;
    return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du32, hn::LoadU(du16, p))));
  }
  static HWY_INLINE float one(const T* p) { return bf16_to_f32(*p); }
};

HWY_INLINE float reduce(DF d, hn::Vec<DF> v) { return hn::GetLane(hn::SumOfLanes(d, v)); }

template <class E>
HWY_INLINE float dot(const typename E::T* a, const typename E::T* b, int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  auto s0 = hn::Zero(d);
  auto s1 = hn::Zero(d);
  auto s2 = hn::Zero(d);
  auto s3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    s0 = hn::MulAdd(E::load(d, a + i), E::load(d, b + i), s0);
    s1 = hn::MulAdd(E::load(d, a + i + N), E::load(d, b + i + N), s1);
    s2 = hn::MulAdd(E::load(d, a + i + 2 * N), E::load(d, b + i + 2 * N), s2);
    s3 = hn::MulAdd(E::load(d, a + i + 3 * N), E::load(d, b + i + 3 * N), s3);
  }
  for (; i + N <= n; i += N) s0 = hn::MulAdd(E::load(d, a + i), E::load(d, b + i), s0);
  float sum = reduce(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3)));
  for (; i < n; ++i) sum += E::one(a + i) * E::one(b + i);
  return sum;
}

// dot<E>(a, b[c], n) for nry activation rows b at once (nry <= kMaxDotRows), the weight row a
// loaded and converted once for all of them. The activations come as floats holding exactly the
// values E's loads would produce from them (rounded to E and expanded back once per call), so
// every FMA sees the operands dot<E> sees, in the same accumulators and order: each result is
// bitwise dot<E>'s, and a batch equals the same rows computed one at a time.
constexpr int kMaxDotRows = 4;
template <class E, int RY>
HWY_INLINE void dot_rows(const typename E::T* a, const float* const* b, int64_t n, float* out, size_t ls) {
#if HWY_HAVE_SCALABLE
  // No arrays of scalable vectors: one row at a time, with dot<E>'s accumulators.
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int c = 0; c < RY; ++c) {
    auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
    int64_t i = 0;
    for (; i + 4 * N <= n; i += 4 * N) {
      s0 = hn::MulAdd(E::load(d, a + i), hn::LoadU(d, b[c] + i), s0);
      s1 = hn::MulAdd(E::load(d, a + i + N), hn::LoadU(d, b[c] + i + N), s1);
      s2 = hn::MulAdd(E::load(d, a + i + 2 * N), hn::LoadU(d, b[c] + i + 2 * N), s2);
      s3 = hn::MulAdd(E::load(d, a + i + 3 * N), hn::LoadU(d, b[c] + i + 3 * N), s3);
    }
    for (; i + N <= n; i += N) s0 = hn::MulAdd(E::load(d, a + i), hn::LoadU(d, b[c] + i), s0);
    float sum = reduce(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3)));
    for (; i < n; ++i) sum += E::one(a + i) * b[c][i];
    out[c * ls] = sum;
  }
#else
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  hn::Vec<DF> s0[RY], s1[RY], s2[RY], s3[RY];
  for (int c = 0; c < RY; ++c) s0[c] = s1[c] = s2[c] = s3[c] = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    const auto a0 = E::load(d, a + i), a1 = E::load(d, a + i + N);
    const auto a2 = E::load(d, a + i + 2 * N), a3 = E::load(d, a + i + 3 * N);
    for (int c = 0; c < RY; ++c) {
      s0[c] = hn::MulAdd(a0, hn::LoadU(d, b[c] + i), s0[c]);
      s1[c] = hn::MulAdd(a1, hn::LoadU(d, b[c] + i + N), s1[c]);
      s2[c] = hn::MulAdd(a2, hn::LoadU(d, b[c] + i + 2 * N), s2[c]);
      s3[c] = hn::MulAdd(a3, hn::LoadU(d, b[c] + i + 3 * N), s3[c]);
    }
  }
  for (; i + N <= n; i += N) {
    const auto a0 = E::load(d, a + i);
    for (int c = 0; c < RY; ++c) s0[c] = hn::MulAdd(a0, hn::LoadU(d, b[c] + i), s0[c]);
  }
  for (int c = 0; c < RY; ++c) {
    float sum = reduce(d, hn::Add(hn::Add(s0[c], s1[c]), hn::Add(s2[c], s3[c])));
    for (int64_t k = i; k < n; ++k) sum += E::one(a + k) * b[c][k];
    out[c * ls] = sum;
  }
#endif
}

template <class E>
void vec_dot_rows(int64_t n, float* s, size_t ls, const void* x, const float* y, size_t ly, int nry) {
  using T = typename E::T;
  const T* a = static_cast<const T*>(x);
  for (int c0 = 0; c0 < nry; c0 += kMaxDotRows) {
    const float* b[kMaxDotRows];
    const int m = std::min(kMaxDotRows, nry - c0);
    for (int c = 0; c < m; ++c) b[c] = y + static_cast<size_t>(c0 + c) * ly;
    float* out = s + static_cast<size_t>(c0) * ls;
    switch (m) {
      case 4: dot_rows<E, 4>(a, b, n, out, ls); break;
      case 3: dot_rows<E, 3>(a, b, n, out, ls); break;
      case 2: dot_rows<E, 2>(a, b, n, out, ls); break;
      default: dot_rows<E, 1>(a, b, n, out, ls); break;
    }
  }
}

void VecDotRowsF16(int64_t n, float* s, size_t ls, const void* x, const float* y, size_t ly, int nry) {
  vec_dot_rows<F16Elems>(n, s, ls, x, y, ly, nry);
}
void VecDotRowsF32(int64_t n, float* s, size_t ls, const void* x, const float* y, size_t ly, int nry) {
  vec_dot_rows<F32Elems>(n, s, ls, x, y, ly, nry);
}
void VecDotRowsBF16(int64_t n, float* s, size_t ls, const void* x, const float* y, size_t ly, int nry) {
  vec_dot_rows<BF16Elems>(n, s, ls, x, y, ly, nry);
}

void VecDotF32(int64_t n, float* s, const void* x, const void* y) {
  *s = dot<F32Elems>(static_cast<const float*>(x), static_cast<const float*>(y), n);
}
void VecDotF16(int64_t n, float* s, const void* x, const void* y) {
  *s = dot<F16Elems>(static_cast<const uint16_t*>(x), static_cast<const uint16_t*>(y), n);
}
void VecDotBF16(int64_t n, float* s, const void* x, const void* y) {
  *s = dot<BF16Elems>(static_cast<const uint16_t*>(x), static_cast<const uint16_t*>(y), n);
}

// RX weight rows x RY activation rows: each loaded vector feeds RY (or RX) FMAs.
template <class E>
struct FloatTile {
  template <int RX, int RY>
  static HWY_INLINE void run(const TileArgs& a) {
    using T = typename E::T;
    const DF d;
    const int64_t N = static_cast<int64_t>(hn::Lanes(d));
    const T* xr[RX];
    const T* yc[RY];
    for (int r = 0; r < RX; ++r) xr[r] = reinterpret_cast<const T*>(a.x + r * a.bx);
    for (int c = 0; c < RY; ++c) yc[c] = reinterpret_cast<const T*>(a.y + c * a.by);
    hn::Vec<DF> acc[RX][RY];
    for (int r = 0; r < RX; ++r) {
      for (int c = 0; c < RY; ++c) acc[r][c] = hn::Zero(d);
    }
    int64_t i = 0;
    for (; i + N <= a.n; i += N) {
      hn::Vec<DF> yv[RY];
      for (int c = 0; c < RY; ++c) yv[c] = E::load(d, yc[c] + i);
      for (int r = 0; r < RX; ++r) {
        const auto xv = E::load(d, xr[r] + i);
        for (int c = 0; c < RY; ++c) acc[r][c] = hn::MulAdd(xv, yv[c], acc[r][c]);
      }
    }
    for (int r = 0; r < RX; ++r) {
      for (int c = 0; c < RY; ++c) {
        float sum = reduce(d, acc[r][c]);
        for (int64_t k = i; k < a.n; ++k) sum += E::one(xr[r] + k) * E::one(yc[c] + k);
        a.s[c * a.ldc + r] = sum;
      }
    }
  }
};

#if FRUGAL_QUANT_AVX2
// 8 elements as floats (AVX2 width, whatever Highway's native width on this target).
HWY_INLINE __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
HWY_INLINE __m256 load8(const uint16_t* p, F16Elems) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
HWY_INLINE __m256 load8(const uint16_t* p, BF16Elems) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
template <class E>
HWY_INLINE __m256 load8(const typename E::T* p) {
  if constexpr (std::is_same_v<E, F32Elems>) {
    return load8(p);
  } else {
    return load8(p, E());
  }
}

// Panel policy (simd_panel-inl.h): 16 weight rows x 8 elements per unit, converted to f32 once
// per call. Each activation chunk is converted into a small f32 buffer, then every element is
// broadcast against the 16 rows (two vectors): 2 FMAs per broadcast, 12 accumulators for
// 6 activation rows, and no conversions in the inner loop.
template <class E>
struct FloatPanel {
  using T = typename E::T;
  struct Packed {
    __m256 v[8][2];  // element j of the unit, vector h, lane r: row 8h + r
  };
  static constexpr int kRows = 16;
  static constexpr int64_t kUnitElems = 8;
  static constexpr int kChunkUnits = 16;
  static constexpr int kGroupCols = 6;

  static HWY_INLINE void pack(const uint8_t* const* rows, int nr, int64_t unit, Packed* out) {
    for (int h = 0; h < 2; ++h) {
      __m256i r[8];
      for (int i = 0; i < 8; ++i) {
        r[i] =
            _mm256_castps_si256(load8<E>(reinterpret_cast<const T*>(rows[8 * h + i]) + 8 * unit));
      }
      transpose_8x8_epi32(r);
      for (int j = 0; j < 8; ++j) out->v[j][h] = _mm256_castsi256_ps(r[j]);
    }
  }

  template <int RY>
  static HWY_INLINE void compute(const Packed* units, int count, int64_t unit0,
                                 const uint8_t* const* cols, __m256* acc) {
    // F32 activations are broadcast straight from their rows; 16-bit ones are converted once.
    constexpr bool kConvert = !std::is_same_v<E, F32Elems>;
    alignas(32) float yf[kConvert ? RY : 1][kChunkUnits * 8];
    const float* yrow[RY];
    __m256 a[RY][2];
    for (int c = 0; c < RY; ++c) {
      const T* yc = reinterpret_cast<const T*>(cols[c]) + 8 * unit0;
      if constexpr (kConvert) {
        for (int u = 0; u < count; ++u) _mm256_store_ps(yf[c] + 8 * u, load8<E>(yc + 8 * u));
        yrow[c] = yf[c];
      } else {
        yrow[c] = yc;
      }
      a[c][0] = acc[2 * c];
      a[c][1] = acc[2 * c + 1];
    }
    for (int u = 0; u < count; ++u) {
      for (int j = 0; j < 8; ++j) {
        const __m256 x0 = units[u].v[j][0];
        const __m256 x1 = units[u].v[j][1];
        for (int c = 0; c < RY; ++c) {
          const __m256 b = _mm256_broadcast_ss(yrow[c] + 8 * u + j);
          a[c][0] = _mm256_fmadd_ps(x0, b, a[c][0]);
          a[c][1] = _mm256_fmadd_ps(x1, b, a[c][1]);
        }
      }
    }
    for (int c = 0; c < RY; ++c) {
      acc[2 * c] = a[c][0];
      acc[2 * c + 1] = a[c][1];
    }
  }
};
#endif  // FRUGAL_QUANT_AVX2

template <class E>
void gemm_float(int64_t n, float* s, size_t ldc, const void* x, size_t bx, int nrx, const void* y,
                size_t by, int nry) {
#if FRUGAL_QUANT_AVX2 || HWY_HAVE_SCALABLE
  using T = typename E::T;
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  const uint8_t* yb = static_cast<const uint8_t*>(y);
#endif
#if FRUGAL_QUANT_AVX2
  panel_gemm<FloatPanel<E>>(n, s, ldc, x, bx, nrx, y, by, nry);
  const int64_t done = n - n % 8;
  if (done == n) return;
  for (int c = 0; c < nry; ++c) {  // the last n % 8 elements
    for (int r = 0; r < nrx; ++r) {
      const T* xr = reinterpret_cast<const T*>(xb + r * bx);
      const T* yc = reinterpret_cast<const T*>(yb + c * by);
      float tail = 0.f;
      for (int64_t k = done; k < n; ++k) tail += E::one(xr + k) * E::one(yc + k);
      s[c * ldc + r] += tail;
    }
  }
#elif HWY_HAVE_SCALABLE
  // Scalable vectors cannot live in arrays; there the tile is a loop of dot products.
  for (int c = 0; c < nry; ++c) {
    for (int r = 0; r < nrx; ++r) {
      s[c * ldc + r] = dot<E>(reinterpret_cast<const T*>(xb + r * bx),
                              reinterpret_cast<const T*>(yb + c * by), n);
    }
  }
#else
  run_gemm<FloatTile<E>, 4, 3>(n, s, ldc, x, bx, nrx, y, by, nry);
#endif
}

void GemmF32(int64_t n, float* s, size_t ldc, const void* x, size_t bx, int nrx, const void* y,
             size_t by, int nry) {
  gemm_float<F32Elems>(n, s, ldc, x, bx, nrx, y, by, nry);
}
void GemmF16(int64_t n, float* s, size_t ldc, const void* x, size_t bx, int nrx, const void* y,
             size_t by, int nry) {
  gemm_float<F16Elems>(n, s, ldc, x, bx, nrx, y, by, nry);
}
void GemmBF16(int64_t n, float* s, size_t ldc, const void* x, size_t bx, int nrx, const void* y,
              size_t by, int nry) {
  gemm_float<BF16Elems>(n, s, ldc, x, bx, nrx, y, by, nry);
}

void ToFloatF16(const void* src, float* dst, int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const uint16_t* h = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(F16Elems::load(d, h + i), d, dst + i);
  for (; i < n; ++i) dst[i] = fp16_to_f32(h[i]);
}

void ToFloatBF16(const void* src, float* dst, int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const uint16_t* h = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(BF16Elems::load(d, h + i), d, dst + i);
  for (; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
}

void FromFloatF16(const float* src, void* dst, int64_t n) {
  uint16_t* h = static_cast<uint16_t*>(dst);
  int64_t i = 0;
#if FRUGAL_QUANT_AVX2
  // F16C rounds to nearest even like the scalar reference (exact for every finite input).
  for (; i + 8 <= n; i += 8) {
    const __m128i v =
        _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i), v);
  }
#endif
  for (; i < n; ++i) h[i] = f32_to_fp16(src[i]);
}

// Round to nearest even on the bit pattern; NaNs stay NaN (quiet bit forced), as the reference.
void FromFloatBF16(const float* src, void* dst, int64_t n) {
  const DF d;
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<uint16_t, DF> d16;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  uint16_t* h = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto u = hn::BitCast(du, hn::LoadU(d, src + i));
    const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
    const auto rounded = hn::ShiftRight<16>(hn::Add(u, hn::Add(hn::Set(du, 0x7fffu), lsb)));
    const auto quiet_nan = hn::Or(hn::ShiftRight<16>(u), hn::Set(du, 64u));
    const auto is_nan = hn::Gt(hn::And(u, hn::Set(du, 0x7fffffffu)), hn::Set(du, 0x7f800000u));
    const auto r = hn::IfThenElse(is_nan, quiet_nan, rounded);
    hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, r)), d16, h + i);
  }
  for (; i < n; ++i) h[i] = f32_to_bf16(src[i]);
}

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace frugal::quant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "frugal/quant/simd_kernels.h"
#include "frugal/quant/simd_targets.h"

namespace frugal::quant {
namespace fast {

HWY_EXPORT(VecDotF32);
HWY_EXPORT(VecDotF16);
HWY_EXPORT(VecDotBF16);
HWY_EXPORT(VecDotRowsF16);
HWY_EXPORT(VecDotRowsF32);
HWY_EXPORT(VecDotRowsBF16);
HWY_EXPORT(GemmF32);
HWY_EXPORT(GemmF16);
HWY_EXPORT(GemmBF16);
HWY_EXPORT(ToFloatF16);
HWY_EXPORT(ToFloatBF16);
HWY_EXPORT(FromFloatF16);
HWY_EXPORT(FromFloatBF16);
HWY_EXPORT(TargetName);

void vec_dot_f32(int64_t n, float* s, const void* x, const void* y) {
  HWY_DYNAMIC_DISPATCH(VecDotF32)(n, s, x, y);
}
void vec_dot_f16(int64_t n, float* s, const void* x, const void* y) {
  HWY_DYNAMIC_DISPATCH(VecDotF16)(n, s, x, y);
}
void vec_dot_bf16(int64_t n, float* s, const void* x, const void* y) {
  HWY_DYNAMIC_DISPATCH(VecDotBF16)(n, s, x, y);
}
void vec_dot_rows_f16(int64_t n, float* s, size_t ls, const void* x, const float* y, size_t ly, int nry) {
  HWY_DYNAMIC_DISPATCH(VecDotRowsF16)(n, s, ls, x, y, ly, nry);
}
void vec_dot_rows_f32(int64_t n, float* s, size_t ls, const void* x, const float* y, size_t ly, int nry) {
  HWY_DYNAMIC_DISPATCH(VecDotRowsF32)(n, s, ls, x, y, ly, nry);
}
void vec_dot_rows_bf16(int64_t n, float* s, size_t ls, const void* x, const float* y, size_t ly, int nry) {
  HWY_DYNAMIC_DISPATCH(VecDotRowsBF16)(n, s, ls, x, y, ly, nry);
}
void gemm_f32(int64_t n, float* s, size_t ldc, const void* x, size_t bx, int nrx, const void* y,
              size_t by, int nry) {
  HWY_DYNAMIC_DISPATCH(GemmF32)(n, s, ldc, x, bx, nrx, y, by, nry);
}
void gemm_f16(int64_t n, float* s, size_t ldc, const void* x, size_t bx, int nrx, const void* y,
              size_t by, int nry) {
  HWY_DYNAMIC_DISPATCH(GemmF16)(n, s, ldc, x, bx, nrx, y, by, nry);
}
void gemm_bf16(int64_t n, float* s, size_t ldc, const void* x, size_t bx, int nrx, const void* y,
               size_t by, int nry) {
  HWY_DYNAMIC_DISPATCH(GemmBF16)(n, s, ldc, x, bx, nrx, y, by, nry);
}
void to_float_f16(const void* src, float* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(ToFloatF16)(src, dst, n);
}
void to_float_bf16(const void* src, float* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(ToFloatBF16)(src, dst, n);
}
void from_float_f16(const float* src, void* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(FromFloatF16)(src, dst, n);
}
void from_float_bf16(const float* src, void* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(FromFloatBF16)(src, dst, n);
}
const char* dispatched_target_name() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

}  // namespace fast

std::vector<int64_t> available_simd_targets() {
  std::vector<int64_t> out;
  // HWY_TARGETS is this file's compiled set; every kernel file includes simd_config.h first,
  // so they all share it.
  for (int64_t t = 1; t > 0 && t <= HWY_SCALAR; t <<= 1) {
    if ((HWY_TARGETS & t) && (hwy::SupportedTargets() & t)) out.push_back(t);
  }
  return out;
}

std::string simd_target_label(int64_t target) { return hwy::TargetName(target); }

void force_simd_target(int64_t target) { hwy::SetSupportedTargetsForTest(target); }

}  // namespace frugal::quant
#endif  // HWY_ONCE
