// FluxBin on the GPU: upload into the device layout, the lookup-table GEMV, dequantization and
// embedding rows (fluxbin.cuh has the layout and the reasoning).
#include "frugal/backend/cuda/fluxbin.cuh"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "frugal/backend/cuda/cuda_backend.h"
#include "frugal/backend/cuda/gemv_common.cuh"
#include "frugal/quant/fluxbin.h"

namespace frugal::cuda {
namespace {

namespace fb = quant::fluxbin;

constexpr int kWarp = 32;
constexpr int kChunk = 4;  // groups per table chunk (one 32-bit word of nibbles per lane)

size_t align16(size_t n) { return (n + 15) / 16 * 16; }

struct Sections {
  size_t bits = 0, rsc = 0, col = 0, sidx = 0, ssc = 0, scod = 0, total = 0;
};
Sections sections(int64_t rows, int64_t cols, int salient) {
  const int64_t gp = fluxbin_padded_groups(cols);
  Sections s;
  size_t at = 0;
  const auto take = [&at](size_t bytes) {
    const size_t here = at;
    at += align16(bytes);
    return here;
  };
  s.bits = take(static_cast<size_t>(rows * gp * 32));
  s.rsc = take(static_cast<size_t>(rows * gp * 4));
  s.col = take(static_cast<size_t>(2 * gp * fb::kGroup * 2));
  if (salient > 0) {
    s.sidx = take(static_cast<size_t>(gp * salient));
    s.ssc = take(static_cast<size_t>(rows * gp * 2));
    s.scod = take(static_cast<size_t>(rows * gp * (salient / 2)));
  }
  s.total = at;
  return s;
}

// The 16 signed sums of a quad's u (entry m: +u_i where bit i of m is set, -u_i elsewhere), each
// built from an earlier one by one addition.
__device__ __forceinline__ void quad_table(const float (&u)[4], float* t /* stride 32 */) {
  float v[16];
  v[0] = -((u[0] + u[1]) + (u[2] + u[3]));
#pragma unroll
  for (int m = 1; m < 16; ++m) {
    const int low = m & -m;
    const int bit = low == 1 ? 0 : (low == 2 ? 1 : (low == 4 ? 2 : 3));
    v[m] = v[m ^ low] + 2.f * u[bit];
  }
#pragma unroll
  for (int m = 0; m < 16; ++m) t[m * kWarp] = v[m];
}

// y [nt][rows] for the set's weights, W warps of R rows per block. Per chunk of 4 groups: the block
// builds the tables of every (group, token, basis, lane) and gathers the salient columns' inputs,
// synchronizes, then each warp adds its rows' entries. The inputs of the next chunk's tables (x
// and the column scales) are loaded into registers before the lookups of this one, so their
// latency hides behind the lookups. With NBUF = 2 the next chunk is built into the other buffer
// while slow warps still read this one (one barrier per chunk); NT = 2 has room for one buffer
// only. Every block builds the tables of all columns, so the more rows a block serves the less
// building each row costs: W * R trades that against the number of blocks.
template <int NT, int NBUF, int W, int R>
__global__ void __launch_bounds__(W * kWarp) fluxbin_gemv_kernel(GemvSet set, const float* __restrict__ x, int nt,
                                                                  int accumulate) {
  constexpr int kT = W * kWarp;
  constexpr int kJobs = kChunk * NT * 2 * kWarp;  // tables of one chunk: (group, token, basis, lane)
  constexpr int kJ = (kJobs + kT - 1) / kT;       // per thread
  const int b = static_cast<int>(blockIdx.x);
  FRUGAL_GEMV_SET_PART(set, b);
  __shared__ float tab[NBUF][kChunk][NT][2][16][kWarp];
  __shared__ float xs[NBUF][kChunk][NT][32];
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % kWarp;
  const int64_t row0 = (static_cast<int64_t>(b - first) * W + tid / kWarp) * R;
  // Rows past the end are clamped for loading and not stored; their warps still take part in the
  // barriers.
  int64_t rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r) rows[r] = row0 + r < w.rows ? row0 + r : w.rows - 1;
  const int64_t groups = w.cols / fb::kGroup;
  const int64_t gp = fluxbin_padded_groups(w.cols);
  const int64_t chunks = gp / kChunk;
  const int S = w.salient;
  const auto* bits = reinterpret_cast<const uint32_t*>(w.data);
  const auto* rsc = reinterpret_cast<const uint4*>(w.scales);  // a chunk's 4 (r_1, r_2) pairs of a row
  uint32_t word[R];
  uint4 rs[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {  // weights: before the wait (they do not depend on the previous kernel)
    word[r] = __ldg(bits + rows[r] * chunks * kWarp + lane);
    rs[r] = __ldg(rsc + rows[r] * chunks);
  }
  pdl_wait();
  pdl_trigger();
  // This thread's table inputs of chunk q: x and the column scales of its quads (zero past the end).
  float4 jx[kJ];
  uint2 jc[kJ];
  const auto load_jobs = [&](int64_t q) {
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      const int s = tid + j * kT;
      const int l = s % kWarp, k = (s / kWarp) % 2, t = (s / (2 * kWarp)) % NT, gi = s / (2 * kWarp * NT);
      const int64_t g = q * kChunk + gi;
      jx[j] = make_float4(0.f, 0.f, 0.f, 0.f);
      jc[j] = make_uint2(0u, 0u);
      if (s < kJobs && t < nt && g < groups) {
        const int64_t col = g * fb::kGroup + 4 * l;
        jx[j] = __ldg(reinterpret_cast<const float4*>(x + t * w.cols + col));
        jc[j] = __ldg(reinterpret_cast<const uint2*>(w.col_scales + k * gp * fb::kGroup + col));
      }
    }
  };
  load_jobs(0);
  float acc[NT][R];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
#pragma unroll
    for (int r = 0; r < R; ++r) acc[t][r] = 0.f;
  }
  for (int64_t q = 0; q < chunks; ++q) {
    const int buf = NBUF == 2 ? static_cast<int>(q & 1) : 0;
    if (NBUF == 1 && q > 0) __syncthreads();  // every warp is done reading the one buffer
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      const int s = tid + j * kT;
      if (s >= kJobs) break;
      const int l = s % kWarp, k = (s / kWarp) % 2, t = (s / (2 * kWarp)) % NT, gi = s / (2 * kWarp * NT);
      const float2 c01 = __half22float2(*reinterpret_cast<const __half2*>(&jc[j].x));
      const float2 c23 = __half22float2(*reinterpret_cast<const __half2*>(&jc[j].y));
      const float u[4] = {c01.x * jx[j].x, c01.y * jx[j].y, c23.x * jx[j].z, c23.y * jx[j].w};
      quad_table(u, &tab[buf][gi][t][k][0][l]);
    }
    for (int s = tid; s < kChunk * NT * S; s += kT) {
      const int e = s % S, t = (s / S) % NT, gi = s / (S * NT);
      const int64_t g = q * kChunk + gi;
      xs[buf][gi][t][e] =
          t < nt && g < groups ? x[t * w.cols + g * fb::kGroup + w.salient_idx[g * S + e]] : 0.f;
    }
    __syncthreads();
    uint32_t next_word[R];
    uint4 next_rs[R];
    if (q + 1 < chunks) {
      load_jobs(q + 1);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        next_word[r] = __ldg(bits + (rows[r] * chunks + q + 1) * kWarp + lane);
        next_rs[r] = __ldg(rsc + rows[r] * chunks + q + 1);
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint32_t rw[4] = {rs[r].x, rs[r].y, rs[r].z, rs[r].w};
#pragma unroll
      for (int gi = 0; gi < kChunk; ++gi) {
        const uint32_t byte = word[r] >> (8 * gi);
        const int n1 = static_cast<int>(byte & 15u), n2 = static_cast<int>((byte >> 4) & 15u);
        const float2 rf = __half22float2(*reinterpret_cast<const __half2*>(&rw[gi]));
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          acc[t][r] += rf.x * tab[buf][gi][t][0][n1][lane] + rf.y * tab[buf][gi][t][1][n2][lane];
        }
      }
    }
    for (int s = lane; s < kChunk * S; s += kWarp) {
      const int gi = s / S, e = s % S;
      const int64_t g = q * kChunk + gi;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint32_t code = (w.salient_codes[(rows[r] * gp + g) * (S / 2) + e / 2] >> (4 * (e & 1))) & 15u;
        const float v = __half2float(w.salient_scales[rows[r] * gp + g]) * static_cast<float>(static_cast<int>(code) - 8);
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[t][r] += v * xs[buf][gi][t][e];
      }
    }
    if (q + 1 < chunks) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        word[r] = next_word[r];
        rs[r] = next_rs[r];
      }
    }
  }
  gemv_finish_rows<W, NT, R, 1>(acc, 0, row0, w.rows, nt, bias, y, accumulate);
}

