// Q4_0 and Q8_0 x Q8 group products for many activation rows (prefill), as an int8 GEMM.
//
// Why: expanding the weights to F32 and running a float GEMM costs the same for every weight
// type; the integer product does 64 multiply-adds per VNNI instruction (vpdpbusd: u8 x i8, 4 per
// int32 lane) against 16 per float FMA. The weight codes are stored unsigned with an offset K
// (Q4_0: its codes 0..15, K = 8; Q8_0: its codes -127..127 plus K = 128); the offset enters as the
// int32 start value -K * sum(y) of each block's accumulator, so the block sum is exact.
//
// Panels (simd_kernels.h): one 512-bit register holds 4 codes of each of 16 rows, so a block of
// 16 rows is 8 registers, each multiplied by one broadcast 4-byte piece of an activation block;
// the 16 lanes are the 16 rows' sums, scaled lane-wise (row scale x activation scale) with no
// horizontal reduction. A tile is 16 rows x up to 8 activation rows; the 8 weight registers of a
// block are loaded once per tile and reused for all its activation rows.
//
// VNNI is not part of Highway's AVX3 target, so the kernel carries its own target attribute and
// runs only where the CPU reports it; elsewhere (and on other targets) a scalar loop over the
// same panels gives the same sums.
#include "frugal/quant/simd_config.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "frugal/quant/simd_q4_0_gemm.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstring>

#include "frugal/quant/blocks.h"
#include "frugal/quant/simd_common-inl.h"
#include "frugal/quant/simd_kernels.h"
#include "hwy/highway.h"

#ifndef FRUGAL_Q4_0_PANEL_LAYOUT_
#define FRUGAL_Q4_0_PANEL_LAYOUT_
namespace frugal::quant::panel {
// One (panel, block): 16 float row scales, then 8 steps x 16 rows x 4 code bytes.
inline constexpr int64_t kScaleBytes = 16 * 4;
inline constexpr int64_t kBlockBytes = kScaleBytes + 8 * 16 * 4;
inline constexpr int kTileCols = 8;
}  // namespace frugal::quant::panel
#endif

HWY_BEFORE_NAMESPACE();
namespace frugal::quant::HWY_NAMESPACE {

#undef FRUGAL_Q4P_WIDE
#if HWY_ARCH_X86 && (HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL) && \
    (defined(__GNUC__) || defined(__clang__))
#define FRUGAL_Q4P_WIDE 1
#endif

using fast::Q8Group;

// The plain definition: every (row, activation row) pair from the panels.
// `k16`: the code offset K in units of 8 (1 for Q4_0, 16 for Q8_0); Q8Group::o is -8 * sum(y).
HWY_INLINE void gemm_scalar(int64_t n, const uint8_t* panels, int64_t rows, const uint8_t* act,
                            size_t act_stride, int64_t ncols, float* y, size_t ldy, int32_t k16) {
  const int64_t nb = n / kQK;
  for (int64_t c = 0; c < ncols; ++c) {
    const auto* g = reinterpret_cast<const Q8Group*>(act + c * act_stride);
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* p = panels + (r / 16) * nb * panel::kBlockBytes;
      const int lane = static_cast<int>(r % 16);
      float sum = 0.f;
      for (int64_t kb = 0; kb < nb; ++kb) {
        const uint8_t* pk = p + kb * panel::kBlockBytes;
        const Q8Group& gi = g[kb / 8];
        const int8_t* q = gi.qs + (kb % 8) * kQK;
        int32_t si = gi.o[kb % 8] * k16;
        for (int s = 0; s < 8; ++s) {
          const uint8_t* w = pk + panel::kScaleBytes + (s * 16 + lane) * 4;
          for (int j = 0; j < 4; ++j) si += w[j] * q[4 * s + j];
        }
        float dx;
        std::memcpy(&dx, pk + lane * 4, 4);
        sum += static_cast<float>(si) * (dx * gi.d[kb % 8]);
      }
      y[c * ldy + r] = sum;
    }
  }
}

#if FRUGAL_Q4P_WIDE

#define FRUGAL_Q4P_VNNI __attribute__((target("avx512vnni")))

