// Weight kernels: per-type decoders that turn one aligned "unit" of a row (16 bytes of codes plus
// the scales they need) into floats in registers, and three kernels written once over them: the
// decode GEMV, dequantization to F16 for cuBLAS, and embedding rows. Layouts follow
// ../shared/reference/quantization.md; the CPU reference dequantizers are the tests' oracle.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "frugal/backend/cuda/common.cuh"
#include "frugal/backend/cuda/fluxbin.cuh"
#include "frugal/backend/cuda/fp4.cuh"
#include "frugal/backend/cuda/gemv_common.cuh"
#include "frugal/backend/cuda/hbq.cuh"
#include "frugal/core/half.h"
#include "frugal/quant/blocks.h"

namespace frugal::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kGemvWarps = 4;  // rows per block: one warp per row

// Small non-negative integers to float without the slow I2F path: the mantissa trick.
__device__ __forceinline__ float small_u2f(uint32_t q) { return __uint_as_float(0x4B000000u | q) - 8388608.f; }

// Two floats rounded to F16 as one 32-bit word (the lower address holds a).
__device__ __forceinline__ uint32_t pack_half2(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}

template <DType T>
struct Dec;

template <>
struct Dec<DType::kF32> {
  static constexpr int kRuns = 1, kLen = 4;
  __host__ __device__ static int64_t units(int64_t cols) { return cols / 4; }
  __device__ static void decode(const DevWeight& w, int64_t row, int64_t u, float* v, int* off) {
    const float4 f = __ldg(reinterpret_cast<const float4*>(w.data + row * w.row_stride) + u);
    v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
    off[0] = static_cast<int>(u * 4);
  }
};

template <>
struct Dec<DType::kF16> {
  static constexpr int kRuns = 1, kLen = 8;
  __host__ __device__ static int64_t units(int64_t cols) { return cols / 8; }
  __device__ static void decode(const DevWeight& w, int64_t row, int64_t u, float* v, int* off) {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(w.data + row * w.row_stride) + u);
    const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(h[i]);
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
    off[0] = static_cast<int>(u * 8);
  }
};

template <>
struct Dec<DType::kBF16> {
  static constexpr int kRuns = 1, kLen = 8;
  __host__ __device__ static int64_t units(int64_t cols) { return cols / 8; }
  __device__ static void decode(const DevWeight& w, int64_t row, int64_t u, float* v, int* off) {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(w.data + row * w.row_stride) + u);
    const uint32_t r[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = __uint_as_float(r[i] << 16);
      v[2 * i + 1] = __uint_as_float(r[i] & 0xFFFF0000u);
    }
    off[0] = static_cast<int>(u * 8);
  }
};

// Q8_0 split at upload: 16 codes per unit, two units per block of 32.
template <>
struct Dec<DType::kQ8_0> {
  static constexpr int kRuns = 1, kLen = 16;
  __host__ __device__ static int64_t units(int64_t cols) { return cols / 16; }
  __device__ static void decode(const DevWeight& w, int64_t row, int64_t u, float* v, int* off) {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(w.data + row * w.row_stride) + u);
    const float d = __half2float(w.scales[row * (w.cols / 32) + u / 2]);
    const uint32_t r[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        // Signed byte: bias by 128 to use the unsigned trick, then take the bias out.
        const uint32_t q = ((r[i] >> (8 * b)) & 0xFFu) ^ 0x80u;
        v[4 * i + b] = d * (small_u2f(q) - 128.f);
      }
    }
    off[0] = static_cast<int>(u * 16);
  }
};

// Q4_0 split at upload: one block of 32 (16 code bytes) per unit.
template <>
struct Dec<DType::kQ4_0> {
  static constexpr int kRuns = 2, kLen = 16;
  __host__ __device__ static int64_t units(int64_t cols) { return cols / 32; }
  __device__ static void decode(const DevWeight& w, int64_t row, int64_t u, float* v, int* off) {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(w.data + row * w.row_stride) + u);
    const float d = __half2float(w.scales[row * (w.cols / 32) + u]);
    const uint32_t r[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const uint32_t byte = (r[i] >> (8 * b)) & 0xFFu;
        v[4 * i + b] = d * (small_u2f(byte & 0xFu) - 8.f);
        v[16 + 4 * i + b] = d * (small_u2f(byte >> 4) - 8.f);
      }
    }
    off[0] = static_cast<int>(u * 32);
    off[1] = static_cast<int>(u * 32 + 16);
  }
};

