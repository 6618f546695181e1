// Dequantization, dot products and gemm tiles of the 32-element formats (Q8_0, Q4_0, Q4_1,
// Q5_0, Q5_1, IQ4_NL as weights against Q8_0/Q8_1 activations; Q8_1 dequantization).
//
// AVX2: a block's 32 codes are expanded to one 256-bit register of bytes; the integer dot with
// the activation block is maddubs (u8*i8 pairs to i16) + madd (to i32), then one FMA with the
// product of the two fp16 scales. Signed codes use the sign trick (|x| and y*sign(x)).
// In a gemm tile every expanded weight block is reused against RY activation blocks.
#include "frugal/quant/simd_config.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "frugal/quant/simd_block32.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "frugal/quant/blocks.h"
#include "frugal/quant/reference.h"
#include "frugal/quant/simd_common-inl.h"
#include "frugal/quant/simd_kernels.h"
#include "frugal/quant/simd_panel-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace frugal::quant::HWY_NAMESPACE {

#if FRUGAL_QUANT_AVX2

// Format descriptions: block types, codes as bytes, scale (and offset) of a weight block.
// kSigned: codes are signed bytes (dot via the sign trick); else unsigned (plain maddubs).
// kOffset: y = d*q + m; the activation carries s = d*sum(q) (Q8_1).
struct FmtQ8_0 {
  using X = BlockQ8_0;
  using Y = BlockQ8_0;
  static constexpr bool kSigned = true;
  static constexpr bool kOffset = false;
  static constexpr int kI16Group = 1;  // maddubs results that fit an int16 sum
  static HWY_INLINE __m256i codes(const X& b) { return loadu_256(b.qs); }
};
struct FmtQ4_0 {
  using X = BlockQ4_0;
  using Y = BlockQ8_0;
  static constexpr bool kSigned = true;
  static constexpr bool kOffset = false;
  static constexpr int kI16Group = 8;  // maddubs results that fit an int16 sum
  static HWY_INLINE __m256i codes(const X& b) {
    return _mm256_sub_epi8(nibbles_32(b.qs), _mm256_set1_epi8(8));
  }
};
struct FmtQ4_1 {
  using X = BlockQ4_1;
  using Y = BlockQ8_1;
  static constexpr bool kSigned = false;
  static constexpr bool kOffset = true;
  static constexpr int kI16Group = 8;  // maddubs results that fit an int16 sum
  static HWY_INLINE __m256i codes(const X& b) { return nibbles_32(b.qs); }
};
struct FmtQ5_0 {
  using X = BlockQ5_0;
  using Y = BlockQ8_0;
  static constexpr bool kSigned = true;
  static constexpr bool kOffset = false;
  static constexpr int kI16Group = 8;  // maddubs results that fit an int16 sum
  static HWY_INLINE __m256i codes(const X& b) {
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    // code - 16 = nibble - 16 where the fifth bit is clear, nibble where it is set.
    const __m256i clear16 = _mm256_andnot_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10));
    return _mm256_sub_epi8(nibbles_32(b.qs), clear16);
  }
};
struct FmtQ5_1 {
  using X = BlockQ5_1;
  using Y = BlockQ8_1;
  static constexpr bool kSigned = false;
  static constexpr bool kOffset = true;
  static constexpr int kI16Group = 4;  // maddubs results that fit an int16 sum
  static HWY_INLINE __m256i codes(const X& b) {
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    return _mm256_or_si256(nibbles_32(b.qs),
                           _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10)));
  }
};
struct FmtIQ4_NL {
  using X = BlockIQ4_NL;
  using Y = BlockQ8_0;
  static constexpr bool kSigned = true;
  static constexpr bool kOffset = false;
  static constexpr int kI16Group = 1;  // maddubs results that fit an int16 sum
  static HWY_INLINE __m256i codes(const X& b) {
    const __m128i grid = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues));
    return _mm256_shuffle_epi8(_mm256_set_m128i(grid, grid), nibbles_32(b.qs));
  }
};

// Activation blocks as weights, for dequantization only.
struct FmtQ8_1 {
  using X = BlockQ8_1;
  static constexpr bool kOffset = false;
  static HWY_INLINE __m256i codes(const X& b) { return loadu_256(b.qs); }
};

template <class F>
void to_float(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const typename F::X*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    if constexpr (F::kOffset) {
      store_32<true>(F::codes(x[i]), half_to_float(x[i].d), half_to_float(x[i].m), dst + i * kQK);
    } else {
      store_32<false>(F::codes(x[i]), half_to_float(x[i].d), 0.f, dst + i * kQK);
    }
  }
}

