// Highway kernels for the CPU backend; this file is compiled once per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "frugal/backend/cpu/simd_ops.cc"
// SSSE3 is left out, as in the quant kernels: SSE4 covers the same CPUs.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS HWY_SSSE3
#endif
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "frugal/backend/cpu/simd_ops.h"
#include "frugal/core/half.h"
#include "frugal/quant/hbq.h"

HWY_BEFORE_NAMESPACE();
namespace frugal::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;

void RmsNormRows(const float* x, const float* w, int64_t n_rows, int64_t dim, float eps, float* y) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    auto s0 = hn::Zero(d), s1 = hn::Zero(d);
    int64_t i = 0;
    for (; i + 2 * N <= dim; i += 2 * N) {
      const auto a = hn::LoadU(d, xr + i);
      const auto b = hn::LoadU(d, xr + i + N);
      s0 = hn::MulAdd(a, a, s0);
      s1 = hn::MulAdd(b, b, s1);
    }
    double sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
    for (; i < dim; ++i) sum += static_cast<double>(xr[i]) * xr[i];
    const float scale = 1.0f / std::sqrt(static_cast<float>(sum / static_cast<double>(dim)) + eps);
    const auto vs = hn::Set(d, scale);
    i = 0;
    for (; i + N <= dim; i += N) {
      hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(d, xr + i), vs), hn::LoadU(d, w + i)), d, yr + i);
    }
    for (; i < dim; ++i) yr[i] = xr[i] * scale * w[i];
  }
}

void Swiglu(const float* gate, const float* up, int64_t n, float* out) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto one = hn::Set(d, 1.0f);
  // exp(-g) overflows past 88; silu is 0 to float precision long before that.
  const auto hi = hn::Set(d, 88.0f);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto g = hn::LoadU(d, gate + i);
    const auto e = hn::Exp(d, hn::Min(hn::Neg(g), hi));
    const auto s = hn::Div(g, hn::Add(one, e));
    hn::StoreU(hn::Mul(s, hn::LoadU(d, up + i)), d, out + i);
  }
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void Add(float* x, const float* y, int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Add(hn::LoadU(d, x + i), hn::LoadU(d, y + i)), d, x + i);
  for (; i < n; ++i) x[i] += y[i];
}

float DotF32(const float* a, const float* b, int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
    s1 = hn::MulAdd(hn::LoadU(d, a + i + N), hn::LoadU(d, b + i + N), s1);
    s2 = hn::MulAdd(hn::LoadU(d, a + i + 2 * N), hn::LoadU(d, b + i + 2 * N), s2);
    s3 = hn::MulAdd(hn::LoadU(d, a + i + 3 * N), hn::LoadU(d, b + i + 3 * N), s3);
  }
  for (; i + N <= n; i += N) s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
  float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void F16ToF32(const uint16_t* src, float* dst, int64_t n) {
  const DF d;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto* h = reinterpret_cast<const hwy::float16_t*>(src);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::PromoteTo(d, hn::LoadU(dh, h + i)), d, dst + i);
  for (; i < n; ++i) dst[i] = fp16_to_f32(src[i]);
}

// XOR of every 64-bit word in [p, p + n) (n a multiple of 4 vectors' worth is not required):
// four independent accumulators keep enough loads in flight to saturate memory.
uint64_t ReadXor(const uint64_t* p, int64_t n) {
  const hn::ScalableTag<uint64_t> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    a0 = hn::Xor(a0, hn::LoadU(d, p + i));
    a1 = hn::Xor(a1, hn::LoadU(d, p + i + N));
    a2 = hn::Xor(a2, hn::LoadU(d, p + i + 2 * N));
    a3 = hn::Xor(a3, hn::LoadU(d, p + i + 3 * N));
  }
  a0 = hn::Xor(hn::Xor(a0, a1), hn::Xor(a2, a3));
  alignas(64) uint64_t lanes[HWY_MAX_BYTES / sizeof(uint64_t)];
  hn::Store(a0, d, lanes);
  uint64_t r = 0;
  for (int64_t l = 0; l < N; ++l) r ^= lanes[l];
  for (; i < n; ++i) r ^= p[i];
  return r;
}