// Q4_K: unit = 16 bytes of codes = (super-block b, 64-element chunk c, half h); low nibbles are
// sub-block 2c, high nibbles sub-block 2c+1.
template <>
struct Dec<DType::kQ4_K> {
  static constexpr int kRuns = 2, kLen = 16;
  __host__ __device__ static int64_t units(int64_t cols) { return cols / 256 * 8; }
  __device__ static void decode(const DevWeight& w, int64_t row, int64_t u, float* v, int* off) {
    const int64_t b = u >> 3;
    const int c = static_cast<int>((u >> 1) & 3);
    const int h = static_cast<int>(u & 1);
    const uint8_t* blk = w.data + row * w.row_stride + b * 144;
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(blk + 16 + 32 * c + 16 * h));
    // The block's first 16 bytes (d, dmin, 12 scale bytes) in one aligned load instead of seven:
    // the unit's two 6-bit scales and mins are then picked out of registers.
    const uint4 hdr = __ldg(reinterpret_cast<const uint4*>(blk));
    const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(hdr.x & 0xFFFF)));
    const float dmin = __half2float(__ushort_as_half(static_cast<unsigned short>(hdr.x >> 16)));
    const auto sc = [&hdr](int k) -> uint32_t {
      const uint32_t word = k < 4 ? hdr.y : (k < 8 ? hdr.z : hdr.w);
      return (word >> (8 * (k & 3))) & 0xFFu;
    };
    const int j0 = 2 * c, j1 = 2 * c + 1;
    uint32_t s0, m0, s1, m1;
    if (j0 < 4) {
      s0 = sc(j0) & 63; m0 = sc(j0 + 4) & 63;
      s1 = sc(j1) & 63; m1 = sc(j1 + 4) & 63;
    } else {
      s0 = (sc(j0 + 4) & 0xF) | ((sc(j0 - 4) >> 6) << 4); m0 = (sc(j0 + 4) >> 4) | ((sc(j0) >> 6) << 4);
      s1 = (sc(j1 + 4) & 0xF) | ((sc(j1 - 4) >> 6) << 4); m1 = (sc(j1 + 4) >> 4) | ((sc(j1) >> 6) << 4);
    }
    const float d0 = d * small_u2f(s0), n0 = dmin * small_u2f(m0);
    const float d1 = d * small_u2f(s1), n1 = dmin * small_u2f(m1);
    const uint32_t r[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint32_t byte = (r[i] >> (8 * k)) & 0xFFu;
        v[4 * i + k] = d0 * small_u2f(byte & 0xFu) - n0;
        v[16 + 4 * i + k] = d1 * small_u2f(byte >> 4) - n1;
      }
    }
    off[0] = static_cast<int>(b * 256 + 64 * c + 16 * h);
    off[1] = off[0] + 32;
  }
};

// Q6_K (padded to kQ6KDeviceBlockBytes at upload): unit = (super-block b, half hf, l in [4g, 4g + 4)):
// 4 bytes of ql low half, 4 of ql high half and 4 of qh give elements 128 hf + 32 k + l for k < 4.
template <>
struct Dec<DType::kQ6_K> {
  static constexpr int kRuns = 4, kLen = 4;
  __host__ __device__ static int64_t units(int64_t cols) { return cols / 256 * 16; }
  __device__ static void decode(const DevWeight& w, int64_t row, int64_t u, float* v, int* off) {
    const int64_t b = u >> 4;
    const int hf = static_cast<int>((u >> 3) & 1);
    const int g = static_cast<int>(u & 7);
    const uint8_t* blk = w.data + row * w.row_stride + b * kQ6KDeviceBlockBytes;
    const uint32_t qa = __ldg(reinterpret_cast<const uint32_t*>(blk + 64 * hf + 4 * g));
    const uint32_t qb = __ldg(reinterpret_cast<const uint32_t*>(blk + 64 * hf + 32 + 4 * g));
    const uint32_t qh = __ldg(reinterpret_cast<const uint32_t*>(blk + 128 + 32 * hf + 4 * g));
    const uint2 scw = __ldg(reinterpret_cast<const uint2*>(blk + 192 + 8 * hf));  // scales 8 hf .. 8 hf + 7
    const float d = __half2float(__ushort_as_half(__ldg(reinterpret_cast<const unsigned short*>(blk + 208))));
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int j = g / 4 + 2 * k;  // this run's scale among the eight
      const uint32_t word = j < 4 ? scw.x : scw.y;
      const float dk = d * static_cast<float>(static_cast<int8_t>((word >> (8 * (j & 3))) & 0xFFu));
      const uint32_t lw = (k & 1) ? qb : qa;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t lbyte = (lw >> (8 * i)) & 0xFFu;
        const uint32_t lo = k >= 2 ? (lbyte >> 4) : (lbyte & 0xFu);
        const uint32_t hi = (qh >> (8 * i + 2 * k)) & 3u;
        v[4 * k + i] = dk * (small_u2f(lo | (hi << 4)) - 32.f);
      }
      off[k] = static_cast<int>(b * 256 + 128 * hf + 32 * k + 4 * g);
    }
  }
};

