// Kernels of the plain float formats (F32, F16, BF16): conversions, dot products and gemm
// tiles. Everything is Highway code; F16 goes through the F16C conversions on x86.
#include "frugal/quant/simd_config.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "frugal/quant/simd_float.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "frugal/quant/simd_common-inl.h"
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

// Scalable vectors cannot live in arrays; there the tile is a loop of dot products.
template <class E>
void gemm_float(int64_t n, float* s, size_t ldc, const void* x, size_t bx, int nrx, const void* y,
                size_t by, int nry) {
#if HWY_HAVE_SCALABLE
  using T = typename E::T;
  for (int c = 0; c < nry; ++c) {
    for (int r = 0; r < nrx; ++r) {
      s[c * ldc + r] =
          dot<E>(reinterpret_cast<const T*>(static_cast<const uint8_t*>(x) + r * bx),
                 reinterpret_cast<const T*>(static_cast<const uint8_t*>(y) + c * by), n);
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