void RopeToken(float* x, int64_t n_heads, int64_t head_dim, int n_rot, bool neox,
               const float* cos_t, const float* sin_t) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t half = n_rot / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* xh = x + h * head_dim;
    int64_t i = 0;
    if (neox) {
      float* a = xh;
      float* b = xh + half;
      for (; i + N <= half; i += N) {
        const auto x0 = hn::LoadU(d, a + i), x1 = hn::LoadU(d, b + i);
        const auto c = hn::LoadU(d, cos_t + i), s = hn::LoadU(d, sin_t + i);
        hn::StoreU(hn::NegMulAdd(x1, s, hn::Mul(x0, c)), d, a + i);
        hn::StoreU(hn::MulAdd(x0, s, hn::Mul(x1, c)), d, b + i);
      }
      for (; i < half; ++i) {
        const float x0 = a[i], x1 = b[i];
        a[i] = x0 * cos_t[i] - x1 * sin_t[i];
        b[i] = x0 * sin_t[i] + x1 * cos_t[i];
      }
    } else {
      for (; i + N <= half; i += N) {
        hn::Vec<DF> x0, x1;
        hn::LoadInterleaved2(d, xh + 2 * i, x0, x1);
        const auto c = hn::LoadU(d, cos_t + i), s = hn::LoadU(d, sin_t + i);
        hn::StoreInterleaved2(hn::NegMulAdd(x1, s, hn::Mul(x0, c)), hn::MulAdd(x0, s, hn::Mul(x1, c)),
                              d, xh + 2 * i);
      }
      for (; i < half; ++i) {
        const float x0 = xh[2 * i], x1 = xh[2 * i + 1];
        xh[2 * i] = x0 * cos_t[i] - x1 * sin_t[i];
        xh[2 * i + 1] = x0 * sin_t[i] + x1 * cos_t[i];
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Quantized KV rows to floats (KIVI layout, kv/kv_quant.h), computed as KvCache::read_rows does
// (min + code * step), a vector of channels at a time.

// One row of codes as one byte per channel: 8-bit rows as they are, 4-bit rows split (byte j holds
// channel 2j in its low nibble, 2j + 1 in its high nibble). head_dim is a multiple of kKvGroup.
const uint8_t* CodesRow(const uint8_t* q, int bits, int dim, uint8_t* tmp) {
  if (bits == 8) return q;
#if HWY_TARGET == HWY_SCALAR
  for (int j = 0; j < dim / 2; ++j) {
    tmp[2 * j] = q[j] & 0x0F;
    tmp[2 * j + 1] = q[j] >> 4;
  }
#else
  const hn::Full128<uint8_t> d8;
  const auto m4 = hn::Set(d8, uint8_t{0x0F});
  for (int j = 0; j < dim / 2; j += 16) {
    const auto b = hn::LoadU(d8, q + j);
    const auto lo = hn::And(b, m4);
    const auto hi = hn::ShiftRight<4>(b);
    hn::StoreU(hn::InterleaveLower(lo, hi), d8, tmp + 2 * j);
    hn::StoreU(hn::InterleaveUpper(d8, lo, hi), d8, tmp + 2 * j + 16);
  }
#endif
  return tmp;
}

// out[c] = lo[c] + code[c] * step[c] for c < dim (lo and step vectors of channels, or one value
// per group of kKvGroup channels when per_group).
template <bool kPerGroup>
HWY_INLINE void DequantRow(const uint8_t* codes, const float* lo, const float* step, int dim, float* out) {
  const DF d;
  const hn::Rebind<uint8_t, DF> d8;
  const hn::RebindToSigned<DF> di;
  const int N = static_cast<int>(hn::Lanes(d));
  int c = 0;
  if (kKvGroup % N == 0) {
    for (; c + N <= dim; c += N) {
      const auto x = hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, codes + c)));
      const auto l = kPerGroup ? hn::Set(d, lo[c / kKvGroup]) : hn::LoadU(d, lo + c);
      const auto s = kPerGroup ? hn::Set(d, step[c / kKvGroup]) : hn::LoadU(d, step + c);
      hn::StoreU(hn::MulAdd(x, s, l), d, out + c);
    }
  }
  for (; c < dim; ++c) {
    const int pi = kPerGroup ? c / kKvGroup : c;
    out[c] = lo[pi] + static_cast<float>(codes[c]) * step[pi];
  }
}