// The FP4 and HBQ types, split at upload (common.cuh, DevWeight): code bytes in `data`, each
// block's scales or header in `block_scales`. Their elements are E2M1 codes, decoded as doubled
// integers (fp4.cuh) times half the block's scale, as on the CPU.

// MXFP4: unit = one block of 32 (16 code bytes; byte j holds elements j and j + 16).
template <>
struct Dec<DType::kMXFP4> {
  static constexpr int kRuns = 2, kLen = 16;
  __host__ __device__ static int64_t units(int64_t cols) { return cols / 32; }
  __device__ static void decode(const DevWeight& w, int64_t row, int64_t u, float* v, int* off) {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(w.data + row * w.row_stride) + u);
    const float d = e8m0_half_to_float(__ldg(w.block_scales + row * (w.cols / 32) + u));
    const uint32_t r[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int2 q = e2m1x8_doubled(r[i]);
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        v[4 * i + b] = d * sbyte_to_float(static_cast<uint32_t>(q.x), b);
        v[16 + 4 * i + b] = d * sbyte_to_float(static_cast<uint32_t>(q.y), b);
      }
    }
    off[0] = static_cast<int>(u * 32);
    off[1] = off[0] + 16;
  }
};

// NVFP4: unit = half a block (16 code bytes: two sub-blocks of 16 with a UE4M3 scale each; in a
// sub-block byte j holds elements j and j + 8), 32 consecutive elements. The tensor's global
// scale is folded into the two scales.
template <>
struct Dec<DType::kNVFP4> {
  static constexpr int kRuns = 1, kLen = 32;
  __host__ __device__ static int64_t units(int64_t cols) { return cols / 32; }
  __device__ static void decode(const DevWeight& w, int64_t row, int64_t u, float* v, int* off) {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(w.data + row * w.row_stride) + u);
    const uint32_t hdr = __ldg(reinterpret_cast<const uint32_t*>(w.block_scales) + row * (w.cols / 64) + (u >> 1));
    const int sh = 16 * static_cast<int>(u & 1);
    const float half_scale = 0.5f * w.scale;
    const float d0 = ue4m3_to_float((hdr >> sh) & 0xFFu) * half_scale;
    const float d1 = ue4m3_to_float((hdr >> (sh + 8)) & 0xFFu) * half_scale;
    const uint32_t r[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int2 q = e2m1x8_doubled(r[i]);
      const float d = i < 2 ? d0 : d1;
      const int base = 16 * (i / 2) + 4 * (i % 2);  // word i: bytes 4(i % 2).. of sub-block i / 2
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        v[base + b] = d * sbyte_to_float(static_cast<uint32_t>(q.x), b);
        v[base + 8 + b] = d * sbyte_to_float(static_cast<uint32_t>(q.y), b);
      }
    }
    off[0] = static_cast<int>(u * 32);
  }
};

// HBQ: unit = one 32-element group of a 128-element block (16 code bytes laid out as MXFP4's),
// value = UE5M3 scale / 16 * multiplier in eighths * doubled E2M1 (quant/hbq.cc's expression:
// the first product is exact). HBQ-A has a multiplier per 8 elements: in a group, bytes 0-7 hold
// micro-blocks 0 (low nibbles) and 2 (high), bytes 8-15 micro-blocks 1 and 3; HBQ-E one per group.
template <bool kPerEight>
struct DecHbq {
  static constexpr int kRuns = 2, kLen = 16;
  __host__ __device__ static int64_t units(int64_t cols) { return cols / 32; }
  __device__ static void decode(const DevWeight& w, int64_t row, int64_t u, float* v, int* off) {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(w.data + row * w.row_stride) + u);
    const int64_t blk = row * (w.cols / 128) + (u >> 2);
    const int g = static_cast<int>(u & 3);
    uint32_t h0, codes;  // h0: scale, set, ...; codes: the group's 2-bit codes
    if constexpr (kPerEight) {
      const uint2 hdr = __ldg(reinterpret_cast<const uint2*>(w.block_scales) + blk);
      h0 = hdr.x;
      codes = (__byte_perm(hdr.x, hdr.y, 0x5432u) >> (8 * g)) & 0xFFu;  // c[g]: header byte 2 + g
    } else {
      h0 = __ldg(reinterpret_cast<const uint32_t*>(w.block_scales) + blk);
      codes = ((h0 >> 16) >> (2 * g)) & 3u;
      codes *= 0x55u;  // the group's one code in all four micro-block slots
    }
    const float sv = ue5m3_to_float(h0 & 0xFFu) * 0.0625f;
    const uint32_t alphas = hbq_alpha_set((h0 >> 8) & 0xFFu);
    float f[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) f[k] = sv * static_cast<float>(hbq_alpha(alphas, codes >> (2 * k)));
    const uint32_t r[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int2 q = e2m1x8_doubled(r[i]);
      const float lo = f[i / 2], hi = f[2 + i / 2];
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        v[4 * i + b] = lo * sbyte_to_float(static_cast<uint32_t>(q.x), b);
        v[16 + 4 * i + b] = hi * sbyte_to_float(static_cast<uint32_t>(q.y), b);
      }
    }
    off[0] = static_cast<int>(u * 32);
    off[1] = off[0] + 16;
  }
};
template <>
struct Dec<DType::kHBQ_A> : DecHbq<true> {};
template <>
struct Dec<DType::kHBQ_E> : DecHbq<false> {};

