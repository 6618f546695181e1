// Decode GEMV for quantized weights over 8-bit activations: the activations of the step are
// quantized once per product input the way the CPU backend quantizes them (Q8_0 blocks of 32 for
// Q8_0/Q4_0 weights, Q8_K blocks of 256 with sums of every 16 codes for the K-quants: the same
// scales, codes and rounding, see quant/q8_0.cc and quant/q8_k.cc), and the weight codes meet them
// in integer dot products (dp4a: four 8-bit products and a sum in one instruction).
//
// Why: the float-activation GEMV (gemv.cu) spends about four instructions per weight element
// (unpack, convert, scale, FMA) and loads four bytes of activations per element; at the H200's
// 4.8 TB/s a Q4_K row stream needs ~10^13 elements/s, so it ran out of instructions and L1
// bandwidth at ~1 TB/s. Here an element costs about half an instruction and one activation byte.
// It is also closer to the CPU: both now see the same quantized activations, and what differs is
// only the order of float additions of exact integer partial sums.
#include <cuda_fp16.h>

#include <cstdlib>

#include "frugal/backend/cuda/common.cuh"
#include "frugal/backend/cuda/gemv_common.cuh"
#include "frugal/backend/cuda/cuda_backend.h"
#include "frugal/backend/cuda/fp4.cuh"
#include "frugal/backend/cuda/gemv_q8.cuh"
#include "frugal/backend/cuda/hbq.cuh"

namespace frugal::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kWarps = 4;  // warps per block; each warp computes R rows

__device__ __forceinline__ int dp4a(int a, int b, int c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 610
  return __dp4a(a, b, c);
#else
  for (int i = 0; i < 4; ++i) {
    c += static_cast<int>(static_cast<int8_t>(a >> (8 * i))) * static_cast<int>(static_cast<int8_t>(b >> (8 * i)));
  }
  return c;
#endif
}

// ---- activation quantizers (one warp per block; the arithmetic is in gemv_q8.cuh) --------------

__global__ void quantize_act_q8_0_kernel(const float* __restrict__ x, int64_t n_blocks, int8_t* __restrict__ q,
                                         float* __restrict__ d, int* __restrict__ s) {
  pdl_wait();
  pdl_trigger();
  const int64_t blk = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (blk >= n_blocks) return;  // warp-uniform
  warp_quantize_q8_0(x[blk * 32 + lane], lane, blk, q, d, s);
}

__global__ void quantize_act_q8_k_kernel(const float* __restrict__ x, int64_t n_blocks, int8_t* __restrict__ q,
                                         float* __restrict__ d, int* __restrict__ s) {
  pdl_wait();
  pdl_trigger();
  const int64_t blk = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (blk >= n_blocks) return;
  const float4* src = reinterpret_cast<const float4*>(x + blk * 256 + lane * 8);
  const float4 a = src[0], b = src[1];
  const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
  warp_quantize_q8_k(v, lane, blk, q, d, s);
}

// rms_norm (as ops.cu's rms_norm_kernel: one block per row, same sums and expression) that also
// quantizes its output: warp w takes the row's quantization blocks w, w + warps, ...
// kPer > 0: dim is exactly kPer x blockDim.x, and each thread holds its kPer elements (t, t + bd,
// ...) in registers: the weights are loaded before waiting for the previous kernel and the row in
// one burst, so the kernel costs about one memory round trip instead of one per loop iteration
// (the looped form, kPer = 0, took ~10 us per call at 4096 wide: a tenth of a Q8_0 decode step).
// The sum of squares adds the same elements in the same order in both forms.
template <int kPer>
__global__ void rms_norm_q8_kernel(const float* __restrict__ x, const float* __restrict__ w, int dim, float eps,
                                   float* __restrict__ y, int k256, int8_t* __restrict__ q, float* __restrict__ d,
                                   int* __restrict__ s) {
  const int bd = static_cast<int>(blockDim.x);
  const int t = static_cast<int>(threadIdx.x);
  float wv[kPer > 0 ? kPer : 1];
  if constexpr (kPer > 0) {
    if (!k256) {
#pragma unroll
      for (int k = 0; k < kPer; ++k) wv[k] = w[t + k * bd];
    }
  }
  pdl_wait();
  pdl_trigger();
  const int64_t row = blockIdx.x;
  const float* xr = x + row * dim;
  float ss = 0.f;
  float xv[kPer > 0 ? kPer : 1];
  if constexpr (kPer > 0) {
#pragma unroll
    for (int k = 0; k < kPer; ++k) xv[k] = xr[t + k * bd];
#pragma unroll
    for (int k = 0; k < kPer; ++k) ss += xv[k] * xv[k];
  } else {
    for (int i = t; i < dim; i += bd) ss += xr[i] * xr[i];
  }
  __shared__ float part[32];
  const float scale = rsqrtf(block_sum(ss, part) / static_cast<float>(dim) + eps);
  const int lane = t % kWarp, warp = t / kWarp, warps = bd / kWarp;
  float* yr = y + row * dim;
  if (k256) {
    for (int b = warp; b < dim / 256; b += warps) {
      float v[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int e = b * 256 + lane * 8 + i;
        v[i] = xr[e] * scale * w[e];
        yr[e] = v[i];
      }
      warp_quantize_q8_k(v, lane, row * (dim / 256) + b, q, d, s);
    }
  } else if constexpr (kPer > 0) {
    // Element t + k bd is lane `lane` of quantization block warp + k warps.
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const float v = xv[k] * scale * wv[k];
      yr[t + k * bd] = v;
      warp_quantize_q8_0(v, lane, row * (dim / 32) + warp + k * warps, q, d, s);
    }
  } else {
    for (int b = warp; b < dim / 32; b += warps) {
      const int e = b * 32 + lane;
      const float v = xr[e] * scale * w[e];
      yr[e] = v;
      warp_quantize_q8_0(v, lane, row * (dim / 32) + b, q, d, s);
    }
  }
}