template <int NC>
FRUGAL_Q4P_VNNI void panel_tile(int64_t nb, const uint8_t* panel, const uint8_t* act,
                                size_t act_stride, float* y, size_t ldy, __mmask16 rmask, int32_t k16) {
  __m512 acc[NC];
  const Q8Group* g[NC];
  for (int c = 0; c < NC; ++c) {
    acc[c] = _mm512_setzero_ps();
    g[c] = reinterpret_cast<const Q8Group*>(act + c * act_stride);
  }
  for (int64_t kb = 0; kb < nb; ++kb) {
    const uint8_t* pk = panel + kb * panel::kBlockBytes;
    const __m512 dx = _mm512_loadu_ps(reinterpret_cast<const float*>(pk));
    __m512i w[8];
    for (int s = 0; s < 8; ++s) w[s] = _mm512_loadu_si512(pk + panel::kScaleBytes + 64 * s);
    const int64_t gi = kb / 8;
    const int bi = static_cast<int>(kb % 8);
    for (int c = 0; c < NC; ++c) {
      const Q8Group& gc = g[c][gi];
      const int8_t* q = gc.qs + bi * kQK;
      __m512i ia = _mm512_set1_epi32(gc.o[bi] * k16);
      for (int s = 0; s < 8; ++s) {
        int32_t v;
        std::memcpy(&v, q + 4 * s, 4);
        ia = _mm512_dpbusd_epi32(ia, w[s], _mm512_set1_epi32(v));
      }
      acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia), _mm512_mul_ps(dx, _mm512_set1_ps(gc.d[bi])),
                               acc[c]);
    }
  }
  for (int c = 0; c < NC; ++c) _mm512_mask_storeu_ps(y + c * ldy, rmask, acc[c]);
}

using PanelTileFn = void (*)(int64_t, const uint8_t*, const uint8_t*, size_t, float*, size_t,
                             __mmask16, int32_t);

bool cpu_has_vnni() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni") != 0;
  }();
  return has;
}

void GemmPanels(int64_t n, const void* vpanels, int64_t rows, const void* vact,
                size_t act_stride, int64_t ncols, float* y, size_t ldy, int32_t k16) {
  const auto* panels = static_cast<const uint8_t*>(vpanels);
  const auto* act = static_cast<const uint8_t*>(vact);
  if (!cpu_has_vnni()) {
    gemm_scalar(n, panels, rows, act, act_stride, ncols, y, ldy, k16);
    return;
  }
  static constexpr PanelTileFn kTiles[panel::kTileCols] = {
      panel_tile<1>, panel_tile<2>, panel_tile<3>, panel_tile<4>,
      panel_tile<5>, panel_tile<6>, panel_tile<7>, panel_tile<8>};
  const int64_t nb = n / kQK;
  const int64_t n_panels = (rows + 15) / 16;
  // Activation tile outermost: its rows stay in cache while the panels stream past.
  for (int64_t c0 = 0; c0 < ncols; c0 += panel::kTileCols) {
    const int nc = static_cast<int>(std::min<int64_t>(panel::kTileCols, ncols - c0));
    for (int64_t p = 0; p < n_panels; ++p) {
      const int64_t left = rows - p * 16;
      const __mmask16 rmask =
          left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
      kTiles[nc - 1](nb, panels + p * nb * panel::kBlockBytes, act + c0 * act_stride, act_stride,
                     y + c0 * ldy + p * 16, ldy, rmask, k16);
    }
  }
}

bool IsFast() { return cpu_has_vnni(); }

#else

void GemmPanels(int64_t n, const void* panels, int64_t rows, const void* act,
                size_t act_stride, int64_t ncols, float* y, size_t ldy, int32_t k16) {
  gemm_scalar(n, static_cast<const uint8_t*>(panels), rows, static_cast<const uint8_t*>(act),
              act_stride, ncols, y, ldy, k16);
}

bool IsFast() { return false; }

#endif  // FRUGAL_Q4P_WIDE

}  // namespace frugal::quant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace frugal::quant::fast {

HWY_EXPORT(GemmPanels);
HWY_EXPORT(IsFast);