// hbq rows (kv_quant.h): E2M1 codes are looked up as doubled value + 12 (0..24, unsigned) and
// decoded as (code + 12) * h - 12 * h with h the micro-block's half step, one FMA per vector;
// every product and the sum are exact in float (a 9-bit step times a value below 32), so this
// equals kv_hbq_dequantize_row bit for bit. Vectors of at most 8 lanes, so one micro-block of 8
// channels shares one broadcast step.
constexpr int kHbqBias = 12;

void HbqCodesRow(const uint8_t* q, int dim, uint8_t* tmp) {
  alignas(16) static constexpr uint8_t kBiased[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};
  const uint8_t* split = CodesRow(q, 4, dim, tmp);
#if HWY_TARGET == HWY_SCALAR
  for (int c = 0; c < dim; ++c) tmp[c] = kBiased[split[c]];
#else
  const hn::Full128<uint8_t> d8;
  const auto table = hn::Load(d8, kBiased);
  for (int c = 0; c < dim; c += 16) hn::StoreU(hn::TableLookupBytes(table, hn::LoadU(d8, split + c)), d8, tmp + c);
#endif
}

void DequantHbqRows(const uint8_t* codes, const uint16_t* params, int code_bytes, int words, int dim, int32_t t0,
                    int32_t t1, float* out, uint8_t* tmp) {
  const hn::CappedTag<float, kKvHbqMicro> d;
  const hn::Rebind<uint8_t, decltype(d)> d8;
  const hn::RebindToSigned<decltype(d)> di;
  const int N = static_cast<int>(hn::Lanes(d));
  const int l1 = kv_hbq_block(dim), micros = l1 / kKvHbqMicro, bw = kv_hbq_block_words(l1);
  const int32_t* alpha = quant::kHbqAlphaEighths[static_cast<int>(quant::HbqAlphaSet::kSig1)];
  for (int32_t t = t0; t < t1; ++t) {
    const uint16_t* p = params + static_cast<size_t>(t) * words;
    HbqCodesRow(codes + static_cast<size_t>(t) * code_bytes, dim, tmp);
    float* o = out + static_cast<size_t>(t - t0) * dim;
    for (int b = 0; b < dim / l1; ++b, p += bw) {
      const float sv = quant::ue5m3_to_f32(static_cast<uint8_t>(p[0] & 0xFF)) * 0.0625f;
      for (int m = 0; m < micros; ++m) {
        const float hs = sv * static_cast<float>(alpha[(p[1 + m / 8] >> (2 * (m % 8))) & 3]);
        const auto s = hn::Set(d, hs), lo = hn::Set(d, -static_cast<float>(kHbqBias) * hs);
        const int c0 = b * l1 + m * kKvHbqMicro;
        for (int c = c0; c < c0 + kKvHbqMicro; c += N) {
          const auto x = hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, tmp + c)));
          hn::StoreU(hn::MulAdd(x, s, lo), d, o + c);
        }
      }
    }
  }
}

