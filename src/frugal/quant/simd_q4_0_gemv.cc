// Q4_0 weight rows against activations in the Q8 group layout (simd_kernels.h): the decode
// (one token) product, where every weight byte is read once and the kernel must keep up with
// memory.
//
// Why a layout of its own: with Q8_0 activations, each Q4_0 block needs its signed codes built
// (nibble - 8), the sign trick, and its two fp16 scales gathered; per block that is more work
// than the memory system leaves time for. Here the codes stay unsigned (0..15) and the -8 is
// folded into a per-block float term c = -8 * d * sum(y), prepared once per matmul; the
// activation scales are floats already; 8 weight scales are gathered with one permute.
//
// AVX-512 (AVX3 targets): two blocks fill one 512-bit register (each block's 16 bytes broadcast
// to two 128-bit lanes, the second shifted right by 4: low nibbles = elements 0..15, high =
// 16..31, so the activation codes are read in plain element order); u8*i8 products reduce to
// 16 int32 lanes, 8 per block, which are converted and scaled lane-wise (no horizontal sums
// inside the loop). AVX2: one block per 256-bit register the same way. Other targets run the
// scalar definition (and matmul keeps its general Q4_0 x Q8_0 path there).
#include "frugal/quant/simd_config.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "frugal/quant/simd_q4_0_gemv.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstring>

#include "frugal/quant/blocks.h"
#include "frugal/quant/simd_common-inl.h"
#include "frugal/quant/simd_kernels.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace frugal::quant::HWY_NAMESPACE {

#undef FRUGAL_Q4G_WIDE
#if HWY_ARCH_X86 && (HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL)
#define FRUGAL_Q4G_WIDE 1
#endif

using fast::Q8Group;

#if FRUGAL_Q4G_WIDE

HWY_INLINE __mmask64 byte_mask(int64_t bytes) {
  if (bytes <= 0) return 0;
  if (bytes >= 64) return ~__mmask64{0};
  return (__mmask64{1} << bytes) - 1;
}

struct WideConsts {
  __m512i scale_idx;   // words: the fp16 scales of 8 consecutive Q4_0 blocks (18-byte stride)
  __m512i shifts;      // words: 0 in 128-bit lanes 0 and 2, 4 in lanes 1 and 3
  __m512i nibble;      // bytes 0x0F
  __m512i ones;        // words 1
  __m512i lane_idx[4]; // pair p: lanes 0..7 <- scale 2p, lanes 8..15 <- scale 2p+1
};

HWY_INLINE WideConsts wide_consts() {
  alignas(64) static constexpr uint16_t kScaleIdx[32] = {0, 9, 18, 27, 36, 45, 54, 63};
  alignas(64) static constexpr uint16_t kShifts[32] = {0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4,
                                                       4, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0,
                                                       0, 0, 4, 4, 4, 4, 4, 4, 4, 4};
  WideConsts k;
  k.scale_idx = _mm512_load_si512(kScaleIdx);
  k.shifts = _mm512_load_si512(kShifts);
  k.nibble = _mm512_set1_epi8(0x0F);
  k.ones = _mm512_set1_epi16(1);
  for (int p = 0; p < 4; ++p) {
    k.lane_idx[p] = _mm512_inserti64x4(_mm512_set1_epi32(2 * p), _mm256_set1_epi32(2 * p + 1), 1);
  }
  return k;
}