template <class F>
HWY_INLINE float offset_term(const typename F::X& x, const typename F::Y& y) {
  if constexpr (F::kOffset) {
    return half_to_float(x.m) * half_to_float(y.s);
  } else {
    return 0.f;
  }
}

// The int32 dot of one block pair, as 8 partial sums.
template <class F>
HWY_INLINE __m256i block_sums(const typename F::X& x, const typename F::Y& y) {
  const __m256i c = F::codes(x);
  const __m256i yq = loadu_256(y.qs);
  if constexpr (F::kSigned) {
    return dot_u8_i8(_mm256_sign_epi8(c, c), _mm256_sign_epi8(yq, c));
  } else {
    return dot_u8_i8(c, yq);
  }
}

// Eight fp16 values at a fixed byte stride, as floats.
HWY_INLINE __m256 halves8(const uint16_t* first, size_t stride_bytes) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(first);
  uint16_t h[8];
  for (int i = 0; i < 8; ++i) std::memcpy(&h[i], p + i * stride_bytes, 2);
  const __m128i v =
      _mm_setr_epi16(static_cast<short>(h[0]), static_cast<short>(h[1]), static_cast<short>(h[2]),
                     static_cast<short>(h[3]), static_cast<short>(h[4]), static_cast<short>(h[5]),
                     static_cast<short>(h[6]), static_cast<short>(h[7]));
  return _mm256_cvtph_ps(v);
}

// Eight blocks at a time: the blocks' int32 sums are reduced into one vector (lane b: block
// b), so the scales are converted and applied 8 at a time instead of broadcast per block.
template <class F>
HWY_INLINE float dot_row(int64_t n, const void* vx, const void* vy) {
  using X = typename F::X;
  using Y = typename F::Y;
  const X* x = static_cast<const X*>(vx);
  const Y* y = static_cast<const Y*>(vy);
  const int64_t nb = n / kQK;
  __m256 acc = _mm256_setzero_ps();
  __m256 acc_offset = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    __m256i p[8];
    for (int b = 0; b < 8; ++b) p[b] = block_sums<F>(x[i + b], y[i + b]);
    const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]);
    const __m256i h23 = _mm256_hadd_epi32(p[2], p[3]);
    const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]);
    const __m256i h67 = _mm256_hadd_epi32(p[6], p[7]);
    const __m256i lo = _mm256_hadd_epi32(h01, h23);  // blocks 0-3 (low halves) | 0-3 (high halves)
    const __m256i hi = _mm256_hadd_epi32(h45, h67);
    const __m256i sums = _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20),
                                          _mm256_permute2x128_si256(lo, hi, 0x31));
    const __m256 dx = halves8(&x[i].d, sizeof(X));
    const __m256 dy = halves8(&y[i].d, sizeof(Y));
    acc = _mm256_fmadd_ps(_mm256_mul_ps(dx, dy), _mm256_cvtepi32_ps(sums), acc);
    if constexpr (F::kOffset) {
      acc_offset =
          _mm256_fmadd_ps(halves8(&x[i].m, sizeof(X)), halves8(&y[i].s, sizeof(Y)), acc_offset);
    }
  }
  float tail = 0.f;
  for (; i < nb; ++i) {
    const float d = half_to_float(x[i].d) * half_to_float(y[i].d);
    tail +=
        d * static_cast<float>(hsum_epi32(block_sums<F>(x[i], y[i]))) + offset_term<F>(x[i], y[i]);
  }
  return hsum_ps(_mm256_add_ps(acc, acc_offset)) + tail;
}

// Panel policy (simd_panel-inl.h): 8 weight rows x 32 elements per unit.
template <class F>
struct Block32Panel {
  struct Packed {
    __m256i codes[8];  // register k, lane r: codes 4k..4k+3 of row r (signed formats: signed)
    __m256 d;          // lane r: scale of row r
    __m256 m;          // lane r: offset of row r (offset formats)
  };
  static constexpr int64_t kUnitElems = kQK;
  static constexpr int kChunkUnits = 32;
  static constexpr int kGroupCols = 4;
  static constexpr int kRows = kPanelRows;