void DequantKvBlock(const KvQuantHeadView& h, int dim, int32_t k0, int32_t nk, float* k, float* v) {
  const int32_t end = k0 + nk;
  const int32_t qend = std::min(end, h.cold);
  alignas(64) uint8_t tmp[kMaxQuantHeadDim];
  alignas(64) float pf[2 * kMaxQuantHeadDim];
  alignas(64) float step[kMaxQuantHeadDim];
  alignas(64) float lo[kMaxQuantHeadDim];
  if (h.hbq_words > 0) {
    if (k0 < qend) {
      DequantHbqRows(h.k_codes, h.k_params, h.code_bytes, h.hbq_words, dim, k0, qend, k, tmp);
      DequantHbqRows(h.v_codes, h.v_params, h.code_bytes, h.hbq_words, dim, k0, qend, v, tmp);
    }
  } else {
    // Keys: (step, min) per channel, shared by the kKvGroup slots of a group.
    for (int32_t t = k0; t < qend;) {
      const int32_t g = t / kKvGroup;
      const int32_t ge = std::min(qend, (g + 1) * kKvGroup);
      F16ToF32(h.k_params + static_cast<size_t>(g) * dim * 2, pf, 2 * dim);
      for (int c = 0; c < dim; ++c) {
        step[c] = pf[2 * c];
        lo[c] = pf[2 * c + 1];
      }
      for (; t < ge; ++t) {
        const uint8_t* q = CodesRow(h.k_codes + static_cast<size_t>(t) * h.code_bytes, h.bits, dim, tmp);
        DequantRow<false>(q, lo, step, dim, k + static_cast<size_t>(t - k0) * dim);
      }
    }
    // Values: (step, min) per group of kKvGroup channels of each slot, converted for the whole block
    // at once (they are consecutive) in pieces that fit pf.
    const int vg = dim / kKvGroup;
    for (int32_t t0 = k0; t0 < qend;) {
      const int32_t t1 = std::min<int32_t>(qend, t0 + kMaxQuantHeadDim / vg);
      F16ToF32(h.v_params + static_cast<size_t>(t0) * vg * 2, pf, static_cast<int64_t>(t1 - t0) * vg * 2);
      for (int32_t t = t0; t < t1; ++t) {
        const float* p = pf + static_cast<size_t>(t - t0) * vg * 2;
        for (int g = 0; g < vg; ++g) {
          step[g] = p[2 * g];
          lo[g] = p[2 * g + 1];
        }
        const uint8_t* q = CodesRow(h.v_codes + static_cast<size_t>(t) * h.code_bytes, h.bits, dim, tmp);
        DequantRow<true>(q, lo, step, dim, v + static_cast<size_t>(t - k0) * dim);
      }
      t0 = t1;
    }
  }
  // The FP16 residual, then FP16 copies of hot slots over their codes.
  const int32_t r0 = std::max(k0, h.cold);
  if (end > r0) {
    const size_t off = static_cast<size_t>(r0 - h.cold) * dim, n = static_cast<size_t>(end - r0) * dim;
    F16ToF32(h.k_residual + off, k + static_cast<size_t>(r0 - k0) * dim, static_cast<int64_t>(n));
    F16ToF32(h.v_residual + off, v + static_cast<size_t>(r0 - k0) * dim, static_cast<int64_t>(n));
  }
  for (int32_t r = 0; r < h.hot_n; ++r) {
    const int32_t sl = h.hot_slot[r];
    if (sl < k0 || sl >= qend) continue;
    F16ToF32(h.hot_k + static_cast<size_t>(r) * dim, k + static_cast<size_t>(sl - k0) * dim, dim);
    F16ToF32(h.hot_v + static_cast<size_t>(r) * dim, v + static_cast<size_t>(sl - k0) * dim, dim);
  }
}

// ---------------------------------------------------------------------------------------------
// Attention. Rows (token, head) of the tile are laid across SIMD lanes: Q is transposed once to
// qt[d][row], so a score vector for one key over all rows is a chain of broadcast-FMAs with no
// horizontal sums, and the softmax statistics (max, sum) are plain lane-wise vectors. K and V rows
// are converted to float once per block of keys and shared by every row of the tile.

constexpr int kKeyBlock = kAttentionKeyBlock;

struct TileScratch {
  float* qt;   // [head_dim][rp]
  float* acc;  // [head_dim][rp] running sum of p * v
  float* s;    // [kKeyBlock][rp] scores, then probabilities
  float* m;    // [rp] running max
  float* l;    // [rp] running sum of p
  int32_t* hi; // [rp] keys need pos <= hi
  int32_t* lo; // [rp] and pos > lo
  float* kf;   // [kKeyBlock][head_dim] (F16 caches)
  float* vf;
  uint32_t* q8;  // [head_dim / 4][rp] TileMix: the rows' int8 codes (tilemix::QueryCodes)
  float* q8s;    // [rp] and their scales
};

TileScratch carve(float* base, int rp, int dim) {
  TileScratch t;
  t.qt = base;
  t.acc = t.qt + static_cast<size_t>(dim) * rp;
  t.s = t.acc + static_cast<size_t>(dim) * rp;
  t.m = t.s + static_cast<size_t>(kKeyBlock) * rp;
  t.l = t.m + rp;
  t.hi = reinterpret_cast<int32_t*>(t.l + rp);
  t.lo = t.hi + rp;
  t.kf = reinterpret_cast<float*>(t.lo + rp);
  t.vf = t.kf + static_cast<size_t>(kKeyBlock) * dim;
  t.q8 = reinterpret_cast<uint32_t*>(t.vf + static_cast<size_t>(kKeyBlock) * dim);
  t.q8s = reinterpret_cast<float*>(t.q8 + static_cast<size_t>((dim + 3) / 4) * rp);
  return t;
}