// Each warp computes R consecutive rows: per unit, the R rows' codes are decoded first, then each
// activation float4 is loaded once and used for all R rows. Decode is limited by how many bytes are
// in flight per warp and by the activation loads (a Q4_K unit of 16 code bytes needs 128 bytes of
// activations), so sharing them across rows and issuing R weight loads back to back both pay.
// Rows past the end are clamped for loading (always valid memory) and not stored.
template <DType T, int NT, int R, int KS>
__global__ void __launch_bounds__(kGemvWarps * kWarp) gemv_kernel(GemvSet set, const float* __restrict__ x, int nt,
                                                                   int accumulate) {
  using D = Dec<T>;
  constexpr int kVals = D::kRuns * D::kLen;
  const int b = static_cast<int>(blockIdx.x);
  FRUGAL_GEMV_SET_PART(set, b);
  const int lane = threadIdx.x % kWarp;
  // KS warps share a row (each takes every KS-th unit of it; their sums meet in shared memory), so
  // a matrix with few rows still has enough warps to keep DRAM busy.
  const int part = (threadIdx.x / kWarp) % KS;
  const int64_t row0 = (static_cast<int64_t>(b - first) * (kGemvWarps / KS) + threadIdx.x / kWarp / KS) * R;
  if (KS == 1 && row0 >= w.rows) return;  // with KS > 1 every warp reaches the __syncthreads
  int64_t rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r) rows[r] = row0 + r < w.rows ? row0 + r : w.rows - 1;
  // The weights do not depend on the previous kernel: start pulling the first bytes of each row
  // into L2 while it finishes (programmatic dependent launch, common.cuh), then wait for it.
  const int64_t ahead = w.row_stride < set.prefetch ? w.row_stride : set.prefetch;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t at = (static_cast<int64_t>(part) * kWarp + lane) * 128;
    if (at < ahead) prefetch_l2(w.data + rows[r] * w.row_stride + at);
  }
  pdl_wait();
  pdl_trigger();
  float acc[NT][R];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
#pragma unroll
    for (int r = 0; r < R; ++r) acc[t][r] = 0.f;
  }
  const int64_t units = D::units(w.cols);
#pragma unroll 2
  for (int64_t u = lane + static_cast<int64_t>(kWarp) * part; u < units; u += static_cast<int64_t>(kWarp) * KS) {
    float v[R][kVals];
    int off[D::kRuns];
#pragma unroll
    for (int r = 0; r < R; ++r) D::decode(w, rows[r], u, v[r], off);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (NT > 1 && t >= nt) break;
      const float* xt = x + static_cast<int64_t>(t) * w.cols;
#pragma unroll
      for (int run = 0; run < D::kRuns; ++run) {
#pragma unroll
        for (int k = 0; k < D::kLen; k += 4) {
          const float4 xv = __ldg(reinterpret_cast<const float4*>(xt + off[run] + k));
          const int j = run * D::kLen + k;
#pragma unroll
          for (int r = 0; r < R; ++r) {
            acc[t][r] += v[r][j] * xv.x + v[r][j + 1] * xv.y + v[r][j + 2] * xv.z + v[r][j + 3] * xv.w;
          }
        }
      }
    }
  }
  gemv_finish_rows<kGemvWarps, NT, R, KS>(acc, part, row0, w.rows, nt, bias, y, accumulate);
}