// The same norm for Q8_K output (K-quant weights) in registers: blockDim.x = dim / 8 and thread t
// holds elements 8t .. 8t + 7, so warp w holds exactly Q8_K block w and quantizes it without
// reading the row again (rms_norm_q8_kernel's k256 branch reloads x and w from memory and leaves
// half of its warps idle at 4096 wide). The sum of squares adds per thread 8 consecutive elements,
// so it may differ from the other forms in the last bit; the value expression is theirs.
__global__ void rms_norm_q8k_regs_kernel(const float* __restrict__ x, const float* __restrict__ w, int dim, float eps,
                                         float* __restrict__ y, int8_t* __restrict__ q, float* __restrict__ d,
                                         int* __restrict__ s) {
  const int t = static_cast<int>(threadIdx.x);
  const float4 wa = reinterpret_cast<const float4*>(w)[2 * t], wb = reinterpret_cast<const float4*>(w)[2 * t + 1];
  pdl_wait();
  pdl_trigger();
  const int64_t row = blockIdx.x;
  const float4* xr = reinterpret_cast<const float4*>(x + row * dim) + 2 * t;
  const float4 xa = xr[0], xb = xr[1];
  const float xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
  const float wv[8] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) ss += xv[i] * xv[i];
  __shared__ float part[32];
  const float scale = rsqrtf(block_sum(ss, part) / static_cast<float>(dim) + eps);
  const int lane = t % kWarp, warp = t / kWarp;
  float v[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = xv[i] * scale * wv[i];
  float4* yr = reinterpret_cast<float4*>(y + row * dim) + 2 * t;
  yr[0] = make_float4(v[0], v[1], v[2], v[3]);
  yr[1] = make_float4(v[4], v[5], v[6], v[7]);
  warp_quantize_q8_k(v, lane, row * (dim / 256) + warp, q, d, s);
}

// gate = silu(gate) * up (as ops.cu's swiglu_kernel), quantized: one warp per quantization block.
__global__ void swiglu_q8_kernel(float* __restrict__ gate, const float* __restrict__ up, int64_t n_blocks, int k256,
                                 int8_t* __restrict__ q, float* __restrict__ d, int* __restrict__ s) {
  pdl_wait();
  pdl_trigger();
  const int64_t blk = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (blk >= n_blocks) return;
  if (k256) {
    float v[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int64_t e = blk * 256 + lane * 8 + i;
      const float g = gate[e];
      v[i] = g / (1.f + expf(-g)) * up[e];
      gate[e] = v[i];
    }
    warp_quantize_q8_k(v, lane, blk, q, d, s);
  } else {
    const int64_t e = blk * 32 + lane;
    const float g = gate[e];
    const float v = g / (1.f + expf(-g)) * up[e];
    gate[e] = v;
    warp_quantize_q8_0(v, lane, blk, q, d, s);
  }
}

// ---- per-type units: load_w (weight registers of one unit of one row), load_a (activation
// registers of the same unit of one token) and dot (their contribution) ------------------------

template <DType T>
struct Q;

// Q8_0 (split at upload: codes [rows][cols], F16 scales [rows][cols/32]): unit = one block of 32.
template <>
struct Q<DType::kQ8_0> {
  __host__ __device__ static int64_t units(int64_t cols) { return cols / 32; }
  struct W {
    uint4 a, b;
    float d;
  };
  struct A {
    uint4 a, b;
    float d;
  };
  __device__ static void load_w(const DevWeight& w, int64_t row, int64_t u, W& o) {
    const uint4* p = reinterpret_cast<const uint4*>(w.data + row * w.row_stride) + 2 * u;
    o.a = __ldg(p);
    o.b = __ldg(p + 1);
    o.d = __half2float(w.scales[row * (w.cols / 32) + u]);
  }
  __device__ static void load_a(const QActView& x, int t, int64_t u, A& o) {
    const uint4* p = reinterpret_cast<const uint4*>(x.q + static_cast<int64_t>(t) * x.cols) + 2 * u;
    o.a = p[0];
    o.b = p[1];
    o.d = x.d[static_cast<int64_t>(t) * (x.cols / 32) + u];
  }
  __device__ static float dot(const W& w, const A& a) {
    int s = dp4a(w.a.x, a.a.x, 0);
    s = dp4a(w.a.y, a.a.y, s);
    s = dp4a(w.a.z, a.a.z, s);
    s = dp4a(w.a.w, a.a.w, s);
    s = dp4a(w.b.x, a.b.x, s);
    s = dp4a(w.b.y, a.b.y, s);
    s = dp4a(w.b.z, a.b.z, s);
    s = dp4a(w.b.w, a.b.w, s);
    return static_cast<float>(s) * (w.d * a.d);
  }
};

// Q4_0 (split at upload: 16 nibble bytes per block, F16 scales): unit = one block; low nibbles are
// elements 0-15, high nibbles 16-31; codes are q - 8, so dot = sum(q x) - 8 sum(x).
template <>
struct Q<DType::kQ4_0> {
  __host__ __device__ static int64_t units(int64_t cols) { return cols / 32; }
  struct W {
    uint4 q;
    float d;
  };
  struct A {
    uint4 lo, hi;
    float d;
    int s;
  };
  __device__ static void load_w(const DevWeight& w, int64_t row, int64_t u, W& o) {
    o.q = __ldg(reinterpret_cast<const uint4*>(w.data + row * w.row_stride) + u);
    o.d = __half2float(w.scales[row * (w.cols / 32) + u]);
  }
  __device__ static void load_a(const QActView& x, int t, int64_t u, A& o) {
    const uint4* p = reinterpret_cast<const uint4*>(x.q + static_cast<int64_t>(t) * x.cols) + 2 * u;
    o.lo = p[0];
    o.hi = p[1];
    const int64_t b = static_cast<int64_t>(t) * (x.cols / 32) + u;
    o.d = x.d[b];
    o.s = x.s[b];
  }
  __device__ static float dot(const W& w, const A& a) {
    const uint32_t m = 0x0F0F0F0Fu;
    int s = dp4a(static_cast<int>(w.q.x & m), a.lo.x, 0);
    s = dp4a(static_cast<int>(w.q.y & m), a.lo.y, s);
    s = dp4a(static_cast<int>(w.q.z & m), a.lo.z, s);
    s = dp4a(static_cast<int>(w.q.w & m), a.lo.w, s);
    s = dp4a(static_cast<int>((w.q.x >> 4) & m), a.hi.x, s);
    s = dp4a(static_cast<int>((w.q.y >> 4) & m), a.hi.y, s);
    s = dp4a(static_cast<int>((w.q.z >> 4) & m), a.hi.z, s);
    s = dp4a(static_cast<int>((w.q.w >> 4) & m), a.hi.w, s);
    return static_cast<float>(s - 8 * a.s) * (w.d * a.d);
  }
};