// Scores of keys [0, nk) of a block for the lane group starting at row c, masked to -inf.
void TileScores(const AttentionTile& a, const TileScratch& ts, int rp, int c, const float* kb,
                const int32_t* kp, int nk) {
  const DF d;
  const hn::RebindToSigned<DF> di;
  const int dim = a.head_dim;
  const auto ninf = hn::Set(d, -std::numeric_limits<float>::infinity());
  const auto hi = hn::LoadU(di, ts.hi + c);
  const auto lo = hn::LoadU(di, ts.lo + c);
  const float* qt = ts.qt + c;
  auto finish = [&](hn::Vec<DF> s, int j) {
    const auto kv = hn::Set(di, kp[j]);
    const auto ok = hn::AndNot(hn::Gt(kv, hi), hn::Gt(kv, lo));
    hn::StoreU(hn::IfThenElse(hn::RebindMask(d, ok), s, ninf), d, ts.s + static_cast<size_t>(j) * rp + c);
  };
  int j = 0;
  for (; j + 8 <= nk; j += 8) {
    const float* k0 = kb + static_cast<size_t>(j) * dim;
    auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
    auto s4 = hn::Zero(d), s5 = hn::Zero(d), s6 = hn::Zero(d), s7 = hn::Zero(d);
    for (int e = 0; e < dim; ++e) {
      const auto q = hn::LoadU(d, qt + static_cast<size_t>(e) * rp);
      s0 = hn::MulAdd(hn::Set(d, k0[e]), q, s0);
      s1 = hn::MulAdd(hn::Set(d, k0[dim + e]), q, s1);
      s2 = hn::MulAdd(hn::Set(d, k0[2 * dim + e]), q, s2);
      s3 = hn::MulAdd(hn::Set(d, k0[3 * dim + e]), q, s3);
      s4 = hn::MulAdd(hn::Set(d, k0[4 * dim + e]), q, s4);
      s5 = hn::MulAdd(hn::Set(d, k0[5 * dim + e]), q, s5);
      s6 = hn::MulAdd(hn::Set(d, k0[6 * dim + e]), q, s6);
      s7 = hn::MulAdd(hn::Set(d, k0[7 * dim + e]), q, s7);
    }
    finish(s0, j);
    finish(s1, j + 1);
    finish(s2, j + 2);
    finish(s3, j + 3);
    finish(s4, j + 4);
    finish(s5, j + 5);
    finish(s6, j + 6);
    finish(s7, j + 7);
  }
  for (; j < nk; ++j) {
    const float* k0 = kb + static_cast<size_t>(j) * dim;
    auto s0 = hn::Zero(d), s1 = hn::Zero(d);
    int e = 0;
    for (; e + 2 <= dim; e += 2) {
      s0 = hn::MulAdd(hn::Set(d, k0[e]), hn::LoadU(d, qt + static_cast<size_t>(e) * rp), s0);
      s1 = hn::MulAdd(hn::Set(d, k0[e + 1]), hn::LoadU(d, qt + static_cast<size_t>(e + 1) * rp), s1);
    }
    if (e < dim) s0 = hn::MulAdd(hn::Set(d, k0[e]), hn::LoadU(d, qt + static_cast<size_t>(e) * rp), s0);
    finish(hn::Add(s0, s1), j);
  }
}

// Scores already in s (TileMix's INT8 blocks) masked to -inf as TileScores masks its own.
void TileMask(const TileScratch& ts, int rp, int c, const int32_t* kp, int nk) {
  const DF d;
  const hn::RebindToSigned<DF> di;
  const auto ninf = hn::Set(d, -std::numeric_limits<float>::infinity());
  const auto hi = hn::LoadU(di, ts.hi + c);
  const auto lo = hn::LoadU(di, ts.lo + c);
  for (int j = 0; j < nk; ++j) {
    const auto kv = hn::Set(di, kp[j]);
    const auto ok = hn::AndNot(hn::Gt(kv, hi), hn::Gt(kv, lo));
    float* sj = ts.s + static_cast<size_t>(j) * rp + c;
    hn::StoreU(hn::IfThenElse(hn::RebindMask(d, ok), hn::LoadU(d, sj), ninf), d, sj);
  }
}