template <DType T>
__global__ void dequant_f16_kernel(DevWeight w, __half* __restrict__ out) {
  pdl_wait();
  pdl_trigger();
  using D = Dec<T>;
  const int64_t units = D::units(w.cols);
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= units * w.rows) return;
  const int64_t row = i / units;
  float v[D::kRuns * D::kLen];
  int off[D::kRuns];
  D::decode(w, row, i % units, v, off);
  __half* o = out + row * w.cols;
  // Each run is stored with the widest aligned vector it fills (16 bytes for runs of 8 or 16
  // halves, 8 for Q6_K's runs of 4): 2-byte-pair stores made every warp store instruction touch 32
  // sectors for 128 useful bytes, and the L2 write traffic, not DRAM, bounded the kernel.
#pragma unroll
  for (int r = 0; r < D::kRuns; ++r) {
    const float* src = v + r * D::kLen;
    if constexpr (D::kLen % 8 == 0) {
#pragma unroll
      for (int k = 0; k < D::kLen; k += 8) {
        uint4 p;
        p.x = pack_half2(src[k], src[k + 1]);
        p.y = pack_half2(src[k + 2], src[k + 3]);
        p.z = pack_half2(src[k + 4], src[k + 5]);
        p.w = pack_half2(src[k + 6], src[k + 7]);
        *reinterpret_cast<uint4*>(o + off[r] + k) = p;
      }
    } else {
      static_assert(D::kLen % 4 == 0, "runs are stored 4 halves at a time at least");
#pragma unroll
      for (int k = 0; k < D::kLen; k += 4) {
        uint2 p;
        p.x = pack_half2(src[k], src[k + 1]);
        p.y = pack_half2(src[k + 2], src[k + 3]);
        *reinterpret_cast<uint2*>(o + off[r] + k) = p;
      }
    }
  }
}

template <DType T>
__global__ void get_rows_kernel(DevWeight w, const int32_t* __restrict__ ids, int n, float* __restrict__ y) {
  pdl_wait();
  pdl_trigger();
  using D = Dec<T>;
  const int64_t units = D::units(w.cols);
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= units * n) return;
  const int64_t t = i / units;
  float v[D::kRuns * D::kLen];
  int off[D::kRuns];
  D::decode(w, ids[t], i % units, v, off);
  float* o = y + t * w.cols;
#pragma unroll
  for (int r = 0; r < D::kRuns; ++r) {
#pragma unroll
    for (int k = 0; k < D::kLen; ++k) o[off[r] + k] = v[r * D::kLen + k];
  }
}

// Splits 32-element blocks (2-byte scale + `code_bytes` codes) into codes and scales.
__global__ void split_blocks_kernel(const uint8_t* __restrict__ src, int64_t n_blocks, int code_bytes,
                                    uint8_t* __restrict__ codes, __half* __restrict__ scales) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_blocks) return;
  const uint8_t* b = src + i * (2 + code_bytes);
  scales[i] = __ushort_as_half(static_cast<unsigned short>(b[0] | (b[1] << 8)));
  for (int k = 0; k < code_bytes; ++k) codes[i * code_bytes + k] = b[2 + k];
}

// Splits blocks of `block_bytes` (a header of `header_bytes`, then `code_bytes` codes) into codes
// and headers padded to `header_stride` bytes (the pad zero): the FP4 and HBQ device layout.
__global__ void split_headers_kernel(const uint8_t* __restrict__ src, int64_t n_blocks, int block_bytes,
                                     int header_bytes, int header_stride, uint8_t* __restrict__ codes,
                                     uint8_t* __restrict__ headers) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_blocks) return;
  const uint8_t* b = src + i * block_bytes;
  const int code_bytes = block_bytes - header_bytes;
  for (int k = 0; k < header_stride; ++k) headers[i * header_stride + k] = k < header_bytes ? b[k] : 0;
  for (int k = 0; k < code_bytes; ++k) codes[i * code_bytes + k] = b[header_bytes + k];
}

// Copies blocks of `from` bytes into blocks of `to` bytes (the rest zero): Q6_K's device layout.
__global__ void pad_blocks_kernel(const uint8_t* __restrict__ src, int64_t n_blocks, int from, int to,
                                  uint8_t* __restrict__ dst) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_blocks) return;
  const uint8_t* b = src + i * from;
  uint8_t* o = dst + i * to;
  for (int k = 0; k < to; ++k) o[k] = k < from ? b[k] : 0;
}

// Rows per warp of the decode GEMV: FRUGAL_GEMV_ROWS=1|2|4 (read once) so that variants can be
// compared in one benchmark run without a rebuild. Default 1: with programmatic dependent launch
// hiding the ramp-up, more warps per matrix measured faster than shared activation loads (8B F16
// tg128 207 vs 204 tok/s on the H200).
int gemv_rows_per_warp() {
  static const int r = [] {
    const char* e = std::getenv("FRUGAL_GEMV_ROWS");
    const int v = e != nullptr ? std::atoi(e) : 1;
    return v == 2 || v == 4 ? v : 1;
  }();
  return r;
}

}  // namespace