// Adds the dot of `nb` (1..8) consecutive weight blocks at `xb` with group `g` to the
// accumulators. kPartial: fewer than 8 blocks remain; nothing past them is read.
// kVnni: one vpdpbusd instead of maddubs + madd (only inside functions compiled for VNNI).
template <bool kPartial, bool kVnni>
HWY_INLINE void group_dot(const WideConsts& k, const uint8_t* xb, const Q8Group& g, int nb,
                          __m512* acc, __m256& acc_c) {
  __m512i lo;
  __m512i hi;
  if constexpr (kPartial) {
    const int64_t bytes = int64_t{nb} * static_cast<int64_t>(sizeof(BlockQ4_0));
    lo = _mm512_maskz_loadu_epi8(byte_mask(bytes), xb);
    hi = _mm512_maskz_loadu_epi8(byte_mask(bytes - 64), xb + 64);
  } else {
    lo = _mm512_loadu_si512(xb);
    hi = _mm512_loadu_si512(xb + 64);
  }
  const __m256 dx =
      _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutex2var_epi16(lo, k.scale_idx, hi)));
  acc_c = _mm256_fmadd_ps(dx, _mm256_loadu_ps(g.c), acc_c);
  const __m512 s = _mm512_castps256_ps512(_mm256_mul_ps(dx, _mm256_loadu_ps(g.d)));
  const auto* b = reinterpret_cast<const BlockQ4_0*>(xb);
  for (int p = 0; p < 4; ++p) {
    if (kPartial && 2 * p >= nb) break;
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[2 * p].qs));
    const __m128i q1 = (!kPartial || 2 * p + 1 < nb)
                           ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[2 * p + 1].qs))
                           : _mm_setzero_si128();
    __m512i w = _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(q0), 0xFF00, q1);
    w = _mm512_and_si512(_mm512_srlv_epi16(w, k.shifts), k.nibble);
    const __m512i y = _mm512_loadu_si512(g.qs + 64 * p);
    __m512i d;
    if constexpr (kVnni) {
      // Written as asm: VNNI is not in the AVX3 target's feature set; runs only where the CPU
      // reports it (cpu_has_vnni).
      d = _mm512_setzero_si512();
      asm("vpdpbusd %2, %1, %0" : "+v"(d) : "v"(w), "v"(y));
    } else {
      d = _mm512_madd_epi16(_mm512_maddubs_epi16(w, y), k.ones);
    }
    acc[p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_permutexvar_ps(k.lane_idx[p], s), acc[p]);
  }
}

template <bool kVnni>
HWY_INLINE float dot_row(int64_t n, const void* vx, const void* vy) {
  const WideConsts k = wide_consts();
  const auto* xb = static_cast<const uint8_t*>(vx);
  const auto* g = static_cast<const Q8Group*>(vy);
  const int64_t nb = n / kQK;
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
  __m256 acc_c = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    group_dot<false, kVnni>(k, xb + i * static_cast<int64_t>(sizeof(BlockQ4_0)), g[i / 8], 8, acc,
                            acc_c);
  }
  if (i < nb) {
    group_dot<true, kVnni>(k, xb + i * static_cast<int64_t>(sizeof(BlockQ4_0)), g[i / 8],
                           static_cast<int>(nb - i), acc, acc_c);
  }
  const __m512 a = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
  return _mm512_reduce_add_ps(a) + hsum_ps(acc_c);
}

#if defined(__GNUC__) || defined(__clang__)
static bool cpu_has_vnni() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni") != 0;
  }();
  return has;
}
#else
static bool cpu_has_vnni() { return false; }
#endif

void VecDotQ4_0Q8Group(int64_t n, float* s, const void* vx, const void* vy) {
  *s = cpu_has_vnni() ? dot_row<true>(n, vx, vy) : dot_row<false>(n, vx, vy);
}

bool IsWide() { return true; }

#elif FRUGAL_QUANT_AVX2  // AVX2 (no AVX-512): one block per 256-bit register