  static HWY_INLINE void pack(const uint8_t* const* rows, int nr, int64_t unit, Packed* out) {
    alignas(32) float d[kPanelRows];
    alignas(32) float m[kPanelRows];
    for (int r = 0; r < kPanelRows; ++r) {
      const auto& b = reinterpret_cast<const typename F::X*>(rows[r])[unit];
      out->codes[r] = F::codes(b);
      d[r] = r < nr ? half_to_float(b.d) : 0.f;
      if constexpr (F::kOffset) m[r] = r < nr ? half_to_float(b.m) : 0.f;
    }
    transpose_8x8_epi32(out->codes);
    out->d = _mm256_load_ps(d);
    if constexpr (F::kOffset) out->m = _mm256_load_ps(m);
  }

  template <int RY>
  static HWY_INLINE void compute(const Packed* units, int count, int64_t unit0,
                                 const uint8_t* const* cols, __m256* acc) {
    using Y = typename F::Y;
    const Y* yc[RY];
    __m256 a[RY];
    for (int c = 0; c < RY; ++c) {
      yc[c] = reinterpret_cast<const Y*>(cols[c]) + unit0;
      a[c] = acc[c];
    }
    const __m256i ones = ones_i16();
    for (int u = 0; u < count; ++u) {
      const Packed& p = units[u];
      __m256i s32[RY];
      __m256i s16[RY];
      for (int c = 0; c < RY; ++c) {
        s32[c] = _mm256_setzero_si256();
        s16[c] = _mm256_setzero_si256();
      }
      for (int k = 0; k < 8; ++k) {
        const __m256i xk = p.codes[k];
        const __m256i xa = F::kSigned ? _mm256_sign_epi8(xk, xk) : xk;
        for (int c = 0; c < RY; ++c) {
          __m256i yk = broadcast4(yc[c][u].qs + 4 * k);
          if constexpr (F::kSigned) yk = _mm256_sign_epi8(yk, xk);
          s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(xa, yk));
        }
        if ((k + 1) % F::kI16Group == 0) {
          for (int c = 0; c < RY; ++c) {
            s32[c] = _mm256_add_epi32(s32[c], _mm256_madd_epi16(s16[c], ones));
            s16[c] = _mm256_setzero_si256();
          }
        }
      }
      for (int c = 0; c < RY; ++c) {
        const __m256 dy = _mm256_set1_ps(half_to_float(yc[c][u].d));
        a[c] = _mm256_fmadd_ps(_mm256_mul_ps(p.d, dy), _mm256_cvtepi32_ps(s32[c]), a[c]);
        if constexpr (F::kOffset) {
          a[c] = _mm256_fmadd_ps(p.m, _mm256_set1_ps(half_to_float(yc[c][u].s)), a[c]);
        }
      }
    }
    for (int c = 0; c < RY; ++c) acc[c] = a[c];
  }
};

template <class F>
void gemm(int64_t n, float* s, size_t ldc, const void* x, size_t bx, int nrx, const void* y,
          size_t by, int nry) {
  panel_gemm<Block32Panel<F>>(n, s, ldc, x, bx, nrx, y, by, nry);
}

#define FRUGAL_BLOCK32_TO_FLOAT(Name, Fmt, ref) \
  void ToFloat##Name(const void* src, float* dst, int64_t n) { to_float<Fmt>(src, dst, n); }

#define FRUGAL_BLOCK32_KERNELS(Name, Fmt, ref)                                        \
  void VecDot##Name(int64_t n, float* s, const void* x, const void* y) {              \
    *s = dot_row<Fmt>(n, x, y);                                                       \
  }                                                                                   \
  void Gemm##Name(int64_t n, float* s, size_t ldc, const void* x, size_t bx, int nrx, \
                  const void* y, size_t by, int nry) {                                \
    gemm<Fmt>(n, s, ldc, x, bx, nrx, y, by, nry);                                     \
  }

#else  // generic targets: the scalar reference, one pair of rows at a time

#define FRUGAL_BLOCK32_TO_FLOAT(Name, Fmt, ref) \
  void ToFloat##Name(const void* src, float* dst, int64_t n) { ref(src, dst, n); }

#define FRUGAL_BLOCK32_KERNELS(Name, Fmt, ref)                                              \
  void VecDot##Name(int64_t n, float* s, const void* x, const void* y) { ref(n, s, x, y); } \
  void Gemm##Name(int64_t n, float* s, size_t ldc, const void* x, size_t bx, int nrx,       \
                  const void* y, size_t by, int nry) {                                      \
    for (int c = 0; c < nry; ++c) {                                                         \
      for (int r = 0; r < nrx; ++r) {                                                       \
        ref(n, s + c * ldc + r, static_cast<const uint8_t*>(x) + r * bx,                    \
            static_cast<const uint8_t*>(y) + c * by);                                       \
      }                                                                                     \
    }                                                                                       \
  }