// Four consecutive values of row `o` (columns 128 g + 4 l ..): the reference's arithmetic and order
// (quant/fluxbin.cc dequantize_row: basis 1, then basis 2, then the salient values), unfused, so
// that the result equals it bit for bit.
__device__ __forceinline__ void fluxbin_quad(const DevWeight& w, int64_t o, int64_t g, int l, float (&v)[4]) {
  const int64_t gp = fluxbin_padded_groups(w.cols);
  const uint32_t word = reinterpret_cast<const uint32_t*>(w.data)[(o * (gp / kChunk) + g / kChunk) * kWarp + l];
  const uint32_t byte = word >> (8 * (g % kChunk));
  const float2 r = __half22float2(reinterpret_cast<const __half2*>(w.scales)[o * gp + g]);
  const int64_t col = g * fb::kGroup + 4 * l;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float s1 = (byte >> i) & 1u ? 1.f : -1.f;
    const float s2 = (byte >> (4 + i)) & 1u ? 1.f : -1.f;
    const float c1 = __half2float(w.col_scales[col + i]);
    const float c2 = __half2float(w.col_scales[gp * fb::kGroup + col + i]);
    v[i] = __fadd_rn(__fmul_rn(__fmul_rn(s1, r.x), c1), __fmul_rn(__fmul_rn(s2, r.y), c2));
  }
  const int S = w.salient;
  if (S > 0) {
    const float sc = __half2float(w.salient_scales[o * gp + g]);
    for (int e = 0; e < S; ++e) {
      const int idx = w.salient_idx[g * S + e] - 4 * l;
      if (idx < 0 || idx >= 4) continue;
      const int code = (w.salient_codes[(o * gp + g) * (S / 2) + e / 2] >> (4 * (e & 1))) & 15;
      v[idx] = __fadd_rn(v[idx], __fmul_rn(sc, static_cast<float>(code - 8)));
    }
  }
}