// Online-softmax update of the lane group at row c with the scores of one key block, then
// acc += p * V for that group.
void TileUpdate(const AttentionTile& a, const TileScratch& ts, int rp, int c, const float* vb, int nk) {
  const DF d;
  const auto ninf = hn::Set(d, -std::numeric_limits<float>::infinity());
  const int dim = a.head_dim;
  float* s = ts.s + c;
  auto mb = ninf;
  for (int j = 0; j < nk; ++j) mb = hn::Max(mb, hn::LoadU(d, s + static_cast<size_t>(j) * rp));
  if (hn::AllTrue(d, hn::Eq(mb, ninf))) return;  // every key of the block is masked for these rows
  const auto mo = hn::LoadU(d, ts.m + c);
  const auto mn = hn::Max(mo, mb);
  const auto msafe = hn::IfThenZeroElse(hn::Eq(mn, ninf), mn);
  // Exp maps -inf (masked scores, empty history) to 0.
  const auto corr = hn::Exp(d, hn::Sub(mo, msafe));
  auto lsum = hn::Zero(d);
  for (int j = 0; j < nk; ++j) {
    float* sj = s + static_cast<size_t>(j) * rp;
    const auto p = hn::Exp(d, hn::Sub(hn::LoadU(d, sj), msafe));
    hn::StoreU(p, d, sj);
    lsum = hn::Add(lsum, p);
  }
  hn::StoreU(mn, d, ts.m + c);
  hn::StoreU(hn::MulAdd(hn::LoadU(d, ts.l + c), corr, lsum), d, ts.l + c);

  float* acc = ts.acc + c;
  int e = 0;
  for (; e + 8 <= dim; e += 8) {
    float* a0 = acc + static_cast<size_t>(e) * rp;
    auto r0 = hn::Mul(hn::LoadU(d, a0), corr), r1 = hn::Mul(hn::LoadU(d, a0 + rp), corr);
    auto r2 = hn::Mul(hn::LoadU(d, a0 + 2 * rp), corr), r3 = hn::Mul(hn::LoadU(d, a0 + 3 * rp), corr);
    auto r4 = hn::Mul(hn::LoadU(d, a0 + 4 * rp), corr), r5 = hn::Mul(hn::LoadU(d, a0 + 5 * rp), corr);
    auto r6 = hn::Mul(hn::LoadU(d, a0 + 6 * rp), corr), r7 = hn::Mul(hn::LoadU(d, a0 + 7 * rp), corr);
    for (int j = 0; j < nk; ++j) {
      const auto p = hn::LoadU(d, s + static_cast<size_t>(j) * rp);
      const float* v = vb + static_cast<size_t>(j) * dim + e;
      r0 = hn::MulAdd(hn::Set(d, v[0]), p, r0);
      r1 = hn::MulAdd(hn::Set(d, v[1]), p, r1);
      r2 = hn::MulAdd(hn::Set(d, v[2]), p, r2);
      r3 = hn::MulAdd(hn::Set(d, v[3]), p, r3);
      r4 = hn::MulAdd(hn::Set(d, v[4]), p, r4);
      r5 = hn::MulAdd(hn::Set(d, v[5]), p, r5);
      r6 = hn::MulAdd(hn::Set(d, v[6]), p, r6);
      r7 = hn::MulAdd(hn::Set(d, v[7]), p, r7);
    }
    hn::StoreU(r0, d, a0);
    hn::StoreU(r1, d, a0 + rp);
    hn::StoreU(r2, d, a0 + 2 * rp);
    hn::StoreU(r3, d, a0 + 3 * rp);
    hn::StoreU(r4, d, a0 + 4 * rp);
    hn::StoreU(r5, d, a0 + 5 * rp);
    hn::StoreU(r6, d, a0 + 6 * rp);
    hn::StoreU(r7, d, a0 + 7 * rp);
  }
  for (; e < dim; ++e) {
    float* a0 = acc + static_cast<size_t>(e) * rp;
    auto r0 = hn::Mul(hn::LoadU(d, a0), corr);
    for (int j = 0; j < nk; ++j) {
      r0 = hn::MulAdd(hn::Set(d, vb[static_cast<size_t>(j) * dim + e]),
                      hn::LoadU(d, s + static_cast<size_t>(j) * rp), r0);
    }
    hn::StoreU(r0, d, a0);
  }
}