int gemv_prefetch_bytes() {
  static const int b = [] {
    const char* e = std::getenv("FRUGAL_GEMV_PREFETCH");
    const int v = e != nullptr ? std::atoi(e) : 512;
    return v < 0 ? 0 : (v > 4096 ? 4096 : v);
  }();
  return b;
}

int gemv_split(int64_t rows, int64_t units, bool pick) {
  static const int forced = [] {
    const char* e = std::getenv("FRUGAL_GEMV_SPLIT");
    const int v = e != nullptr ? std::atoi(e) : 0;
    return v == 1 || v == 2 || v == 4 ? v : 0;
  }();
  if (forced != 0) return forced;
  if (!pick) return 1;
  int ks = 1;
  while (ks < 4 && rows * ks < 8192 && units >= 64 * ks * 2) ks *= 2;
  return ks;
}

namespace {

template <DType T, int R, int KS>
void gemv_launch(const GemvSet& set, const float* x, int n, bool acc, cudaStream_t s) {
  GemvSet g = set;
  const int total = gemv_layout(g, kGemvWarps / KS * R);
  if (total <= 0 || n <= 0) return;
  gemv_profile_label("gemv", g, n, R, KS);

  const dim3 grid(static_cast<unsigned>(total));
  const dim3 block(kGemvWarps * kWarp);
  if (n == 1) {
    launch_kernel("gemv_kernel<NT=1>", gemv_kernel<T, 1, R, KS>, grid, block, 0, s, g, x, 1, acc ? 1 : 0);
  } else {
    launch_kernel("gemv_kernel<NT=8>", gemv_kernel<T, 8, R, KS>, grid, block, 0, s, g, x, n, acc ? 1 : 0);
  }
}

template <DType T>
void gemv_t(const GemvSet& set, const float* x, int n, bool acc, cudaStream_t s) {
  switch (gemv_rows_per_warp()) {
    case 2: gemv_launch<T, 2, 1>(set, x, n, acc, s); break;
    case 4: gemv_launch<T, 4, 1>(set, x, n, acc, s); break;
    default: {
      const int64_t rows = set.w0.rows + (set.n > 1 ? set.w1.rows : 0) + (set.n > 2 ? set.w2.rows : 0);
      switch (gemv_split(rows, Dec<T>::units(set.w0.cols), true)) {
        case 2: gemv_launch<T, 1, 2>(set, x, n, acc, s); break;
        case 4: gemv_launch<T, 1, 4>(set, x, n, acc, s); break;
        default: gemv_launch<T, 1, 1>(set, x, n, acc, s); break;
      }
    }
  }
}

template <DType T>
void dequant_t(const DevWeight& w, __half* out, cudaStream_t s) {
  const int64_t total = Dec<T>::units(w.cols) * w.rows;
  const unsigned grid = blocks_1d(total, 256, "dequant_f16_kernel");
  if (grid == 0) return;
  launch_kernel("dequant_f16_kernel", dequant_f16_kernel<T>, dim3(grid), dim3(256), 0, s, w, out);
}

template <DType T>
void get_rows_t(const DevWeight& w, const int32_t* ids, int n, float* y, cudaStream_t s) {
  const int64_t total = Dec<T>::units(w.cols) * n;
  const unsigned grid = blocks_1d(total, 256, "get_rows_kernel");
  if (grid == 0) return;
  launch_kernel("get_rows_kernel", get_rows_kernel<T>, dim3(grid), dim3(256), 0, s, w, ids, n, y);
}

// One switch over the device types, shared by the three launchers.
template <template <DType> class F, typename... A>
void dispatch(DType t, A&&... a) {
  switch (t) {
    case DType::kF32: F<DType::kF32>::run(a...); break;
    case DType::kF16: F<DType::kF16>::run(a...); break;
    case DType::kBF16: F<DType::kBF16>::run(a...); break;
    case DType::kQ8_0: F<DType::kQ8_0>::run(a...); break;
    case DType::kQ4_0: F<DType::kQ4_0>::run(a...); break;
    case DType::kQ4_K: F<DType::kQ4_K>::run(a...); break;
    case DType::kQ6_K: F<DType::kQ6_K>::run(a...); break;
    case DType::kMXFP4: F<DType::kMXFP4>::run(a...); break;
    case DType::kNVFP4: F<DType::kNVFP4>::run(a...); break;
    case DType::kHBQ_A: F<DType::kHBQ_A>::run(a...); break;
    case DType::kHBQ_E: F<DType::kHBQ_E>::run(a...); break;
    default:
      // Gemm::upload converts every other type on the host, so this is a programming error; it
      // used to launch nothing and leave the output unwritten without a word.
      record_launch_error(cat("cuda: no device kernel for weight type ", std::string(dtype_name(t))));
      break;
  }
}
template <DType T>
struct GemvF {
  static void run(const GemvSet& set, const float* x, int n, bool acc, cudaStream_t s) { gemv_t<T>(set, x, n, acc, s); }
};
template <DType T>
struct DequantF {
  static void run(const DevWeight& w, __half* out, cudaStream_t s) { dequant_t<T>(w, out, s); }
};
template <DType T>
struct RowsF {
  static void run(const DevWeight& w, const int32_t* ids, int n, float* y, cudaStream_t s) {
    get_rows_t<T>(w, ids, n, y, s);
  }
};

}  // namespace