// Q4_K (GGUF blocks of 144 bytes per 256): unit = (super-block b, 64-element chunk c): 32 code
// bytes whose low nibbles are sub-block 2c, high nibbles sub-block 2c+1. Per sub-block j:
// d*sc_j*sum(q x) - dmin*m_j*sum(x); the activation sums come from Q8_K's sums of 16.
template <>
struct Q<DType::kQ4_K> {
  __host__ __device__ static int64_t units(int64_t cols) { return cols / 256 * 4; }
  struct W {
    uint4 a, b;
    int sc0, sc1, m0, m1;
    float d, dmin;
  };
  struct A {
    uint4 x0, x1, x2, x3;
    float d;
    int s0, s1;
  };
  __device__ static void load_w(const DevWeight& w, int64_t row, int64_t u, W& o) {
    const int64_t b = u >> 2;
    const int c = static_cast<int>(u & 3);
    const uint8_t* blk = w.data + row * w.row_stride + b * 144;
    const uint4* codes = reinterpret_cast<const uint4*>(blk + 16 + 32 * c);
    o.a = __ldg(codes);
    o.b = __ldg(codes + 1);
    const uint4 hdr = __ldg(reinterpret_cast<const uint4*>(blk));
    o.d = __half2float(__ushort_as_half(static_cast<unsigned short>(hdr.x & 0xFFFF)));
    o.dmin = __half2float(__ushort_as_half(static_cast<unsigned short>(hdr.x >> 16)));
    // All eight 6-bit scales and mins unpacked word-wise (GGUF get_scale_min_k4 on four bytes at
    // once): scales 0-3 | 4-7 in sc03 | sc47, mins likewise. Then the chunk's two are picked by a
    // shift, so the lanes of a warp (chunks 0-3 side by side) run one path instead of two.
    const uint32_t k1 = 0x3F3F3F3Fu, k2 = 0x0F0F0F0Fu, k3 = 0x03030303u;
    const uint32_t sc03 = hdr.y & k1, m03 = hdr.z & k1;
    const uint32_t sc47 = (hdr.w & k2) | (((hdr.y >> 6) & k3) << 4);
    const uint32_t m47 = ((hdr.w >> 4) & k2) | (((hdr.z >> 6) & k3) << 4);
    const int sh = 16 * (c & 1);
    const uint32_t scw = (c < 2 ? sc03 : sc47) >> sh, mw = (c < 2 ? m03 : m47) >> sh;
    o.sc0 = static_cast<int>(scw & 0xFFu);
    o.sc1 = static_cast<int>((scw >> 8) & 0xFFu);
    o.m0 = static_cast<int>(mw & 0xFFu);
    o.m1 = static_cast<int>((mw >> 8) & 0xFFu);
  }
  __device__ static void load_a(const QActView& x, int t, int64_t u, A& o) {
    const uint4* p = reinterpret_cast<const uint4*>(x.q + static_cast<int64_t>(t) * x.cols) + 4 * u;
    o.x0 = p[0];
    o.x1 = p[1];
    o.x2 = p[2];
    o.x3 = p[3];
    o.d = x.d[static_cast<int64_t>(t) * (x.cols / 256) + (u >> 2)];
    // The chunk's four sums of 16 in one 16-byte load (cols is a multiple of 256: aligned).
    const int4 s = *reinterpret_cast<const int4*>(x.s + static_cast<int64_t>(t) * (x.cols / 16) + 4 * u);
    o.s0 = s.x + s.y;
    o.s1 = s.z + s.w;
  }
  __device__ static float dot(const W& w, const A& a) {
    const uint32_t m = 0x0F0F0F0Fu;
    int i0 = dp4a(static_cast<int>(w.a.x & m), a.x0.x, 0);
    i0 = dp4a(static_cast<int>(w.a.y & m), a.x0.y, i0);
    i0 = dp4a(static_cast<int>(w.a.z & m), a.x0.z, i0);
    i0 = dp4a(static_cast<int>(w.a.w & m), a.x0.w, i0);
    i0 = dp4a(static_cast<int>(w.b.x & m), a.x1.x, i0);
    i0 = dp4a(static_cast<int>(w.b.y & m), a.x1.y, i0);
    i0 = dp4a(static_cast<int>(w.b.z & m), a.x1.z, i0);
    i0 = dp4a(static_cast<int>(w.b.w & m), a.x1.w, i0);
    int i1 = dp4a(static_cast<int>((w.a.x >> 4) & m), a.x2.x, 0);
    i1 = dp4a(static_cast<int>((w.a.y >> 4) & m), a.x2.y, i1);
    i1 = dp4a(static_cast<int>((w.a.z >> 4) & m), a.x2.z, i1);
    i1 = dp4a(static_cast<int>((w.a.w >> 4) & m), a.x2.w, i1);
    i1 = dp4a(static_cast<int>((w.b.x >> 4) & m), a.x3.x, i1);
    i1 = dp4a(static_cast<int>((w.b.y >> 4) & m), a.x3.y, i1);
    i1 = dp4a(static_cast<int>((w.b.z >> 4) & m), a.x3.z, i1);
    i1 = dp4a(static_cast<int>((w.b.w >> 4) & m), a.x3.w, i1);
    const int qs = w.sc0 * i0 + w.sc1 * i1;  // exact: |.| < 2^24
    const int ms = w.m0 * a.s0 + w.m1 * a.s1;
    return a.d * (w.d * static_cast<float>(qs) - w.dmin * static_cast<float>(ms));
  }
};