// Fills qt, the masks and the softmax state; returns the padded row count.
int TileSetup(const AttentionTile& a, const TileScratch& ts, int rp, int32_t* max_hi, int32_t* min_lo) {
  const int dim = a.head_dim;
  const int rows = a.n_tokens * a.n_rep;
  *max_hi = std::numeric_limits<int32_t>::min();
  *min_lo = std::numeric_limits<int32_t>::max();
  for (int r = 0; r < rp; ++r) {
    if (r < rows) {
      const int t = r / a.n_rep;
      const int h = r % a.n_rep;
      const float* src = a.q + t * a.token_stride + static_cast<int64_t>(h) * dim;
      for (int e = 0; e < dim; ++e) ts.qt[static_cast<size_t>(e) * rp + r] = src[e] * a.scale;
      const int32_t p = a.qpos[t];
      const int64_t lo = a.window > 0 ? static_cast<int64_t>(p) - a.window
                                      : std::numeric_limits<int32_t>::min();
      ts.hi[r] = p;
      ts.lo[r] = static_cast<int32_t>(std::max<int64_t>(lo, std::numeric_limits<int32_t>::min()));
      *max_hi = std::max(*max_hi, ts.hi[r]);
      *min_lo = std::min(*min_lo, ts.lo[r]);
    } else {
      for (int e = 0; e < dim; ++e) ts.qt[static_cast<size_t>(e) * rp + r] = 0.f;
      ts.hi[r] = std::numeric_limits<int32_t>::min();  // no key passes
      ts.lo[r] = std::numeric_limits<int32_t>::min();
    }
    ts.m[r] = -std::numeric_limits<float>::infinity();
    ts.l[r] = 0.f;
  }
  std::fill(ts.acc, ts.acc + static_cast<size_t>(dim) * rp, 0.f);
  return rp;
}

