// FluxBin's GEMV with SIMD (quant/fluxbin.h): gemv_simd in float and gemv_bytes (further below),
// what the CPU backend runs, with the u as bytes. gemv_simd: no tables: per call u_k[j] = c_k[j] x_j
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

#include <algorithm>
#include <cmath>
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


// gemv_bytes: per group and basis the magnitudes |u_j| as bytes q_j = round(|u_j| / d_k[g]) with
// d_k[g] = max_j |u_j| / 255, and the signs of u as a bit mask N_k[g]; a row's basis-k term is
// then d (2 S - Q) with S the sum of q_j over the set bits of (row bits XOR N) and Q the sum of
// all q_j: a masked byte load and a sum of absolute differences against zero (psadbw) per 64
// columns on AVX-512 instead of four masked float adds. Targets with fewer than 8 float lanes
// run GemvSigns.
constexpr float kMinMax = 1e-35f;

void GemvBytes(const View& v, const float* x, float* y, int64_t row_begin, int64_t row_end,
               std::vector<float>& scratch) {
  constexpr int kNf = static_cast<int>(hn::MaxLanes(hn::ScalableTag<float>()));
  if constexpr (kNf < 8) {
    GemvSigns(v, x, y, row_begin, row_end, scratch);
  } else {
    const hn::ScalableTag<float> d;
    const hn::RebindToSigned<decltype(d)> di;
    const hn::Rebind<hwy::float16_t, decltype(d)> dh;
    const hn::Rebind<uint8_t, decltype(d)> dq;  // kNf bytes
    const hn::ScalableTag<uint8_t> d8u;
    const hn::Repartition<uint64_t, decltype(d8u)> d64;
    const hn::Repartition<int32_t, decltype(d8u)> d32;
    const hn::Repartition<float, decltype(d8u)> df;
    constexpr int kN8 = static_cast<int>(hn::MaxLanes(hn::ScalableTag<uint8_t>()));
    static_assert(kGroup % kN8 == 0 && kGroup % kNf == 0, "a group is whole vectors");
    const int64_t cols = v.cols;
    const int64_t groups = cols / kGroup;
    const int salient = v.salient;
    const int64_t srb = salient_row_bytes(salient);
    // In floats: q (2 * cols bytes), N (2 * groups * 16 bytes and 8 of padding), d and d * Q per
    // group and basis, x at the salient columns.
    const size_t qf = static_cast<size_t>(2 * cols / 4), nf = static_cast<size_t>(2 * groups * 4 + 2);
    scratch.resize(qf + nf + 4 * groups + groups * salient);
    uint8_t* q = reinterpret_cast<uint8_t*>(scratch.data());
    uint8_t* nb = reinterpret_cast<uint8_t*>(scratch.data() + qf);
    float* dk = scratch.data() + qf + nf;  // per group: d_1, d_2
    float* ek = dk + 2 * groups;           // per group: d_1 Q_1, d_2 Q_2
    float* xs = ek + 2 * groups;
    std::memset(nb, 0, nf * sizeof(float));
    alignas(64) float u[kGroup];
    for (int64_t g = 0; g < groups; ++g) {
      for (int k = 0; k < kBases; ++k) {
        const uint16_t* c = v.col_scales + k * cols + g * kGroup;
        auto mx = hn::Zero(d);
        for (int j = 0; j < kGroup; j += kNf) {
          const auto uj = hn::Mul(hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(c + j))),
                                  hn::LoadU(d, x + g * kGroup + j));
          hn::Store(uj, d, u + j);
          mx = hn::Max(mx, hn::Abs(uj));
        }
        // A floor on the largest |u| keeps 255 / m finite (all q are then 0 or tiny for u below
        // it, which moves the sum by less than kGroup * kMinMax).
        const float m = std::max(hn::GetLane(hn::MaxOfLanes(d, mx)), kMinMax);
        const auto inv = hn::Set(d, 255.f / m);
        uint8_t* qg = q + k * cols + g * kGroup;
        uint8_t* ng = nb + (g * 2 + k) * kSignBytes;
        auto qsum = hn::Zero(di);
        for (int j = 0; j < kGroup; j += kNf) {
          const auto uj = hn::Load(d, u + j);
          const auto qi = hn::Max(hn::Min(hn::NearestInt(hn::Mul(hn::Abs(uj), inv)), hn::Set(di, 255)), hn::Zero(di));
          qsum = hn::Add(qsum, qi);
          hn::StoreU(hn::DemoteTo(dq, qi), dq, qg + j);
          hn::StoreMaskBits(d, hn::Lt(uj, hn::Zero(d)), ng + j / 8);
        }
        const float dd = m / 255.f;
        dk[2 * g + k] = dd;
        ek[2 * g + k] = dd * static_cast<float>(hn::GetLane(hn::SumOfLanes(di, qsum)));
      }
      for (int t = 0; t < salient; ++t) xs[g * salient + t] = x[g * kGroup + v.salient_idx[g * salient + t]];
    }

    const hn::CappedTag<float, 8> d8;
    const bool salient8 = salient > 0 && salient % 8 == 0;
    alignas(64) uint8_t bits[kBases * kSignBytes + 8] = {};
    for (int64_t o = row_begin; o < row_end; ++o) {
      const uint8_t* row = v.blocks + o * groups * kBlockBytes;
      const uint8_t* srow = salient > 0 ? v.salient_vals + o * groups * srb : nullptr;
      auto acc = hn::Zero(df);
      auto sal8 = hn::Zero(d8);
      float corr = 0.f, sal = 0.f;
      for (int64_t g = 0; g < groups; ++g) {
        const uint8_t* blk = row + g * kBlockBytes;
        std::memcpy(bits, blk, kBases * kSignBytes);
        float r[2];
        row_scales(blk + kBases * kSignBytes, r[0], r[1]);
        for (int k = 0; k < kBases; ++k) {
          const uint8_t* qg = q + k * cols + g * kGroup;
          const uint8_t* ng = nb + (g * 2 + k) * kSignBytes;
          auto s64 = hn::Zero(d64);
          for (int j = 0; j < kGroup; j += kN8) {
            const auto mk = hn::Xor(hn::LoadMaskBits(d8u, bits + k * kSignBytes + j / 8), hn::LoadMaskBits(d8u, ng + j / 8));
            s64 = hn::Add(s64, hn::SumsOf8(hn::IfThenElseZero(mk, hn::LoadU(d8u, qg + j))));
          }
          // Each 64-bit sum is below 2^15: its low 32-bit half holds it, the high half is 0.
          acc = hn::MulAdd(hn::Set(df, r[k] * dk[2 * g + k]), hn::ConvertTo(df, hn::BitCast(d32, s64)), acc);
          corr += r[k] * ek[2 * g + k];
        }
        if (salient > 0) {
          const uint8_t* p = srow + g * srb;
          uint16_t sh;
          std::memcpy(&sh, p, 2);
          if (salient8) {
            sal8 = salient_lanes(d8, p + 2, xs + g * salient, salient, fp16_to_f32(sh), sal8);
          } else {
            const float* xg = xs + g * salient;
            float sa = 0.f;
            for (int t = 0; t < salient; t += 2) {
              const uint8_t b = p[2 + t / 2];
              sa += static_cast<float>((b & 15) - 8) * xg[t] + static_cast<float>((b >> 4) - 8) * xg[t + 1];
            }
            sal += fp16_to_f32(sh) * sa;
          }
        }
      }
      if (salient8) sal = hn::GetLane(hn::SumOfLanes(d8, sal8));
      y[o] = 2.f * hn::GetLane(hn::SumOfLanes(df, acc)) - corr + sal;
    }
  }
}

}  // namespace frugal::quant::fluxbin::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace frugal::quant::fluxbin {

HWY_EXPORT(GemvSigns);
HWY_EXPORT(GemvBytes);

void gemv_bytes(const View& v, const float* x, float* y, int64_t row_begin, int64_t row_end,
                std::vector<float>& scratch) {
  HWY_DYNAMIC_DISPATCH(GemvBytes)(v, x, y, row_begin, row_end, scratch);
}


void gemv_simd(const View& v, const float* x, float* y, int64_t row_begin, int64_t row_end,
               std::vector<float>& scratch) {
  HWY_DYNAMIC_DISPATCH(GemvSigns)(v, x, y, row_begin, row_end, scratch);
}

}  // namespace frugal::quant::fluxbin
#endif  // HWY_ONCE