// Q6_K (GGUF blocks of 210 bytes per 256: ql[128], qh[64], int8 scales[16], F16 d; padded to
// kQ6KDeviceBlockBytes on the device): unit = (b, half hf, g in 0..3): elements 128 hf + 32 k +
// 8 g + [0, 8) for k < 4, i.e. four runs of 8 with scales sc[8 hf + 2 k + g/2]. Codes are 6-bit
// q - 32.
template <>
struct Q<DType::kQ6_K> {
  __host__ __device__ static int64_t units(int64_t cols) { return cols / 256 * 8; }
  struct W {
    uint32_t la[2], lb[2], h[2];
    int sc[4];
    float d;
  };
  struct A {
    uint2 x[4];
    float d;
  };
  __device__ static void load_w(const DevWeight& w, int64_t row, int64_t u, W& o) {
    const int64_t b = u >> 3;
    const int hf = static_cast<int>((u >> 2) & 1);
    const int g = static_cast<int>(u & 3);
    const uint8_t* blk = w.data + row * w.row_stride + b * kQ6KDeviceBlockBytes;
    const uint2 la = __ldg(reinterpret_cast<const uint2*>(blk + 64 * hf + 8 * g));
    const uint2 lb = __ldg(reinterpret_cast<const uint2*>(blk + 64 * hf + 32 + 8 * g));
    const uint2 qh = __ldg(reinterpret_cast<const uint2*>(blk + 128 + 32 * hf + 8 * g));
    const uint2 scw = __ldg(reinterpret_cast<const uint2*>(blk + 192 + 8 * hf));  // scales 8 hf .. 8 hf + 7
    o.la[0] = la.x;
    o.la[1] = la.y;
    o.lb[0] = lb.x;
    o.lb[1] = lb.y;
    o.h[0] = qh.x;
    o.h[1] = qh.y;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int j = g / 2 + 2 * k;
      const uint32_t word = j < 4 ? scw.x : scw.y;
      o.sc[k] = static_cast<int8_t>((word >> (8 * (j & 3))) & 0xFFu);
    }
    o.d = __half2float(__ushort_as_half(__ldg(reinterpret_cast<const unsigned short*>(blk + 208))));
  }
  __device__ static void load_a(const QActView& x, int t, int64_t u, A& o) {
    const int64_t b = u >> 3;
    const int hf = static_cast<int>((u >> 2) & 1);
    const int g = static_cast<int>(u & 3);
    const int8_t* base = x.q + static_cast<int64_t>(t) * x.cols + b * 256 + 128 * hf + 8 * g;
#pragma unroll
    for (int k = 0; k < 4; ++k) o.x[k] = *reinterpret_cast<const uint2*>(base + 32 * k);
    o.d = x.d[static_cast<int64_t>(t) * (x.cols / 256) + b];
  }
  __device__ static float dot(const W& w, const A& a) {
    const uint32_t m = 0x0F0F0F0Fu;
    int total = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      int s = 0;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const uint32_t l = (k & 1) ? w.lb[i] : w.la[i];
        const uint32_t lo = k >= 2 ? ((l >> 4) & m) : (l & m);
        const uint32_t hi = ((w.h[i] >> (2 * k)) & 0x03030303u) << 4;
        const int v = static_cast<int>(__vsub4(lo | hi, 0x20202020u));  // bytewise q - 32 in [-32, 31]
        s = dp4a(v, static_cast<int>(i == 0 ? a.x[k].x : a.x[k].y), s);
      }
      total += w.sc[k] * s;
    }
    return a.d * w.d * static_cast<float>(total);
  }
};

// The E2M1 types (split at upload into 16-byte code units and per-block headers, common.cuh)
// against Q8_0 activations: each 32-element unit lines up with one activation block. Codes become
// doubled E2M1 bytes by a byte-permute lookup (fp4.cuh) and meet the activation codes in dp4a;
// the integer sums are exact, then one float product per scale, as quant/*.cc's vec_dot.

// The activations of one 32-element unit: elements 0-15 and 16-31.
struct QAct32 {
  uint4 lo, hi;
  float d;
};
__device__ __forceinline__ void load_act32(const QActView& x, int t, int64_t u, QAct32& o) {
  const uint4* p = reinterpret_cast<const uint4*>(x.q + static_cast<int64_t>(t) * x.cols) + 2 * u;
  o.lo = p[0];
  o.hi = p[1];
  o.d = x.d[static_cast<int64_t>(t) * (x.cols / 32) + u];
}

// MXFP4: unit = one block (byte j: element j low, j + 16 high); value = E8M0 scale / 2 * doubled.
template <>
struct Q<DType::kMXFP4> {
  __host__ __device__ static int64_t units(int64_t cols) { return cols / 32; }
  struct W {
    uint4 q;
    float d;
  };
  using A = QAct32;
  __device__ static void load_w(const DevWeight& w, int64_t row, int64_t u, W& o) {
    o.q = __ldg(reinterpret_cast<const uint4*>(w.data + row * w.row_stride) + u);
    o.d = e8m0_half_to_float(__ldg(w.block_scales + row * (w.cols / 32) + u));
  }
  __device__ static void load_a(const QActView& x, int t, int64_t u, A& o) { load_act32(x, t, u, o); }
  __device__ static float dot(const W& w, const A& a) {
    const uint32_t q[4] = {w.q.x, w.q.y, w.q.z, w.q.w};
    const uint32_t lo[4] = {a.lo.x, a.lo.y, a.lo.z, a.lo.w}, hi[4] = {a.hi.x, a.hi.y, a.hi.z, a.hi.w};
    int s = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int2 v = e2m1x8_doubled(q[i]);
      s = dp4a(v.x, static_cast<int>(lo[i]), s);
      s = dp4a(v.y, static_cast<int>(hi[i]), s);
    }
    return static_cast<float>(s) * (w.d * a.d);
  }
};