__global__ void fluxbin_dequant_kernel(DevWeight w, __half* __restrict__ out) {
  pdl_wait();
  pdl_trigger();
  const int64_t groups = w.cols / fb::kGroup;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= w.rows * groups * kWarp) return;
  const int l = static_cast<int>(i % kWarp);
  const int64_t g = (i / kWarp) % groups, o = i / kWarp / groups;
  float v[4];
  fluxbin_quad(w, o, g, l, v);
  const __half2 a = __floats2half2_rn(v[0], v[1]), c = __floats2half2_rn(v[2], v[3]);
  uint2 p;
  p.x = *reinterpret_cast<const uint32_t*>(&a);
  p.y = *reinterpret_cast<const uint32_t*>(&c);
  *reinterpret_cast<uint2*>(out + o * w.cols + g * fb::kGroup + 4 * l) = p;
}

__global__ void fluxbin_rows_kernel(DevWeight w, const int32_t* __restrict__ ids, int n, float* __restrict__ y) {
  pdl_wait();
  pdl_trigger();
  const int64_t groups = w.cols / fb::kGroup;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(n) * groups * kWarp) return;
  const int l = static_cast<int>(i % kWarp);
  const int64_t g = (i / kWarp) % groups, t = i / kWarp / groups;
  float v[4];
  fluxbin_quad(w, ids[t], g, l, v);
  *reinterpret_cast<float4*>(y + t * w.cols + g * fb::kGroup + 4 * l) = make_float4(v[0], v[1], v[2], v[3]);
}

void label(const char* kernel, const GemvSet& g, int n) {
  if (!profiling()) return;
  uint64_t bytes = 0;
  int64_t rows = 0;
  const DevWeight* ws[3] = {&g.w0, &g.w1, &g.w2};
  for (int i = 0; i < g.n; ++i) {
    rows += ws[i]->rows;
    bytes += sections(ws[i]->rows, ws[i]->cols, ws[i]->salient).total;
  }
  profile_label(cat(kernel, " fluxbin ", rows, "x", g.w0.cols, " n=", n), bytes);
}

}  // namespace

uint64_t fluxbin_device_bytes(int64_t rows, int64_t cols, int salient) { return sections(rows, cols, salient).total; }