int64_t q4_0_panels_bytes(int64_t rows, int64_t n) {
  return (rows + kQ4PanelRows - 1) / kQ4PanelRows * (n / kQK) * panel::kBlockBytes;
}

namespace {

// The panels of `rows` rows of one block type: `block_codes(row, kb, code)` writes the 32 codes of
// block kb of a row as stored (offset to unsigned, element order: step s holds elements 4s..4s+3)
// and returns its scale; rows past `rows` get codes `pad` and a zero scale.
template <typename BlockCodes>
void pack_panels(const uint8_t* x, size_t bx, int64_t rows, int64_t n, uint8_t pad, uint8_t* out,
                 BlockCodes block_codes) {
  const int64_t nb = n / kQK;
  const int64_t n_panels = (rows + kQ4PanelRows - 1) / kQ4PanelRows;
  for (int64_t p = 0; p < n_panels; ++p) {
    for (int64_t kb = 0; kb < nb; ++kb) {
      uint8_t* pk = out + (p * nb + kb) * panel::kBlockBytes;
      float d[kQ4PanelRows];
      for (int r = 0; r < kQ4PanelRows; ++r) {
        const int64_t row = p * kQ4PanelRows + r;
        uint8_t code[kQK];
        d[r] = 0.f;
        std::memset(code, pad, sizeof(code));
        if (row < rows) d[r] = block_codes(x + row * bx, kb, code);
        for (int s = 0; s < 8; ++s) std::memcpy(pk + panel::kScaleBytes + (s * kQ4PanelRows + r) * 4, code + 4 * s, 4);
      }
      std::memcpy(pk, d, sizeof(d));
    }
  }
}

}  // namespace

void pack_q4_0_panels(const void* vx, size_t bx, int64_t rows, int64_t n, void* dst) {
  pack_panels(static_cast<const uint8_t*>(vx), bx, rows, n, 0, static_cast<uint8_t*>(dst),
              [](const uint8_t* row, int64_t kb, uint8_t* code) {
                const auto& b = reinterpret_cast<const BlockQ4_0*>(row)[kb];
                // Byte j holds element j (low nibble) and j + 16 (high).
                for (int s = 0; s < 4; ++s) {
                  uint32_t v;
                  std::memcpy(&v, b.qs + 4 * s, 4);
                  const uint32_t lo = v & 0x0F0F0F0Fu, hi = (v >> 4) & 0x0F0F0F0Fu;
                  std::memcpy(code + 4 * s, &lo, 4);
                  std::memcpy(code + 16 + 4 * s, &hi, 4);
                }
                return fp16_to_f32(b.d);
              });
}

void pack_q8_0_panels(const void* vx, size_t bx, int64_t rows, int64_t n, void* dst) {
  // 128 pads: a row past the end is codes of 0 (times a zero scale).
  pack_panels(static_cast<const uint8_t*>(vx), bx, rows, n, 128, static_cast<uint8_t*>(dst),
              [](const uint8_t* row, int64_t kb, uint8_t* code) {
                const auto& b = reinterpret_cast<const BlockQ8_0*>(row)[kb];
                for (int j = 0; j < kQK; ++j) code[j] = static_cast<uint8_t>(b.qs[j] + 128);
                return fp16_to_f32(b.d);
              });
}

void gemm_q4_0_panels(int64_t n, const void* panels, int64_t rows, const void* act,
                      size_t act_stride, int64_t ncols, float* y, size_t ldy) {
  HWY_DYNAMIC_DISPATCH(GemmPanels)(n, panels, rows, act, act_stride, ncols, y, ldy, 1);
}

void gemm_q8_0_panels(int64_t n, const void* panels, int64_t rows, const void* act,
                      size_t act_stride, int64_t ncols, float* y, size_t ldy) {
  HWY_DYNAMIC_DISPATCH(GemmPanels)(n, panels, rows, act, act_stride, ncols, y, ldy, 16);
}

bool q4_0_panels_are_fast() { return HWY_DYNAMIC_DISPATCH(IsFast)(); }

}  // namespace frugal::quant::fast
#endif  // HWY_ONCE