// NVFP4: unit = half a block, two sub-blocks of 16 (byte j of a sub-block: element j low, j + 8
// high) with a UE4M3 scale each; the tensor's global scale is folded into both.
template <>
struct Q<DType::kNVFP4> {
  __host__ __device__ static int64_t units(int64_t cols) { return cols / 32; }
  struct W {
    uint4 q;
    float d0, d1;
  };
  using A = QAct32;
  __device__ static void load_w(const DevWeight& w, int64_t row, int64_t u, W& o) {
    o.q = __ldg(reinterpret_cast<const uint4*>(w.data + row * w.row_stride) + u);
    const uint32_t hdr = __ldg(reinterpret_cast<const uint32_t*>(w.block_scales) + row * (w.cols / 64) + (u >> 1));
    const int sh = 16 * static_cast<int>(u & 1);
    const float half_scale = 0.5f * w.scale;
    o.d0 = ue4m3_to_float((hdr >> sh) & 0xFFu) * half_scale;
    o.d1 = ue4m3_to_float((hdr >> (sh + 8)) & 0xFFu) * half_scale;
  }
  __device__ static void load_a(const QActView& x, int t, int64_t u, A& o) { load_act32(x, t, u, o); }
  __device__ static float dot(const W& w, const A& a) {
    // Sub-block 0: code words x, y against activation words 0-3 (x: elements 0-3 low, 8-11 high;
    // y: 4-7, 12-15); sub-block 1 likewise with z, w and words 4-7.
    const int2 vx = e2m1x8_doubled(w.q.x), vy = e2m1x8_doubled(w.q.y);
    const int2 vz = e2m1x8_doubled(w.q.z), vw = e2m1x8_doubled(w.q.w);
    int s0 = dp4a(vx.x, static_cast<int>(a.lo.x), 0);
    s0 = dp4a(vx.y, static_cast<int>(a.lo.z), s0);
    s0 = dp4a(vy.x, static_cast<int>(a.lo.y), s0);
    s0 = dp4a(vy.y, static_cast<int>(a.lo.w), s0);
    int s1 = dp4a(vz.x, static_cast<int>(a.hi.x), 0);
    s1 = dp4a(vz.y, static_cast<int>(a.hi.z), s1);
    s1 = dp4a(vw.x, static_cast<int>(a.hi.y), s1);
    s1 = dp4a(vw.y, static_cast<int>(a.hi.w), s1);
    return a.d * (w.d0 * static_cast<float>(s0) + w.d1 * static_cast<float>(s1));
  }
};

// HBQ: unit = one 32-element group of a 128-element block (laid out as MXFP4's); per micro-block
// an integer sum, weighted by its multiplier in eighths (exact), times UE5M3 scale / 16 once.
// HBQ-A: micro-blocks of 8 (code words x, y: micro-blocks 0 low and 2 high; z, w: 1 and 3);
// HBQ-E: one multiplier for the group.
template <bool kPerEight>
struct QHbq {
  __host__ __device__ static int64_t units(int64_t cols) { return cols / 32; }
  struct W {
    uint4 q;
    float sv;
    int al[kPerEight ? 4 : 1];
  };
  using A = QAct32;
  __device__ static void load_w(const DevWeight& w, int64_t row, int64_t u, W& o) {
    o.q = __ldg(reinterpret_cast<const uint4*>(w.data + row * w.row_stride) + u);
    const int64_t blk = row * (w.cols / 128) + (u >> 2);
    const int g = static_cast<int>(u & 3);
    uint32_t h0;
    if constexpr (kPerEight) {
      const uint2 hdr = __ldg(reinterpret_cast<const uint2*>(w.block_scales) + blk);
      h0 = hdr.x;
      const uint32_t codes = (__byte_perm(hdr.x, hdr.y, 0x5432u) >> (8 * g)) & 0xFFu;  // c[g]
      const uint32_t alphas = hbq_alpha_set((h0 >> 8) & 0xFFu);
#pragma unroll
      for (int k = 0; k < 4; ++k) o.al[k] = hbq_alpha(alphas, codes >> (2 * k));
    } else {
      h0 = __ldg(reinterpret_cast<const uint32_t*>(w.block_scales) + blk);
      o.al[0] = hbq_alpha(hbq_alpha_set((h0 >> 8) & 0xFFu), (h0 >> (16 + 2 * g)) & 3u);
    }
    o.sv = ue5m3_to_float(h0 & 0xFFu) * 0.0625f;
  }
  __device__ static void load_a(const QActView& x, int t, int64_t u, A& o) { load_act32(x, t, u, o); }
  __device__ static float dot(const W& w, const A& a) {
    const int2 vx = e2m1x8_doubled(w.q.x), vy = e2m1x8_doubled(w.q.y);
    const int2 vz = e2m1x8_doubled(w.q.z), vw = e2m1x8_doubled(w.q.w);
    const int m0 = dp4a(vy.x, static_cast<int>(a.lo.y), dp4a(vx.x, static_cast<int>(a.lo.x), 0));
    const int m1 = dp4a(vw.x, static_cast<int>(a.lo.w), dp4a(vz.x, static_cast<int>(a.lo.z), 0));
    const int m2 = dp4a(vy.y, static_cast<int>(a.hi.y), dp4a(vx.y, static_cast<int>(a.hi.x), 0));
    const int m3 = dp4a(vw.y, static_cast<int>(a.hi.w), dp4a(vz.y, static_cast<int>(a.hi.z), 0));
    int total;
    if constexpr (kPerEight) {
      total = w.al[0] * m0 + w.al[1] * m1 + w.al[2] * m2 + w.al[3] * m3;
    } else {
      total = w.al[0] * (m0 + m1 + m2 + m3);
    }
    return static_cast<float>(total) * (w.sv * a.d);
  }
};
template <>
struct Q<DType::kHBQ_A> : QHbq<true> {};
template <>
struct Q<DType::kHBQ_E> : QHbq<false> {};