Status upload_fluxbin(const WeightTensor& w, DevWeight* dst, void** alloc, uint64_t* bytes, cudaStream_t stream,
                      HostConsumed consumed) {
  const FluxBinParts& p = w.fluxbin;
  const int S = p.salient;
  if (w.cols % fb::kGroup != 0 || w.cols <= 0 || w.rows <= 0 || p.col_scales == nullptr ||
      (S > 0 && (p.salient_idx == nullptr || p.salient_vals == nullptr || S % 2 != 0 || S > 32)) ||
      w.row_stride != static_cast<size_t>(w.cols / fb::kGroup * fb::kBlockBytes)) {
    return fail(ErrorCode::kInvalidArgument, "cuda: FluxBin weight ", w.rows, " x ", w.cols,
                " without its companion tensors or with rows of ", static_cast<uint64_t>(w.row_stride),
                " bytes (needs columns in groups of 128, 36 bytes each)");
  }
  const int64_t groups = w.cols / fb::kGroup;
  const int64_t gp = fluxbin_padded_groups(w.cols);
  const Sections sec = sections(w.rows, w.cols, S);
  std::vector<uint8_t> host(sec.total, 0);
  const auto* src = static_cast<const uint8_t*>(w.data);
  uint8_t* bits = host.data() + sec.bits;
  uint8_t* rsc = host.data() + sec.rsc;
  for (int64_t o = 0; o < w.rows; ++o) {
    for (int64_t g = 0; g < groups; ++g) {
      const uint8_t* blk = src + (o * groups + g) * fb::kBlockBytes;
      uint8_t* chunk = bits + ((o * (gp / kChunk) + g / kChunk) * kWarp) * 4 + g % kChunk;
      for (int l = 0; l < kWarp; ++l) {
        const int shift = 4 * (l & 1);
        const uint8_t n1 = (blk[l / 2] >> shift) & 15u;
        const uint8_t n2 = (blk[fb::kSignBytes + l / 2] >> shift) & 15u;
        chunk[4 * l] = static_cast<uint8_t>(n1 | (n2 << 4));
      }
      std::memcpy(rsc + (o * gp + g) * 4, blk + 2 * fb::kSignBytes, 4);
    }
  }
  for (int k = 0; k < fb::kBases; ++k) {
    std::memcpy(host.data() + sec.col + static_cast<size_t>(k * gp * fb::kGroup) * 2, p.col_scales + k * w.cols,
                static_cast<size_t>(w.cols) * 2);
  }
  if (S > 0) {
    std::memcpy(host.data() + sec.sidx, p.salient_idx, static_cast<size_t>(groups * S));
    const int64_t srb = fb::salient_row_bytes(S);
    for (int64_t o = 0; o < w.rows; ++o) {
      for (int64_t g = 0; g < groups; ++g) {
        const uint8_t* v = p.salient_vals + (o * groups + g) * srb;
        std::memcpy(host.data() + sec.ssc + (o * gp + g) * 2, v, 2);
        std::memcpy(host.data() + sec.scod + (o * gp + g) * (S / 2), v + 2, static_cast<size_t>(S / 2));
      }
    }
  }
  uint8_t* mem = nullptr;
  FRUGAL_CUDA(cudaMalloc(&mem, sec.total));
  Status st = cuda_status(cudaMemcpyAsync(mem, host.data(), sec.total, cudaMemcpyHostToDevice, stream), "upload");
  if (st.ok()) st = cuda_status(cudaStreamSynchronize(stream), "upload");
  if (!st.ok()) {
    cudaFree(mem);
    return st;
  }
  if (consumed.fn != nullptr) consumed.fn(consumed.ctx, w.data, w.row_stride * static_cast<size_t>(w.rows));
  DevWeight d;
  d.type = DType::kFLUXBIN;
  d.rows = w.rows;
  d.cols = w.cols;
  d.row_stride = gp * 32;
  d.data = mem + sec.bits;
  d.scales = reinterpret_cast<const __half*>(mem + sec.rsc);
  d.col_scales = reinterpret_cast<const __half*>(mem + sec.col);
  if (S > 0) {
    d.salient = S;
    d.salient_idx = mem + sec.sidx;
    d.salient_scales = reinterpret_cast<const __half*>(mem + sec.ssc);
    d.salient_codes = mem + sec.scod;
  }
  *dst = d;
  *alloc = mem;
  *bytes = sec.total;
  return ok_status();
}