void AttentionTileImpl(const AttentionTile& a, float* scratch) {
  const DF d;
  const int N = static_cast<int>(hn::Lanes(d));
  const int dim = a.head_dim;
  const int rows = a.n_tokens * a.n_rep;
  const int rp = (rows + N - 1) / N * N;
  const TileScratch ts = carve(scratch, rp, dim);
  int32_t max_hi, min_lo;
  TileSetup(a, ts, rp, &max_hi, &min_lo);

  bool q8_ready = false;  // TileMix: the rows' codes, made at the first INT8 block
  for (int32_t k0 = 0; k0 < a.n_keys; k0 += kKeyBlock) {
    if (a.key_blocks != nullptr && a.key_blocks[k0 / kKeyBlock] == 0) continue;
    const int nk = std::min<int32_t>(kKeyBlock, a.n_keys - k0);
    const int32_t* kp = a.kpos + k0;
    bool any = false;
    for (int j = 0; j < nk && !any; ++j) any = kp[j] <= max_hi && kp[j] > min_lo;
    if (!any) continue;
    const bool int8 = a.int8_blocks != nullptr && a.int8_blocks[k0 / kKeyBlock] != 0;
    const float* kb;
    const float* vb;
    const size_t off = static_cast<size_t>(k0) * dim;
    if (a.load_block != nullptr) {
      a.load_block(a.load_ctx, k0, nk, ts.kf, ts.vf);
      kb = ts.kf;
      vb = ts.vf;
    } else if (a.pages != nullptr) {
      // Gathered a page's run at a time into the block (converted from F16 on the way).
      for (int32_t s = k0; s < k0 + nk;) {
        const int32_t run = std::min<int32_t>(k0 + nk - s, a.page_tokens - s % a.page_tokens);
        const size_t src = (static_cast<size_t>(a.pages[s / a.page_tokens]) * a.page_tokens + s % a.page_tokens) *
                           a.row_bytes;
        const size_t dst = static_cast<size_t>(s - k0) * dim;
        const int64_t cnt = static_cast<int64_t>(run) * dim;
        const auto* kbytes = static_cast<const uint8_t*>(a.k) + src;
        const auto* vbytes = static_cast<const uint8_t*>(a.v) + src;
        if (a.f16) {
          if (!int8) F16ToF32(reinterpret_cast<const uint16_t*>(kbytes), ts.kf + dst, cnt);
          F16ToF32(reinterpret_cast<const uint16_t*>(vbytes), ts.vf + dst, cnt);
        } else {
          if (!int8) std::memcpy(ts.kf + dst, kbytes, static_cast<size_t>(cnt) * sizeof(float));
          std::memcpy(ts.vf + dst, vbytes, static_cast<size_t>(cnt) * sizeof(float));
        }
        s += run;
      }
      kb = ts.kf;
      vb = ts.vf;
    } else if (a.f16) {
      if (!int8) F16ToF32(static_cast<const uint16_t*>(a.k) + off, ts.kf, static_cast<int64_t>(nk) * dim);
      F16ToF32(static_cast<const uint16_t*>(a.v) + off, ts.vf, static_cast<int64_t>(nk) * dim);
      kb = ts.kf;
      vb = ts.vf;
    } else {
      kb = static_cast<const float*>(a.k) + off;
      vb = static_cast<const float*>(a.v) + off;
    }
    if (int8) {
      if (!q8_ready) {
        tilemix::quantize_query_lanes(ts.qt, rp, dim, ts.q8, ts.q8s);
        q8_ready = true;
      }
      tilemix::block_scores(tilemix::QueryCodes{ts.q8, ts.q8s, rp, dim}, a.k8, k0, nk, ts.s);
      for (int c = 0; c < rp; c += N) {
        TileMask(ts, rp, c, kp, nk);
        TileUpdate(a, ts, rp, c, vb, nk);
      }
      continue;
    }
    for (int c = 0; c < rp; c += N) {
      TileScores(a, ts, rp, c, kb, kp, nk);
      TileUpdate(a, ts, rp, c, vb, nk);
    }
  }

  for (int r = 0; r < rows; ++r) {
    const int t = r / a.n_rep;
    const int h = r % a.n_rep;
    float* dst = a.out + t * a.token_stride + static_cast<int64_t>(h) * dim;
    const float inv = ts.l[r] > 0.f ? 1.0f / ts.l[r] : 0.f;
    for (int e = 0; e < dim; ++e) dst[e] = ts.acc[static_cast<size_t>(e) * rp + r] * inv;
  }
}

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace frugal::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace frugal::cpu {

HWY_EXPORT(RmsNormRows);
HWY_EXPORT(Swiglu);
HWY_EXPORT(Add);
HWY_EXPORT(DotF32);
HWY_EXPORT(F16ToF32);
HWY_EXPORT(RopeToken);
HWY_EXPORT(ReadXor);
HWY_EXPORT(DequantKvBlock);
HWY_EXPORT(AttentionTileImpl);
HWY_EXPORT(TargetName);

void rms_norm_rows(const float* x, const float* w, int64_t n_rows, int64_t dim, float eps, float* y) {
  HWY_DYNAMIC_DISPATCH(RmsNormRows)(x, w, n_rows, dim, eps, y);
}
void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(Swiglu)(gate, up, n, out);
}
void add(float* x, const float* y, int64_t n) { HWY_DYNAMIC_DISPATCH(Add)(x, y, n); }
float dot_f32(const float* a, const float* b, int64_t n) { return HWY_DYNAMIC_DISPATCH(DotF32)(a, b, n); }
void f16_to_f32(const uint16_t* src, float* dst, int64_t n) { HWY_DYNAMIC_DISPATCH(F16ToF32)(src, dst, n); }
uint64_t read_xor(const uint64_t* p, int64_t n) { return HWY_DYNAMIC_DISPATCH(ReadXor)(p, n); }
void dequant_kv_block(const KvQuantHeadView& h, int head_dim, int32_t k0, int32_t nk, float* k, float* v) {
  HWY_DYNAMIC_DISPATCH(DequantKvBlock)(h, head_dim, k0, nk, k, v);
}
void rope_token(float* x, int64_t n_heads, int64_t head_dim, int n_rot, bool neox,
                const float* cos_t, const float* sin_t) {
  HWY_DYNAMIC_DISPATCH(RopeToken)(x, n_heads, head_dim, n_rot, neox, cos_t, sin_t);
}

size_t attention_scratch_floats(int rows, int head_dim) {
  // Rows are padded to the widest vector any target uses (64 bytes on x86, more on SVE).
  const size_t rp = static_cast<size_t>((rows + 63) / 64 * 64);
  const size_t dim = static_cast<size_t>(head_dim);
  // ... plus TileMix's row codes (a word per four dimensions) and their scales.
  return 2 * dim * rp + static_cast<size_t>(kAttentionKeyBlock) * rp + 4 * rp +
         2 * static_cast<size_t>(kAttentionKeyBlock) * dim + (dim + 3) / 4 * rp + rp + 64;
}

void attention_tile(const AttentionTile& t, float* scratch) {
  HWY_DYNAMIC_DISPATCH(AttentionTileImpl)(t, scratch);
}

const char* simd_target() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

}  // namespace frugal::cpu
#endif  // HWY_ONCE