// The same unsigned-code layout, one block at a time: the block's 16 bytes give low nibbles
// (elements 0..15) in the low 128-bit lane and high nibbles (16..31) in the high lane, matching
// the activation codes in element order; maddubs + madd reduce to 8 int32 lanes, scaled lane-wise
// by d_x * d_y. Two accumulators keep two blocks in flight; the -8 offset is the c term.
void VecDotQ4_0Q8Group(int64_t n, float* s, const void* vx, const void* vy) {
  const auto* x = static_cast<const BlockQ4_0*>(vx);
  const auto* g = static_cast<const Q8Group*>(vy);
  const int64_t nb = n / kQK;
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  float acc_c = 0.f;
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const Q8Group& g0 = g[i / 8];
    const Q8Group& g1 = g[(i + 1) / 8];
    const int k0 = static_cast<int>(i % 8), k1 = static_cast<int>((i + 1) % 8);
    const float d0 = half_to_float(x[i].d), d1 = half_to_float(x[i + 1].d);
    const __m256i p0 =
        dot_u8_i8(nibbles_32(x[i].qs), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g0.qs + k0 * kQK)));
    const __m256i p1 = dot_u8_i8(nibbles_32(x[i + 1].qs),
                                 _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g1.qs + k1 * kQK)));
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(d0 * g0.d[k0]), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(d1 * g1.d[k1]), acc1);
    acc_c += d0 * g0.c[k0] + d1 * g1.c[k1];
  }
  for (; i < nb; ++i) {
    const Q8Group& gi = g[i / 8];
    const int k = static_cast<int>(i % 8);
    const float d = half_to_float(x[i].d);
    const __m256i p =
        dot_u8_i8(nibbles_32(x[i].qs), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(gi.qs + k * kQK)));
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d * gi.d[k]), acc0);
    acc_c += d * gi.c[k];
  }
  *s = hsum_ps(_mm256_add_ps(acc0, acc1)) + acc_c;
}

bool IsWide() { return true; }

#else  // the scalar definition of the product

void VecDotQ4_0Q8Group(int64_t n, float* s, const void* vx, const void* vy) {
  const auto* x = static_cast<const BlockQ4_0*>(vx);
  const auto* g = static_cast<const Q8Group*>(vy);
  float sum = 0.f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const Q8Group& gi = g[i / 8];
    const int8_t* y = gi.qs + (i % 8) * kQK;
    int32_t si = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      si += (x[i].qs[j] & 0x0F) * y[j] + (x[i].qs[j] >> 4) * y[j + kQK / 2];
    }
    const float dx = fp16_to_f32(x[i].d);
    sum += dx * (gi.d[i % 8] * static_cast<float>(si)) + dx * gi.c[i % 8];
  }
  *s = sum;
}

bool IsWide() { return false; }

#endif  // FRUGAL_Q4G_WIDE

}  // namespace frugal::quant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace frugal::quant::fast {

HWY_EXPORT(VecDotQ4_0Q8Group);
HWY_EXPORT(IsWide);

int64_t q8_group_bytes(int64_t n) {
  return (n + kQ8GroupElems - 1) / kQ8GroupElems * static_cast<int64_t>(sizeof(Q8Group));
}

void from_float_q8_group(const float* src, void* dst, int64_t n) {
  auto* g = static_cast<Q8Group*>(dst);
  const int64_t nb = n / kQK;
  BlockQ8_0 blocks[8];
  for (int64_t i0 = 0; i0 < nb; i0 += 8) {
    Q8Group& out = g[i0 / 8];
    std::memset(&out, 0, sizeof(out));
    const int64_t count = std::min<int64_t>(8, nb - i0);
    from_float_q8_0(src + i0 * kQK, blocks, count * kQK);
    for (int64_t b = 0; b < count; ++b) {
      std::memcpy(out.qs + b * kQK, blocks[b].qs, kQK);
      int32_t sum = 0;
      for (int j = 0; j < kQK; ++j) sum += blocks[b].qs[j];
      out.d[b] = fp16_to_f32(blocks[b].d);
      out.c[b] = -8.f * out.d[b] * static_cast<float>(sum);
      out.o[b] = -8 * sum;
    }
  }
}

void vec_dot_q4_0_q8_group(int64_t n, float* s, const void* x, const void* y) {
  HWY_DYNAMIC_DISPATCH(VecDotQ4_0Q8Group)(n, s, x, y);
}

bool q4_0_q8_group_is_wide() { return HWY_DYNAMIC_DISPATCH(IsWide)(); }

}  // namespace frugal::quant::fast
#endif  // HWY_ONCE