bool device_type_supported(DType t) {
  switch (t) {
    case DType::kF32: case DType::kF16: case DType::kBF16: case DType::kQ8_0: case DType::kQ4_0:
    case DType::kQ4_K: case DType::kQ6_K: case DType::kMXFP4: case DType::kNVFP4: case DType::kHBQ_A:
    case DType::kHBQ_E: case DType::kFLUXBIN:
      return true;
    default:
      return false;
  }
}

void launch_gemv(const DevWeight& w, const float* x, int n, float* y, const float* bias, bool accumulate,
                 cudaStream_t s) {
  GemvSet set;
  set.n = 1;
  set.w0 = w;
  set.y0 = y;
  set.b0 = bias;
  launch_gemv_set(set, x, n, accumulate, s);
}
// FluxBin has kernels of its own (fluxbin.cu): its GEMV reads lookup tables, not decoded units.
void launch_gemv_set(const GemvSet& set, const float* x, int n, bool accumulate, cudaStream_t s) {
  if (set.w0.type == DType::kFLUXBIN) {
    launch_fluxbin_gemv_set(set, x, n, accumulate, s);
    return;
  }
  dispatch<GemvF>(set.w0.type, set, x, n, accumulate, s);
}
void launch_dequant_f16(const DevWeight& w, __half* out, cudaStream_t s) {
  if (w.type == DType::kFLUXBIN) {
    launch_fluxbin_dequant_f16(w, out, s);
    return;
  }
  dispatch<DequantF>(w.type, w, out, s);
}
void launch_get_rows(const DevWeight& w, const int32_t* ids, int n, float* y, cudaStream_t s) {
  if (w.type == DType::kFLUXBIN) {
    launch_fluxbin_get_rows(w, ids, n, y, s);
    return;
  }
  dispatch<RowsF>(w.type, w, ids, n, y, s);
}

// Host to device in slices, each handed to `consumed` once copied (synchronous: the pages may be
// dropped right after).
Status copy_in_slices(void* dev, const void* host, size_t total, cudaStream_t stream, HostConsumed consumed) {
  constexpr size_t kSlice = size_t{64} << 20;
  const auto* src = static_cast<const uint8_t*>(host);
  auto* dst = static_cast<uint8_t*>(dev);
  for (size_t off = 0; off < total; off += kSlice) {
    const size_t n = std::min(kSlice, total - off);
    FRUGAL_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(dst + off, src + off, n, cudaMemcpyHostToDevice, stream), "upload"));
    FRUGAL_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream), "upload"));
    if (consumed.fn != nullptr) consumed.fn(consumed.ctx, src + off, n);
  }
  return ok_status();
}