namespace {

// Warps and rows per warp of the GEMV's blocks (W x R rows share one block's tables): from
// FRUGAL_FLUXBIN_GEMV at the first launch, or set_fluxbin_gemv_shape(); 8x4 otherwise, the fastest
// for one token on an H100 (docs/quantization.md; every shape passes the products test).
std::atomic<int> g_shape{0};  // 10 * warps + rows; 0: not chosen yet

bool parse_shape(const std::string& v, int* code) {
  if (v == "8x2" || v == "16x2" || v == "8x4" || v == "16x4") {
    *code = (v[0] == '8' ? 80 : 160) + (v.back() - '0');
    return true;
  }
  return false;
}

int fluxbin_shape() {
  int code = g_shape.load(std::memory_order_relaxed);
  if (code != 0) return code;
  code = 84;
  const char* e = std::getenv("FRUGAL_FLUXBIN_GEMV");
  if (e != nullptr) parse_shape(e, &code);
  int expected = 0;
  g_shape.compare_exchange_strong(expected, code, std::memory_order_relaxed);
  return g_shape.load(std::memory_order_relaxed);
}

template <int W, int R>
void launch_fluxbin_shape(const GemvSet& set, const float* x, int n, bool accumulate, cudaStream_t s) {
  GemvSet g = set;
  const int total = gemv_layout(g, W * R);
  if (total <= 0 || n <= 0) return;
  label("fluxbin_gemv", g, n);
  // Two tokens per launch at most (the tables of more do not fit shared memory): each launch reads
  // the weights once.
  for (int t0 = 0; t0 < n;) {
    const int nt = n - t0 >= 2 ? 2 : 1;
    GemvSet p = g;
    p.y0 = g.y0 + static_cast<int64_t>(t0) * g.w0.rows;
    if (g.n > 1) p.y1 = g.y1 + static_cast<int64_t>(t0) * g.w1.rows;
    if (g.n > 2) p.y2 = g.y2 + static_cast<int64_t>(t0) * g.w2.rows;
    const float* xp = x + static_cast<int64_t>(t0) * g.w0.cols;
    if (nt == 2) {
      launch_kernel("fluxbin_gemv_kernel<NT=2>", fluxbin_gemv_kernel<2, 1, W, R>, dim3(static_cast<unsigned>(total)),
                    dim3(W * kWarp), 0, s, p, xp, 2, accumulate ? 1 : 0);
    } else {
      launch_kernel("fluxbin_gemv_kernel<NT=1>", fluxbin_gemv_kernel<1, 2, W, R>, dim3(static_cast<unsigned>(total)),
                    dim3(W * kWarp), 0, s, p, xp, 1, accumulate ? 1 : 0);
    }
    t0 += nt;
  }
}

}  // namespace

Status set_fluxbin_gemv_shape(const std::string& shape) {
  int code = 0;
  if (!parse_shape(shape, &code)) {
    return fail(ErrorCode::kInvalidArgument, "cuda: FluxBin GEMV shape '", shape, "' is not one of 8x2, 16x2, 8x4, 16x4");
  }
  g_shape.store(code, std::memory_order_relaxed);
  return ok_status();
}

void launch_fluxbin_gemv_set(const GemvSet& set, const float* x, int n, bool accumulate, cudaStream_t s) {
  switch (fluxbin_shape()) {
    case 82: return launch_fluxbin_shape<8, 2>(set, x, n, accumulate, s);
    case 162: return launch_fluxbin_shape<16, 2>(set, x, n, accumulate, s);
    case 164: return launch_fluxbin_shape<16, 4>(set, x, n, accumulate, s);
    default: return launch_fluxbin_shape<8, 4>(set, x, n, accumulate, s);
  }
}

void launch_fluxbin_dequant_f16(const DevWeight& w, __half* out, cudaStream_t s) {
  const unsigned grid = blocks_1d(w.rows * (w.cols / fb::kGroup) * kWarp, 256, "fluxbin_dequant_kernel");
  if (grid == 0) return;
  launch_kernel("fluxbin_dequant_kernel", fluxbin_dequant_kernel, dim3(grid), dim3(256), 0, s, w, out);
}

void launch_fluxbin_get_rows(const DevWeight& w, const int32_t* ids, int n, float* y, cudaStream_t s) {
  const unsigned grid = blocks_1d(static_cast<int64_t>(n) * (w.cols / fb::kGroup) * kWarp, 256, "fluxbin_rows_kernel");
  if (grid == 0) return;
  launch_kernel("fluxbin_rows_kernel", fluxbin_rows_kernel, dim3(grid), dim3(256), 0, s, w, ids, n, y);
}

}  // namespace frugal::cuda
