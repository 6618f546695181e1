// Highway kernels of TileMix's INT8 scores (int8_tile.h); this file is compiled once per SIMD
// target. Rows are SIMD lanes as in the float attention kernel (backend/cpu/simd_ops.cc).
//
// AVX-512 targets on a CPU with VNNI: one vpdpbusd (unsigned query bytes x signed key bytes,
// four products summed into each 32-bit lane) per four dimensions and key. Elsewhere the bytes
// of a word are widened to 32-bit lanes (four shifts and four multiplies per word).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "frugal/attention/tilemix/simd_int8.cc"
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS HWY_SSSE3
#endif
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <algorithm>
#include <cstring>

#include "frugal/attention/tilemix/int8_tile.h"

HWY_BEFORE_NAMESPACE();
namespace frugal::tilemix {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#undef FRUGAL_TILEMIX_WIDE
#if HWY_ARCH_X86 && (HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL)
#define FRUGAL_TILEMIX_WIDE 1
#endif

using DF = hn::ScalableTag<float>;
using DI = hn::ScalableTag<int32_t>;
using DU = hn::ScalableTag<uint32_t>;

void QuantizeQueryLanes(const float* qt, int rp, int dim, uint32_t* words, float* scales) {
  const DF df;
  const DI di;
  const DU du;
  const int N = static_cast<int>(hn::Lanes(df));
  const auto k127 = hn::Set(df, static_cast<float>(kCodeMax));
  const auto off = hn::Set(di, 128);
  for (int c = 0; c < rp; c += N) {
    auto m = hn::Zero(df);
    for (int e = 0; e < dim; ++e) m = hn::Max(m, hn::Abs(hn::LoadU(df, qt + static_cast<size_t>(e) * rp + c)));
    const auto pos = hn::Gt(m, hn::Zero(df));
    // Division where the row is not zero (no 127/0 computed in any lane).
    const auto inv = hn::IfThenElseZero(pos, hn::Div(k127, hn::IfThenElse(pos, m, k127)));
    hn::StoreU(hn::Div(m, k127), df, scales + c);
    for (int g = 0; g < dim / 4; ++g) {
      const float* x = qt + static_cast<size_t>(4 * g) * rp + c;
      const auto c0 = hn::Add(hn::NearestInt(hn::Mul(hn::LoadU(df, x), inv)), off);
      const auto c1 = hn::Add(hn::NearestInt(hn::Mul(hn::LoadU(df, x + rp), inv)), off);
      const auto c2 = hn::Add(hn::NearestInt(hn::Mul(hn::LoadU(df, x + 2 * static_cast<size_t>(rp)), inv)), off);
      const auto c3 = hn::Add(hn::NearestInt(hn::Mul(hn::LoadU(df, x + 3 * static_cast<size_t>(rp)), inv)), off);
      const auto w = hn::Or(hn::Or(c0, hn::ShiftLeft<8>(c1)), hn::Or(hn::ShiftLeft<16>(c2), hn::ShiftLeft<24>(c3)));
      hn::StoreU(hn::BitCast(du, w), du, words + static_cast<size_t>(g) * rp + c);
    }
  }
}

HWY_INLINE uint32_t KeyWord(const int8_t* kc, int g) {
  uint32_t w;
  std::memcpy(&w, kc + 4 * g, 4);
  return w;
}

// acc += sum over the four bytes of q (unsigned) x k (signed) in each 32-bit lane.
template <bool kVnni>
HWY_INLINE hn::Vec<DI> Dot4(hn::Vec<DI> acc, hn::Vec<DU> q, hn::Vec<DU> k) {
#if FRUGAL_TILEMIX_WIDE
  if constexpr (kVnni) {
    // Written as asm: VNNI is not in these targets' feature sets; runs only where the CPU has it.
    __m512i a = acc.raw;
    asm("vpdpbusd %2, %1, %0" : "+v"(a) : "v"(q.raw), "v"(k.raw));
    return hn::Vec<DI>{a};
  }
#endif
  const DI di;
  const auto byte = hn::Set(di, 0xFF);
  const auto qi = hn::BitCast(di, q);
  const auto ki = hn::BitCast(di, k);
  const auto q0 = hn::And(qi, byte);
  const auto q1 = hn::And(hn::ShiftRight<8>(qi), byte);
  const auto q2 = hn::And(hn::ShiftRight<16>(qi), byte);
  const auto q3 = hn::BitCast(di, hn::ShiftRight<24>(q));
  const auto k0 = hn::ShiftRight<24>(hn::ShiftLeft<24>(ki));
  const auto k1 = hn::ShiftRight<24>(hn::ShiftLeft<16>(ki));
  const auto k2 = hn::ShiftRight<24>(hn::ShiftLeft<8>(ki));
  const auto k3 = hn::ShiftRight<24>(ki);
  return hn::Add(acc, hn::Add(hn::Add(hn::Mul(q0, k0), hn::Mul(q1, k1)), hn::Add(hn::Mul(q2, k2), hn::Mul(q3, k3))));
}

// Scores of keys [key0, key0 + kKeys) (kKeys <= 8) for the lane group at row c: independent
// accumulators, so the multiply-adds of consecutive keys overlap.
template <bool kVnni, int kKeys>
HWY_INLINE void ScoreKeys(const QueryCodes& q, const KeyCodes& k, int32_t key0, int c, float* s) {
  const DF df;
  const DI di;
  const DU du;
  const int dim = q.head_dim;
  const int rp = q.rp;
  const int8_t* kc[kKeys];
  hn::Vec<DI> a[kKeys];
  for (int i = 0; i < kKeys; ++i) {
    kc[i] = k.codes + static_cast<int64_t>(key0 + i) * dim;
    a[i] = hn::Zero(di);
  }
  const uint32_t* w = q.words + c;
  for (int g = 0; g < dim / 4; ++g) {
    const auto qv = hn::LoadU(du, w + static_cast<size_t>(g) * rp);
    for (int i = 0; i < kKeys; ++i) a[i] = Dot4<kVnni>(a[i], qv, hn::Set(du, KeyWord(kc[i], g)));
  }
  const auto sq = hn::LoadU(df, q.scales + c);
  for (int i = 0; i < kKeys; ++i) {
    const int32_t j = key0 + i;
    const auto dot = hn::ConvertTo(df, hn::Sub(a[i], hn::Set(di, 128 * k.sums[j])));
    hn::StoreU(hn::Mul(hn::Mul(dot, sq), hn::Set(df, k.scales[j])), df, s + static_cast<size_t>(i) * rp + c);
  }
}

template <bool kVnni>
void Scores(const QueryCodes& q, const KeyCodes& k, int32_t k0, int nk, float* s) {
  const DF df;
  const int N = static_cast<int>(hn::Lanes(df));
  for (int c = 0; c < q.rp; c += N) {
    int j = 0;
    for (; j + 8 <= nk; j += 8) ScoreKeys<kVnni, 8>(q, k, k0 + j, c, s + static_cast<size_t>(j) * q.rp);
    for (; j + 2 <= nk; j += 2) ScoreKeys<kVnni, 2>(q, k, k0 + j, c, s + static_cast<size_t>(j) * q.rp);
    if (j < nk) ScoreKeys<kVnni, 1>(q, k, k0 + j, c, s + static_cast<size_t>(j) * q.rp);
  }
}

#if FRUGAL_TILEMIX_WIDE && (defined(__GNUC__) || defined(__clang__))
static bool CpuHasVnni() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni") != 0;
  }();
  return has;
}
#else
static bool CpuHasVnni() { return false; }
#endif

void BlockScores(const QueryCodes& q, const KeyCodes& k, int32_t k0, int nk, float* s) {
  if (CpuHasVnni()) {
    Scores<true>(q, k, k0, nk, s);
  } else {
    Scores<false>(q, k, k0, nk, s);
  }
}

const char* DotPath() { return CpuHasVnni() ? "vnni" : "widened"; }

}  // namespace HWY_NAMESPACE
}  // namespace frugal::tilemix
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace frugal::tilemix {

HWY_EXPORT(QuantizeQueryLanes);
HWY_EXPORT(BlockScores);
HWY_EXPORT(DotPath);

void quantize_query_lanes(const float* qt, int rp, int dim, uint32_t* words, float* scales) {
  HWY_DYNAMIC_DISPATCH(QuantizeQueryLanes)(qt, rp, dim, words, scales);
}
void block_scores(const QueryCodes& q, const KeyCodes& k, int32_t k0, int nk, float* s) {
  HWY_DYNAMIC_DISPATCH(BlockScores)(q, k, k0, nk, s);
}
const char* int8_dot_path() { return HWY_DYNAMIC_DISPATCH(DotPath)(); }

}  // namespace frugal::tilemix
#endif  // HWY_ONCE