// Each warp computes R consecutive rows for up to NT tokens: per unit the R rows' weight registers
// are loaded first (R independent loads in flight), then each token's activation unit is loaded
// once and used for all R rows. Rows past the end are clamped for loading and not stored.
// The rows of block b (of `w`, whose first block is `first`) for the kernels below.
template <DType T, int NT, int R, int KS>
__device__ __forceinline__ void gemv_q8_rows(const DevWeight& w, float* y, const float* bias, int first, int b,
                                             int prefetch, const QActView& x, int nt, int accumulate) {
  using D = Q<T>;
  const int lane = threadIdx.x % kWarp;
  // KS warps share a row (each takes every KS-th unit of it; their sums meet in shared memory), so
  // a matrix with few rows still has enough warps to keep DRAM busy.
  const int part = (threadIdx.x / kWarp) % KS;
  const int64_t row0 = (static_cast<int64_t>(b - first) * (kWarps / KS) + threadIdx.x / kWarp / KS) * R;
  if (KS == 1 && row0 >= w.rows) return;  // with KS > 1 every warp reaches the __syncthreads
  int64_t rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r) rows[r] = row0 + r < w.rows ? row0 + r : w.rows - 1;
  // The weights do not depend on the previous kernel: start pulling the first bytes of each row
  // into L2 while it finishes (programmatic dependent launch, common.cuh), then wait for it.
  const int64_t ahead = w.row_stride < prefetch ? w.row_stride : prefetch;
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
    typename D::W wr[R];
#pragma unroll
    for (int r = 0; r < R; ++r) D::load_w(w, rows[r], u, wr[r]);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (NT > 1 && t >= nt) break;
      typename D::A a;
      D::load_a(x, t, u, a);
#pragma unroll
      for (int r = 0; r < R; ++r) acc[t][r] += D::dot(wr[r], a);
    }
  }
  gemv_finish_rows<kWarps, NT, R, KS>(acc, part, row0, w.rows, nt, bias, y, accumulate);
}

template <DType T, int NT, int R, int KS>
__global__ void __launch_bounds__(kWarps * kWarp) gemv_q8_kernel(GemvSet set, QActView x, int nt, int accumulate) {
  const int b = static_cast<int>(blockIdx.x);
  FRUGAL_GEMV_SET_PART(set, b);
  gemv_q8_rows<T, NT, R, KS>(w, y, bias, first, b, set.prefetch, x, nt, accumulate);
}

// A set whose weights take the same 8-bit activations but have two types (Q4_K_M's Q and K in
// Q4_K beside a Q6_K V): one launch instead of one per weight. Each block's weight is one of the
// two types, so the branch is uniform per block; one row per warp, unsplit (the set has the rows).
template <DType T0, DType T1, int NT>
__global__ void __launch_bounds__(kWarps * kWarp) gemv_q8_mixed_kernel(GemvSet set, QActView x, int nt, int accumulate) {
  const int b = static_cast<int>(blockIdx.x);
  FRUGAL_GEMV_SET_PART(set, b);
  if (w.type == T0) {
    gemv_q8_rows<T0, NT, 1, 1>(w, y, bias, first, b, set.prefetch, x, nt, accumulate);
  } else {
    gemv_q8_rows<T1, NT, 1, 1>(w, y, bias, first, b, set.prefetch, x, nt, accumulate);
  }
}

// Rows per warp (FRUGAL_GEMV_Q8_ROWS=1|2|4 for every type; default 2 for Q4_K, 1 for the others).
// A warp's rows share each activation load. Q8_0 reads few activation bytes per weight byte, and
// one row per warp measured fastest (H200, 8B Q8_0 tg128: 329, 302, 293 tok/s for 1, 2, 4). Q4_K
// reads 84 activation bytes per 32 code bytes per token, and two rows measured faster (H100, 8B
// Q4_K_M: tg128 371.9 against 362.7 tok/s, two sequences 639.8 against 510.4; its down product
// at 2 tokens 14.5 against 29.7 us).
int q8_rows_per_warp(DType t) {
  static const int forced = [] {
    const char* e = std::getenv("FRUGAL_GEMV_Q8_ROWS");
    const int v = e != nullptr ? std::atoi(e) : 0;
    return v == 1 || v == 2 || v == 4 ? v : 0;
  }();
  if (forced != 0) return forced;
  return t == DType::kQ4_K ? 2 : 1;
}

template <DType T, int R, int KS>
void launch_rows(const GemvSet& set, const QActView& x, int n, bool acc, cudaStream_t s) {
  GemvSet g = set;
  const int total = gemv_layout(g, kWarps / KS * R);
  if (total <= 0 || n <= 0) return;
  gemv_profile_label("gemv_q8", g, n, R, KS);

  const dim3 grid(static_cast<unsigned>(total));
  const dim3 block(kWarps * kWarp);
  if (n == 1) {
    launch_kernel("gemv_q8_kernel<NT=1>", gemv_q8_kernel<T, 1, R, KS>, grid, block, 0, s, g, x, 1, acc ? 1 : 0);
  } else if (n <= 4) {
    launch_kernel("gemv_q8_kernel<NT=4>", gemv_q8_kernel<T, 4, R, KS>, grid, block, 0, s, g, x, n, acc ? 1 : 0);
  } else {
    launch_kernel("gemv_q8_kernel<NT=8>", gemv_q8_kernel<T, 8, R, KS>, grid, block, 0, s, g, x, n, acc ? 1 : 0);
  }
}

template <DType T>
void launch_t(const GemvSet& set, const QActView& x, int n, bool acc, cudaStream_t s) {
  switch (q8_rows_per_warp(T)) {
    case 2: launch_rows<T, 2, 1>(set, x, n, acc, s); break;
    case 4: launch_rows<T, 4, 1>(set, x, n, acc, s); break;
    default: {
      const int64_t rows = set.w0.rows + (set.n > 1 ? set.w1.rows : 0) + (set.n > 2 ? set.w2.rows : 0);
      switch (gemv_split(rows, Q<T>::units(set.w0.cols), false)) {
        case 2: launch_rows<T, 1, 2>(set, x, n, acc, s); break;
        case 4: launch_rows<T, 1, 4>(set, x, n, acc, s); break;
        default: launch_rows<T, 1, 1>(set, x, n, acc, s); break;
      }
    }
  }
}

