// FluxBin's GEMV with SIMD (quant/fluxbin.h, gemv_simd). No tables: per call u_k[j] = c_k[j] x_j
// and the group sums U_k[g] = sum_j u_k[j] are computed once, and each row's sign bits become
// lane masks directly (LoadMaskBits; one mask register load per 16 columns on AVX-512). With
// s_j = 2 b_j - 1 for the stored bit b_j,
//   sum_j s_j u_j = 2 sum_{j: b_j = 1} u_j - U_k[g],
// so a row adds the masked u of each basis, multiplies the group's vector sum once by r_k into a
// vector accumulator, and reduces across lanes once per row; the U terms are a scalar per group.
// The salient columns (hybrid) are a dot of their nibbles with the gathered x, 8 lanes at a time
// where the target has them. The result differs from gemv_lut's only by the order of float
// additions.
#include "frugal/quant/simd_config.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "frugal/quant/simd_fluxbin.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cstring>

#include "frugal/core/half.h"
#include "frugal/quant/fluxbin.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace frugal::quant::fluxbin::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Mask of columns j .. j+N-1 of a group from its sign bits (bit j%8 of byte j/8 onward); `bits`
// has 8 readable bytes past the last one used, as LoadMaskBits asks.
template <class D>
HWY_INLINE hn::Mask<D> sign_mask(D d, const uint8_t* bits, int j) {
  constexpr size_t kN = hn::MaxLanes(D());
  if constexpr (kN >= 8) {
    return hn::LoadMaskBits(d, bits + j / 8);
  } else {
    const uint8_t b[8] = {static_cast<uint8_t>(bits[j / 8] >> (j % 8)), 0, 0, 0, 0, 0, 0, 0};
    return hn::LoadMaskBits(d, b);
  }
}