Status upload_weight(DType type, int64_t rows, int64_t cols, size_t row_stride, const void* host,
                     DevWeight* dst, void** alloc, uint64_t* bytes, cudaStream_t stream, HostConsumed consumed) {
  DevWeight w;
  w.type = type;
  w.rows = rows;
  w.cols = cols;
  const size_t total = row_stride * static_cast<size_t>(rows);
  if (type == DType::kQ8_0 || type == DType::kQ4_0) {
    // Codes and scales apart: every code load becomes one aligned 16-byte load.
    const int code_bytes = type == DType::kQ8_0 ? 32 : 16;
    const int64_t n_blocks = rows * (cols / 32);
    const size_t codes = static_cast<size_t>(n_blocks) * code_bytes;
    const size_t scales = static_cast<size_t>(n_blocks) * 2;
    uint8_t* raw = nullptr;
    uint8_t* mem = nullptr;
    FRUGAL_CUDA(cudaMalloc(&raw, total));
    Status st = cuda_status(cudaMalloc(&mem, codes + scales), "cudaMalloc");
    if (st.ok()) st = copy_in_slices(raw, host, total, stream, consumed);
    if (st.ok() && n_blocks > 0) {
      const unsigned grid = blocks_1d(n_blocks, 256, "split_blocks_kernel");
      split_blocks_kernel<<<grid, 256, 0, stream>>>(raw, n_blocks, code_bytes, mem,
                                                   reinterpret_cast<__half*>(mem + codes));
      st = cuda_status(cudaGetLastError(), "split_blocks_kernel launch");
      if (st.ok()) st = cuda_status(cudaStreamSynchronize(stream), "split_blocks_kernel (cudaStreamSynchronize)");
    }
    cudaFree(raw);
    if (!st.ok()) {
      cudaFree(mem);
      return st;
    }
    w.data = mem;
    w.row_stride = (cols / 32) * code_bytes;
    w.scales = reinterpret_cast<const __half*>(mem + codes);
    *alloc = mem;
    *bytes = codes + scales;
    *dst = w;
    return ok_status();
  }
  if (const SplitLayout lay = split_layout(type); lay.block_elems != 0) {
    // Codes and headers apart: every code load is one aligned 16-byte load, every header one
    // aligned load of 1, 4 or 8 bytes.
    const int64_t n_blocks = rows * (cols / lay.block_elems);
    const int code_bytes = lay.block_bytes - lay.header_bytes;
    const size_t codes = static_cast<size_t>(n_blocks) * code_bytes;
    const size_t headers = static_cast<size_t>(n_blocks) * lay.header_device_bytes;
    uint8_t* raw = nullptr;
    uint8_t* mem = nullptr;
    FRUGAL_CUDA(cudaMalloc(&raw, total));
    Status st = cuda_status(cudaMalloc(&mem, codes + headers), "cudaMalloc");
    if (st.ok()) st = copy_in_slices(raw, host, total, stream, consumed);
    if (st.ok() && n_blocks > 0) {
      const unsigned grid = blocks_1d(n_blocks, 256, "split_headers_kernel");
      split_headers_kernel<<<grid, 256, 0, stream>>>(raw, n_blocks, lay.block_bytes, lay.header_bytes,
                                                     lay.header_device_bytes, mem, mem + codes);
      st = cuda_status(cudaGetLastError(), "split_headers_kernel launch");
      if (st.ok()) st = cuda_status(cudaStreamSynchronize(stream), "split_headers_kernel (cudaStreamSynchronize)");
    }
    cudaFree(raw);
    if (!st.ok()) {
      cudaFree(mem);
      return st;
    }
    w.data = mem;
    w.row_stride = (cols / lay.block_elems) * code_bytes;
    w.block_scales = mem + codes;  // codes is a multiple of 16: aligned for every header size
    *alloc = mem;
    *bytes = codes + headers;
    *dst = w;
    return ok_status();
  }
  if (type == DType::kQ6_K) {
    // Padded blocks (kQ6KDeviceBlockBytes, common.cuh): every field aligned for vector loads.
    const int64_t n_blocks = rows * (cols / 256);
    const size_t padded = static_cast<size_t>(n_blocks) * kQ6KDeviceBlockBytes;
    uint8_t* raw = nullptr;
    uint8_t* mem = nullptr;
    FRUGAL_CUDA(cudaMalloc(&raw, total));
    Status st = cuda_status(cudaMalloc(&mem, padded), "cudaMalloc");
    if (st.ok()) st = copy_in_slices(raw, host, total, stream, consumed);
    if (st.ok() && n_blocks > 0) {
      const unsigned grid = blocks_1d(n_blocks, 256, "pad_blocks_kernel");
      pad_blocks_kernel<<<grid, 256, 0, stream>>>(raw, n_blocks, kQ6KBlockBytes, kQ6KDeviceBlockBytes, mem);
      st = cuda_status(cudaGetLastError(), "pad_blocks_kernel launch");
      if (st.ok()) st = cuda_status(cudaStreamSynchronize(stream), "pad_blocks_kernel (cudaStreamSynchronize)");
    }
    cudaFree(raw);
    if (!st.ok()) {
      cudaFree(mem);
      return st;
    }
    w.data = mem;
    w.row_stride = (cols / 256) * kQ6KDeviceBlockBytes;
    *alloc = mem;
    *bytes = padded;
    *dst = w;
    return ok_status();
  }
  uint8_t* mem = nullptr;
  FRUGAL_CUDA(cudaMalloc(&mem, total));
  Status st = copy_in_slices(mem, host, total, stream, consumed);
  if (!st.ok()) {
    cudaFree(mem);
    return st;
  }
  w.data = mem;
  w.row_stride = static_cast<int64_t>(row_stride);
  *alloc = mem;
  *bytes = total;
  *dst = w;
  return ok_status();
}

}  // namespace frugal::cuda