// The only two-type set the backend forms (gemv_q8_set_supported).
void launch_mixed(const GemvSet& set, const QActView& x, int n, bool acc, cudaStream_t s) {
  GemvSet g = set;
  const int total = gemv_layout(g, kWarps);
  if (total <= 0 || n <= 0) return;
  gemv_profile_label("gemv_q8_mixed", g, n, 1, 1);
  const dim3 grid(static_cast<unsigned>(total));
  const dim3 block(kWarps * kWarp);
  constexpr DType A = DType::kQ4_K, B = DType::kQ6_K;
  if (n == 1) {
    launch_kernel("gemv_q8_mixed_kernel<NT=1>", gemv_q8_mixed_kernel<A, B, 1>, grid, block, 0, s, g, x, 1, acc ? 1 : 0);
  } else if (n <= 4) {
    launch_kernel("gemv_q8_mixed_kernel<NT=4>", gemv_q8_mixed_kernel<A, B, 4>, grid, block, 0, s, g, x, n, acc ? 1 : 0);
  } else {
    launch_kernel("gemv_q8_mixed_kernel<NT=8>", gemv_q8_mixed_kernel<A, B, 8>, grid, block, 0, s, g, x, n, acc ? 1 : 0);
  }
}

bool mixed_types(const GemvSet& set) {
  const DevWeight* ws[3] = {&set.w0, &set.w1, &set.w2};
  for (int i = 1; i < set.n; ++i) {
    if (ws[i]->type != set.w0.type) return true;
  }
  return false;
}

}  // namespace

QActKind q8_activation_kind(DType weight) {
  switch (weight) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kMXFP4:
    case DType::kNVFP4:
    case DType::kHBQ_A:
    case DType::kHBQ_E:
      return QActKind::kQ8_0;
    case DType::kQ4_K:
    case DType::kQ6_K:
      return QActKind::kQ8_K;
    default:
      return QActKind::kNone;
  }
}

size_t q8_activation_bytes(int64_t n, int64_t cols) {
  // codes, then floats (one per 32: the finer of the two scale grids), then ints (one per 16)
  const size_t codes = static_cast<size_t>(n * cols);
  return ((codes + 15) / 16) * 16 + static_cast<size_t>(n * (cols / 32)) * 4 + static_cast<size_t>(n * (cols / 16)) * 4;
}

QActView q8_activation_view(void* scratch, int n, int64_t cols) {
  QActView v;
  auto* base = static_cast<uint8_t*>(scratch);
  const size_t codes = ((static_cast<size_t>(n * cols) + 15) / 16) * 16;
  v.q = reinterpret_cast<int8_t*>(base);
  v.d = reinterpret_cast<float*>(base + codes);
  v.s = reinterpret_cast<int*>(base + codes + static_cast<size_t>(n * (cols / 32)) * 4);
  v.cols = cols;
  return v;
}

QActView launch_quantize_activations(QActKind kind, const float* x, int n, int64_t cols, void* scratch,
                                     cudaStream_t s) {
  const QActView v = q8_activation_view(scratch, n, cols);
  const int64_t per = kind == QActKind::kQ8_0 ? 32 : 256;
  const int64_t n_blocks = static_cast<int64_t>(n) * cols / per;
  const unsigned grid = blocks_1d(n_blocks * kWarp, 256, "quantize_act kernel");
  if (grid == 0) return v;
  if (kind == QActKind::kQ8_0) {
    launch_kernel("quantize_act_q8_0_kernel", quantize_act_q8_0_kernel, dim3(grid), dim3(256), 0, s, x, n_blocks,
                  const_cast<int8_t*>(v.q), const_cast<float*>(v.d), const_cast<int*>(v.s));
  } else {
    launch_kernel("quantize_act_q8_k_kernel", quantize_act_q8_k_kernel, dim3(grid), dim3(256), 0, s, x, n_blocks,
                  const_cast<int8_t*>(v.q), const_cast<float*>(v.d), const_cast<int*>(v.s));
  }
  return v;
}

void launch_rms_norm_q8(const float* x, const float* w, int rows, int dim, float eps, float* y, QActKind kind,
                        const QActView& out, cudaStream_t s) {
  if (rows <= 0) return;
  if (kind == QActKind::kQ8_K && norm_in_registers() && dim % 256 == 0 && dim / 8 <= 1024) {
    launch_kernel("rms_norm_q8k_regs_kernel", rms_norm_q8k_regs_kernel, dim3(static_cast<unsigned>(rows)),
                  dim3(static_cast<unsigned>(dim / 8)), 0, s, x, w, dim, eps, y, const_cast<int8_t*>(out.q),
                  const_cast<float*>(out.d), const_cast<int*>(out.s));
    return;
  }
  const int threads = dim >= 1024 ? 1024 : (dim >= 256 ? 256 : 64);  // as launch_rms_norm: the same sums
  const int per = norm_in_registers() && dim % threads == 0 ? dim / threads : 0;
  const auto go = [&](auto kernel) {
    launch_kernel("rms_norm_q8_kernel", kernel, dim3(static_cast<unsigned>(rows)), dim3(threads), 0, s, x, w, dim, eps,
                  y, kind == QActKind::kQ8_K ? 1 : 0, const_cast<int8_t*>(out.q), const_cast<float*>(out.d),
                  const_cast<int*>(out.s));
  };
  switch (per) {
    case 1: go(rms_norm_q8_kernel<1>); break;
    case 2: go(rms_norm_q8_kernel<2>); break;
    case 3: go(rms_norm_q8_kernel<3>); break;
    case 4: go(rms_norm_q8_kernel<4>); break;
    case 5: go(rms_norm_q8_kernel<5>); break;
    case 6: go(rms_norm_q8_kernel<6>); break;
    case 7: go(rms_norm_q8_kernel<7>); break;
    case 8: go(rms_norm_q8_kernel<8>); break;
    default: go(rms_norm_q8_kernel<0>); break;
  }
}