// The two row scales r_1, r_2 of a block (f16 at p): one vector conversion where the target has
// one (F16C on AVX2 and up), instead of two scalar bit manipulations.
HWY_INLINE void row_scales(const uint8_t* p, float& r1, float& r2) {
  const hn::CappedTag<float, 2> d2;
  if constexpr (hn::MaxLanes(hn::CappedTag<float, 2>()) >= 2) {
    const hn::Rebind<hwy::float16_t, decltype(d2)> dh;
    const auto v = hn::PromoteTo(d2, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
    r1 = hn::GetLane(v);
    r2 = hn::ExtractLane(v, 1);
  } else {
    uint16_t rh[2];
    std::memcpy(rh, p, 4);
    r1 = fp16_to_f32(rh[0]);
    r2 = fp16_to_f32(rh[1]);
  }
}

// Salient part of one row and group where the target has 8 float lanes and `salient` is a
// multiple of 8: each 4 bytes of nibbles go to 8 lanes by variable shifts; the lanes hold
// (q - 8) x_t and add up in `acc`, scaled by the group's f16 scale `sc`.
template <class D8, class V8>
HWY_INLINE V8 salient_lanes(D8 d8, const uint8_t* codes, const float* xg, int salient, float sc, V8 acc) {
  const hn::RebindToUnsigned<D8> du;
  const hn::RebindToSigned<D8> di;
  const auto shifts = hn::Iota(du, 0) * hn::Set(du, 4u);
  auto sum = hn::Zero(d8);
  for (int t = 0; t < salient; t += 8) {
    uint32_t word;
    std::memcpy(&word, codes + t / 2, 4);
    const auto q = hn::And(hn::Shr(hn::Set(du, word), shifts), hn::Set(du, 15u));
    const auto qf = hn::ConvertTo(d8, hn::Sub(hn::BitCast(di, q), hn::Set(di, 8)));
    sum = hn::MulAdd(qf, hn::LoadU(d8, xg + t), sum);
  }
  return hn::MulAdd(hn::Set(d8, sc), sum, acc);
}

void GemvSigns(const View& v, const float* x, float* y, int64_t row_begin, int64_t row_end,
               std::vector<float>& scratch) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<hwy::float16_t, decltype(d)> dh;
  constexpr int kN = static_cast<int>(hn::MaxLanes(hn::ScalableTag<float>()));
  static_assert(kGroup % (2 * kN) == 0, "a group is a whole number of vector pairs");
  const int64_t cols = v.cols;
  const int64_t groups = cols / kGroup;
  const int salient = v.salient;
  const int64_t srb = salient_row_bytes(salient);
  scratch.resize(static_cast<size_t>(2 * cols + 2 * groups + groups * salient));
  float* u = scratch.data();          // u_1 for all columns, then u_2
  float* usum = u + 2 * cols;         // per group: U_1, U_2
  float* xs = usum + 2 * groups;      // per group: x at the salient columns
  for (int k = 0; k < kBases; ++k) {
    const uint16_t* c = v.col_scales + k * cols;
    float* uk = u + k * cols;
    for (int64_t g = 0; g < groups; ++g) {
      auto s = hn::Zero(d);
      for (int64_t j = g * kGroup; j < (g + 1) * kGroup; j += kN) {
        const auto cj = hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(c + j)));
        const auto uj = hn::Mul(cj, hn::LoadU(d, x + j));
        hn::StoreU(uj, d, uk + j);
        s = hn::Add(s, uj);
      }
      usum[2 * g + k] = hn::GetLane(hn::SumOfLanes(d, s));
    }
  }
  for (int64_t g = 0; g < groups; ++g) {
    for (int t = 0; t < salient; ++t) xs[g * salient + t] = x[g * kGroup + v.salient_idx[g * salient + t]];
  }

  const hn::CappedTag<float, 8> d8;
  constexpr bool kLanes8 = hn::MaxLanes(hn::CappedTag<float, 8>()) == 8;
  const bool salient8 = salient > 0 && salient % 8 == 0;
  alignas(64) uint8_t bits[kBases * kSignBytes + 8] = {};
  for (int64_t o = row_begin; o < row_end; ++o) {
    const uint8_t* row = v.blocks + o * groups * kBlockBytes;
    const uint8_t* srow = salient > 0 ? v.salient_vals + o * groups * srb : nullptr;
    auto acc1 = hn::Zero(d), acc2 = hn::Zero(d);
    auto sal8 = hn::Zero(d8);
    float corr = 0.f, sal = 0.f;
    for (int64_t g = 0; g < groups; ++g) {
      const uint8_t* blk = row + g * kBlockBytes;
      std::memcpy(bits, blk, kBases * kSignBytes);
      float r1, r2;
      row_scales(blk + kBases * kSignBytes, r1, r2);
      const float* u1 = u + g * kGroup;
      const float* u2 = u + cols + g * kGroup;
      auto s1a = hn::Zero(d), s1b = hn::Zero(d), s2a = hn::Zero(d), s2b = hn::Zero(d);
      for (int j = 0; j < kGroup; j += 2 * kN) {
        s1a = hn::Add(s1a, hn::IfThenElseZero(sign_mask(d, bits, j), hn::LoadU(d, u1 + j)));
        s2a = hn::Add(s2a, hn::IfThenElseZero(sign_mask(d, bits + kSignBytes, j), hn::LoadU(d, u2 + j)));
        s1b = hn::Add(s1b, hn::IfThenElseZero(sign_mask(d, bits, j + kN), hn::LoadU(d, u1 + j + kN)));
        s2b = hn::Add(s2b, hn::IfThenElseZero(sign_mask(d, bits + kSignBytes, j + kN), hn::LoadU(d, u2 + j + kN)));
      }
      acc1 = hn::MulAdd(hn::Set(d, r1), hn::Add(s1a, s1b), acc1);
      acc2 = hn::MulAdd(hn::Set(d, r2), hn::Add(s2a, s2b), acc2);
      corr += r1 * usum[2 * g] + r2 * usum[2 * g + 1];
      if constexpr (kLanes8) {
        if (salient8) {
          const uint8_t* p = srow + g * srb;
          uint16_t sh;
          std::memcpy(&sh, p, 2);
          sal8 = salient_lanes(d8, p + 2, xs + g * salient, salient, fp16_to_f32(sh), sal8);
          continue;
        }
      }
      if (salient > 0) {
        const uint8_t* p = srow + g * srb;
        const float* xg = xs + g * salient;
        uint16_t sh;
        std::memcpy(&sh, p, 2);
        float sa = 0.f;
        for (int t = 0; t < salient; t += 2) {
          const uint8_t q = p[2 + t / 2];
          sa += static_cast<float>((q & 15) - 8) * xg[t] + static_cast<float>((q >> 4) - 8) * xg[t + 1];
        }
        sal += fp16_to_f32(sh) * sa;
      }
    }
    if constexpr (kLanes8) {
      if (salient8) sal = hn::GetLane(hn::SumOfLanes(d8, sal8));
    }
    y[o] = 2.f * hn::GetLane(hn::SumOfLanes(d, hn::Add(acc1, acc2))) - corr + sal;
  }
}

}  // namespace frugal::quant::fluxbin::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace frugal::quant::fluxbin {

HWY_EXPORT(GemvSigns);

void gemv_simd(const View& v, const float* x, float* y, int64_t row_begin, int64_t row_end,
               std::vector<float>& scratch) {
  HWY_DYNAMIC_DISPATCH(GemvSigns)(v, x, y, row_begin, row_end, scratch);
}

}  // namespace frugal::quant::fluxbin
#endif  // HWY_ONCE