#endif  // FRUGAL_QUANT_AVX2

FRUGAL_BLOCK32_KERNELS(Q8_0, FmtQ8_0, vec_dot_q8_0_q8_0_ref)
FRUGAL_BLOCK32_KERNELS(Q4_0, FmtQ4_0, vec_dot_q4_0_q8_0_ref)
FRUGAL_BLOCK32_KERNELS(Q4_1, FmtQ4_1, vec_dot_q4_1_q8_1_ref)
FRUGAL_BLOCK32_KERNELS(Q5_0, FmtQ5_0, vec_dot_q5_0_q8_0_ref)
FRUGAL_BLOCK32_KERNELS(Q5_1, FmtQ5_1, vec_dot_q5_1_q8_1_ref)
FRUGAL_BLOCK32_KERNELS(IQ4_NL, FmtIQ4_NL, vec_dot_iq4_nl_q8_0_ref)
#undef FRUGAL_BLOCK32_KERNELS

FRUGAL_BLOCK32_TO_FLOAT(Q8_0, FmtQ8_0, dequantize_q8_0_ref)
FRUGAL_BLOCK32_TO_FLOAT(Q8_1, FmtQ8_1, dequantize_q8_1_ref)
FRUGAL_BLOCK32_TO_FLOAT(Q4_0, FmtQ4_0, dequantize_q4_0_ref)
FRUGAL_BLOCK32_TO_FLOAT(Q4_1, FmtQ4_1, dequantize_q4_1_ref)
FRUGAL_BLOCK32_TO_FLOAT(Q5_0, FmtQ5_0, dequantize_q5_0_ref)
FRUGAL_BLOCK32_TO_FLOAT(Q5_1, FmtQ5_1, dequantize_q5_1_ref)
FRUGAL_BLOCK32_TO_FLOAT(IQ4_NL, FmtIQ4_NL, dequantize_iq4_nl_ref)
#undef FRUGAL_BLOCK32_TO_FLOAT

}  // namespace frugal::quant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace frugal::quant::fast {

#define FRUGAL_BLOCK32_EXPORT(Name, name)                                              \
  HWY_EXPORT(VecDot##Name);                                                            \
  HWY_EXPORT(Gemm##Name);                                                              \
  void vec_dot_##name(int64_t n, float* s, const void* x, const void* y) {             \
    HWY_DYNAMIC_DISPATCH(VecDot##Name)(n, s, x, y);                                    \
  }                                                                                    \
  void gemm_##name(int64_t n, float* s, size_t ldc, const void* x, size_t bx, int nrx, \
                   const void* y, size_t by, int nry) {                                \
    HWY_DYNAMIC_DISPATCH(Gemm##Name)(n, s, ldc, x, bx, nrx, y, by, nry);               \
  }

FRUGAL_BLOCK32_EXPORT(Q8_0, q8_0)
FRUGAL_BLOCK32_EXPORT(Q4_0, q4_0)
FRUGAL_BLOCK32_EXPORT(Q4_1, q4_1)
FRUGAL_BLOCK32_EXPORT(Q5_0, q5_0)
FRUGAL_BLOCK32_EXPORT(Q5_1, q5_1)
FRUGAL_BLOCK32_EXPORT(IQ4_NL, iq4_nl)
#undef FRUGAL_BLOCK32_EXPORT

#define FRUGAL_BLOCK32_EXPORT_TO_FLOAT(Name, name)               \
  HWY_EXPORT(ToFloat##Name);                                     \
  void to_float_##name(const void* src, float* dst, int64_t n) { \
    HWY_DYNAMIC_DISPATCH(ToFloat##Name)(src, dst, n);            \
  }

FRUGAL_BLOCK32_EXPORT_TO_FLOAT(Q8_0, q8_0)
FRUGAL_BLOCK32_EXPORT_TO_FLOAT(Q8_1, q8_1)
FRUGAL_BLOCK32_EXPORT_TO_FLOAT(Q4_0, q4_0)
FRUGAL_BLOCK32_EXPORT_TO_FLOAT(Q4_1, q4_1)
FRUGAL_BLOCK32_EXPORT_TO_FLOAT(Q5_0, q5_0)
FRUGAL_BLOCK32_EXPORT_TO_FLOAT(Q5_1, q5_1)
FRUGAL_BLOCK32_EXPORT_TO_FLOAT(IQ4_NL, iq4_nl)
#undef FRUGAL_BLOCK32_EXPORT_TO_FLOAT

}  // namespace frugal::quant::fast
#endif  // HWY_ONCE