void launch_swiglu_q8(float* gate, const float* up, int rows, int dim, QActKind kind, const QActView& out,
                      cudaStream_t s) {
  const int64_t per = kind == QActKind::kQ8_K ? 256 : 32;
  const int64_t n_blocks = static_cast<int64_t>(rows) * dim / per;
  const unsigned grid = blocks_1d(n_blocks * kWarp, 256, "swiglu_q8_kernel");
  if (grid == 0) return;
  launch_kernel("swiglu_q8_kernel", swiglu_q8_kernel, dim3(grid), dim3(256), 0, s, gate, up, n_blocks,
                kind == QActKind::kQ8_K ? 1 : 0, const_cast<int8_t*>(out.q), const_cast<float*>(out.d),
                const_cast<int*>(out.s));
}

bool gemv_q8_set_supported(const DType* types, int count) {
  if (count < 1 || count > 3) return false;
  bool same = true;
  for (int i = 1; i < count; ++i) same = same && types[i] == types[0];
  if (same) return q8_activation_kind(types[0]) != QActKind::kNone;
  for (int i = 0; i < count; ++i) {
    if (types[i] != DType::kQ4_K && types[i] != DType::kQ6_K) return false;
  }
  return true;
}

void launch_gemv_q8_set(const GemvSet& set, const QActView& x, int n, bool accumulate, cudaStream_t s) {
  if (mixed_types(set)) {
    const DType types[3] = {set.w0.type, set.w1.type, set.w2.type};
    if (!gemv_q8_set_supported(types, set.n)) {
      record_launch_error(cat("cuda: no 8-bit activation GEMV for a set of weight types ",
                              std::string(dtype_name(set.w0.type)), ", ", std::string(dtype_name(set.w1.type)),
                              set.n > 2 ? ", " + std::string(dtype_name(set.w2.type)) : std::string()));
      return;
    }
    launch_mixed(set, x, n, accumulate, s);
    return;
  }
  switch (set.w0.type) {
    case DType::kQ8_0: launch_t<DType::kQ8_0>(set, x, n, accumulate, s); break;
    case DType::kQ4_0: launch_t<DType::kQ4_0>(set, x, n, accumulate, s); break;
    case DType::kQ4_K: launch_t<DType::kQ4_K>(set, x, n, accumulate, s); break;
    case DType::kQ6_K: launch_t<DType::kQ6_K>(set, x, n, accumulate, s); break;
    case DType::kMXFP4: launch_t<DType::kMXFP4>(set, x, n, accumulate, s); break;
    case DType::kNVFP4: launch_t<DType::kNVFP4>(set, x, n, accumulate, s); break;
    case DType::kHBQ_A: launch_t<DType::kHBQ_A>(set, x, n, accumulate, s); break;
    case DType::kHBQ_E: launch_t<DType::kHBQ_E>(set, x, n, accumulate, s); break;
    default:
      record_launch_error(cat("cuda: no 8-bit activation GEMV for weight type ", std::string(dtype_name(set.w0.type))));
      break;
  }
}

Status quantize_activations_on_device(int op, bool k256, const float* x, const float* w, int rows, int dim, float eps,
                                      float* y, int8_t* q, float* d, int* s) {
  const int64_t per = k256 ? 256 : 32;
  if (rows <= 0 || dim <= 0 || dim % per != 0 || op < 0 || op > 2) {
    return fail(ErrorCode::kInvalidArgument, "quantize_activations_on_device: op ", op, ", ", rows, " x ", dim,
                " (dim a multiple of ", per, ")");
  }
  const QActKind kind = k256 ? QActKind::kQ8_K : QActKind::kQ8_0;
  const size_t n = static_cast<size_t>(rows) * dim;
  const size_t wn = op == 2 ? n : static_cast<size_t>(dim);
  DeviceArena arena;
  float *dx = nullptr, *dw = nullptr, *dy = nullptr;
  uint8_t* scratch = nullptr;
  cudaStream_t st = nullptr;
  FRUGAL_RETURN_IF_ERROR(arena.alloc(n, &dx));
  FRUGAL_RETURN_IF_ERROR(arena.alloc(wn, &dw));
  FRUGAL_RETURN_IF_ERROR(arena.alloc(n, &dy));
  FRUGAL_RETURN_IF_ERROR(arena.alloc(q8_activation_bytes(rows, dim), &scratch));
  FRUGAL_CUDA(cudaMemcpy(dx, x, n * 4, cudaMemcpyHostToDevice));
  if (op != 0) FRUGAL_CUDA(cudaMemcpy(dw, w, wn * 4, cudaMemcpyHostToDevice));
  FRUGAL_CUDA(cudaStreamCreate(&st));
  QActView v = q8_activation_view(scratch, rows, dim);
  if (op == 0) {
    FRUGAL_CUDA(cudaMemcpyAsync(dy, dx, n * 4, cudaMemcpyDeviceToDevice, st));
    v = launch_quantize_activations(kind, dx, rows, dim, scratch, st);
  } else if (op == 1) {
    launch_rms_norm_q8(dx, dw, rows, dim, eps, dy, kind, v, st);
  } else {
    launch_swiglu_q8(dx, dw, rows, dim, kind, v, st);
    FRUGAL_CUDA(cudaMemcpyAsync(dy, dx, n * 4, cudaMemcpyDeviceToDevice, st));
  }
  Status e = take_launch_error();
  const cudaError_t se = cudaStreamSynchronize(st);
  cudaStreamDestroy(st);
  FRUGAL_RETURN_IF_ERROR(e);
  FRUGAL_CUDA(se);
  const size_t nd = static_cast<size_t>(rows) * (dim / per);
  const size_t ns = static_cast<size_t>(rows) * (dim / (k256 ? 16 : 32));
  FRUGAL_CUDA(cudaMemcpy(y, dy, n * 4, cudaMemcpyDeviceToHost));
  FRUGAL_CUDA(cudaMemcpy(q, v.q, n, cudaMemcpyDeviceToHost));
  FRUGAL_CUDA(cudaMemcpy(d, v.d, nd * 4, cudaMemcpyDeviceToHost));
  FRUGAL_CUDA(cudaMemcpy(s, v.s, ns * 4, cudaMemcpyDeviceToHost));
  return ok_status();
}

}  // namespace frugal::cuda
