// Tensor-core products of F16/BF16 weights with a few tokens: y [n][rows] (+)= x [n][cols] W^T
// (+ bias) for 9 <= n <= 64, the batches of a many-sequence decode step.
//
// Why not cuBLAS: with few tokens the product is a weight stream (each weight is read once and
// used n times), and cuBLAS tiles the output: a 4096 x 4096 weight at 64 tokens is a few dozen
// tiles for 132 SMs. In a 64-sequence step on an H100 cublasGemmEx took 38 us for it (0.9 TB/s of
// weights; the card copies at 3 TB/s), and splitting K into a strided batch plus a sum kernel did
// not help.
//
// Layout. A block of eight warps owns 128 weight rows (16 per warp) and every token, and walks one
// slice of K in steps of 64 columns: each step's weight tile (128 x 64) and activation tile (n x 64,
// n rounded up to 16, 32 or 64) go to shared memory by cp.async, four stages deep, and each warp
// takes A fragments of its rows and B fragments of the tokens by ldmatrix into mma.sync m16n8k16
// with F32 accumulators (the arrangement of flash_attention.cu's S = Q K^T). Two blocks per SM.
//
// Split K. Rows / 128 blocks alone leave SMs idle for the narrow weights (Q, K, V, O, down), so
// K is cut into `slices` (chosen from the block count and the SM count, never from n) and the
// slices of a row range form one thread-block cluster: each block leaves its partial tile in its
// shared memory, and after a cluster barrier block c adds, for its share of the tile, the S
// partials in slice order (reading the others' shared memory), then bias and the old y. The sum
// order is fixed, so results do not depend on timing or on how many tokens share the batch: a
// token's outputs are the same bits at n = 9 and n = 64.
//
// Several weights of one input (Q, K, V; gate, up) run as one launch: blockIdx.x walks their
// row ranges one after the other.
//
// Q8_0 weights (the device layout: int8 codes [rows][cols], F16 scales [rows][cols / 32]) and
// Q4_K weights (GGUF's 144-byte blocks of 256) are read as they are: each step's codes and scales
// (Q4_K: the block header and the step's 32 code bytes) go to shared memory by cp.async like the
// F16 tile, and the block converts the step to an F16 tile (rounded as the dequantizing kernel
// rounds) just before its products. Without this kernel a quantized product of more than 8 tokens
// first wrote the whole weight as F16 and cuBLAS read it back: for Q8_0 five bytes of traffic per
// weight instead of one.
//
// Launch. With programmatic dependent launch the block starts its weight copies before the
// previous kernel (which writes x) has finished, and waits for it before touching x or y; a
// weight dequantized by that previous kernel (w_ready false) waits too.
//
// sm_90+ (clusters): other builds trap, and gemm_mma_built_for_device() asks the runtime which
// build this GPU runs; the backend keeps cuBLAS where it is not.
#include <algorithm>
#include <type_traits>

#include <cooperative_groups.h>

#include "frugal/backend/cuda/common.cuh"
#include "frugal/backend/cuda/mma.cuh"

namespace frugal::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerBlock = 16 * kWarps;
constexpr int kBk = 64;        // columns per step
constexpr int kLd = kBk + 8;   // shared row stride in halves: 16 bytes past 128, so ldmatrix rows spread over banks
constexpr int kStages = 4;     // steps in shared memory (one in use, three in flight)
constexpr int kMaxSlices = 8;  // the portable cluster size
constexpr int kLdQ = kBk + 16;  // Q8_0 code tile row stride in bytes (16-byte aligned rows)
constexpr int kLdK4 = 48;       // Q4_K per row and step: the block's 16-byte header, 32 bytes of codes
// Weight formats of the kernel (template argument WF).
constexpr int kF16Bits = 0;  // F16 or BF16 as they are
constexpr int kQ8 = 1;       // Q8_0: int8 codes [rows][cols], F16 scales [rows][cols / 32]
constexpr int kQ4K = 2;      // Q4_K: GGUF's 144-byte blocks of 256
constexpr int kMinStepsPerSlice = 4;

struct MmaArgs {
  const void* w[kMmaMaxParts];
  const __half* scales[kMmaMaxParts];  // Q8_0: [rows][cols / 32]
  int64_t ld[kMmaMaxParts];  // elements (16-bit) or bytes (Q8_0 codes) between weight rows
  int64_t rows[kMmaMaxParts];
  float* y[kMmaMaxParts];
  const float* bias[kMmaMaxParts];
  int block_end[kMmaMaxParts];  // cumulative row-block counts
  const void* x;                // [n][cols] in the weight's 16-bit type
  int n;
  int64_t cols;
  int steps_per_slice;
  bool acc;
  bool w_ready;  // the weight is not written by the previous kernel: copy it before pdl_wait
};

// Shared memory: kStages activation tiles [NT * 8][kLd] halves, and kStages weight tiles: F16
// [128][kLd] halves, or Q8_0 codes [128][kLdQ] bytes plus scales [128][2] and one converted F16
// tile [128][kLd].
// Raw weight bytes per row and stage of the quantized formats, before their F16 tile.
template <int WF>
__host__ __device__ constexpr size_t raw_row_bytes() {
  return WF == kQ8 ? kLdQ + 4 : kLdK4;
}
template <int WF, int NT>
__host__ __device__ constexpr size_t smem_x_offset() {
  return WF != kF16Bits
             ? static_cast<size_t>(kStages) * kRowsPerBlock * raw_row_bytes<WF>() + sizeof(__half) * kRowsPerBlock * kLd
             : sizeof(__half) * static_cast<size_t>(kStages) * kRowsPerBlock * kLd;
}
template <int WF, int NT>
__host__ __device__ constexpr size_t smem_bytes() {
  return smem_x_offset<WF, NT>() + sizeof(__half) * static_cast<size_t>(kStages) * NT * 8 * kLd;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// 16 converted weights into a row of the F16 tile (two 16-byte stores).
__device__ __forceinline__ void store_16_halves(__half* dst, const __half (&h)[16]) {
  *reinterpret_cast<int4*>(dst) = *reinterpret_cast<const int4*>(h);
  *reinterpret_cast<int4*>(dst + 8) = *reinterpret_cast<const int4*>(h + 8);
}
#endif

template <bool BF16, int WF, int NT>
__global__ void __launch_bounds__(kThreads, 2) gemm_mma_kernel(MmaArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char smem_raw[];
  using T = __half;  // bits only: the mma instruction says which 16-bit type they are
  T* sw = reinterpret_cast<T*>(smem_raw);  // F16: [kStages][128][kLd]
  uint8_t* sq = smem_raw;                  // Q8_0: codes [kStages][128][kLdQ]
  __half* ss = reinterpret_cast<__half*>(smem_raw + kStages * kRowsPerBlock * kLdQ);  // [kStages][128][2]
  uint8_t* sk4 = smem_raw;                 // Q4_K: [kStages][128][kLdK4]
  T* sconv = reinterpret_cast<T*>(smem_raw + kStages * kRowsPerBlock * raw_row_bytes<WF>());  // [128][kLd]
  T* sx = reinterpret_cast<T*>(smem_raw + smem_x_offset<WF, NT>());  // [kStages][NT * 8][kLd]
  constexpr int kTok = NT * 8;
  static_assert(sizeof(float) * kTok * kRowsPerBlock <= smem_bytes<WF, NT>(), "the partial tile reuses the stages");
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  const int bx = static_cast<int>(blockIdx.x);
  int part = 0;
  while (part + 1 < kMmaMaxParts && bx >= a.block_end[part]) ++part;
  const int64_t row0 = static_cast<int64_t>(bx - (part > 0 ? a.block_end[part - 1] : 0)) * kRowsPerBlock;
  const T* W = static_cast<const T*>(a.w[part]);
  const int64_t rows = a.rows[part], ld = a.ld[part];
  const T* X = static_cast<const T*>(a.x);
  const int64_t cols = a.cols;
  const int64_t steps = (cols + kBk - 1) / kBk;
  const int64_t s0 = static_cast<int64_t>(blockIdx.y) * a.steps_per_slice;
  const int64_t s1 = s0 + a.steps_per_slice < steps ? s0 + a.steps_per_slice : steps;
  const int n_steps = s1 > s0 ? static_cast<int>(s1 - s0) : 0;

  // Step s of this slice into stage `stage`: rows past the weight's end, tokens past n and columns
  // past cols are zeros (cols is a multiple of 8, so a 16-byte piece is all in or all out).
  auto load_w = [&](int s, int stage) {
    const int64_t k0 = (s0 + s) * kBk;
    if constexpr (WF == kQ4K) {
      // Per row: the super-block's header (d, dmin, 12 scale bytes) and the step's 32 code bytes
      // (the step is one 64-column chunk of a 256-column block).
      const uint8_t* blocks = static_cast<const uint8_t*>(a.w[part]);
      uint8_t* skt = sk4 + stage * kRowsPerBlock * kLdK4;
      const int64_t boff = (k0 / 256) * 144;
      const int chunk = static_cast<int>((k0 % 256) / 64);
      for (int c = tid; c < kRowsPerBlock * 3; c += kThreads) {
        const int r = c / 3, piece = c % 3;
        const bool in = row0 + r < rows;
        const int64_t off = boff + (piece == 0 ? 0 : 16 + 32 * chunk + 16 * (piece - 1));
        const uint8_t* src = in ? blocks + (row0 + r) * ld + off : blocks;
        cp_async_16(smem_u32(skt + r * kLdK4 + piece * 16), src, in ? 16 : 0);
      }
      return;
    }
    if constexpr (WF == kQ8) {
      // Codes: 4 pieces of 16 bytes per row; scales: 2 per row (4 bytes: cols % 64 == 0 keeps
      // them 4-byte aligned).
      const uint8_t* codes = static_cast<const uint8_t*>(a.w[part]);
      const __half* sc = a.scales[part];
      uint8_t* sqt = sq + stage * kRowsPerBlock * kLdQ;
#pragma unroll
      for (int i = 0; i < kRowsPerBlock * 4 / kThreads; ++i) {
        const int c = tid + i * kThreads;
        const int r = c / 4, col = (c % 4) * 16;
        const bool in = row0 + r < rows;
        const uint8_t* src = in ? codes + (row0 + r) * ld + k0 + col : codes;
        cp_async_16(smem_u32(sqt + r * kLdQ + col), src, in ? 16 : 0);
      }
      if (tid < kRowsPerBlock) {
        const bool in = row0 + tid < rows;
        const __half* src = in ? sc + (row0 + tid) * (cols / 32) + k0 / 32 : sc;
        cp_async_4(smem_u32(ss + (stage * kRowsPerBlock + tid) * 2), src, in ? 4 : 0);
      }
      return;
    }
    T* swt = sw + stage * kRowsPerBlock * kLd;
#pragma unroll
    for (int i = 0; i < kRowsPerBlock * 8 / kThreads; ++i) {
      const int c = tid + i * kThreads;
      const int r = c / 8, col = (c % 8) * 8;
      const bool in = row0 + r < rows && k0 + col < cols;
      const T* src = in ? W + (row0 + r) * ld + k0 + col : W;
      cp_async_16(smem_u32(swt + r * kLd + col), src, in ? 16 : 0);
    }
  };
  auto load_x = [&](int s, int stage) {
    const int64_t k0 = (s0 + s) * kBk;
    T* sxt = sx + stage * kTok * kLd;
#pragma unroll
    for (int i = 0; i < (kTok * 8 + kThreads - 1) / kThreads; ++i) {
      const int c = tid + i * kThreads;
      if (kTok * 8 % kThreads != 0 && c >= kTok * 8) break;
      const int r = c / 8, col = (c % 8) * 8;
      const bool in = r < a.n && k0 + col < cols;
      const T* src = in ? X + static_cast<int64_t>(r) * cols + k0 + col : X;
      cp_async_16(smem_u32(sxt + r * kLd + col), src, in ? 16 : 0);
    }
  };

  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;

  // The first stages' weights go out before the wait (they are the bulk of the bytes); every
  // group below holds whole stages, so cp_async_wait counts stay right.
  if (a.w_ready) {
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < n_steps) load_w(s, s);
    }
  }
  pdl_wait();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_steps) {
      if (!a.w_ready) load_w(s, s);
      load_x(s, s);
    }
    cp_async_commit();
  }
  for (int it = 0; it < n_steps; ++it) {
    cp_async_wait<kStages - 2>();  // this thread's copies of step `it` have landed
    __syncthreads();               // everyone's, and everyone is done with step it - 1's stage
    if (it + kStages - 1 < n_steps) {
      load_w(it + kStages - 1, (it + kStages - 1) % kStages);
      load_x(it + kStages - 1, (it + kStages - 1) % kStages);
    }
    cp_async_commit();
    const T* swt = sw + (it % kStages) * kRowsPerBlock * kLd;
    if constexpr (WF == kQ4K) {
      // The step's 64 weights of each row into the F16 tile: pieces 0 and 1 are the low nibbles of
      // code bytes 0..15 and 16..31 (sub-block 2 chunk), 2 and 3 their high nibbles (sub-block
      // 2 chunk + 1); value d sc q - dmin m, as the dequantizing kernel computes it.
      const uint8_t* skt = sk4 + (it % kStages) * kRowsPerBlock * kLdK4;
      const int chunk = static_cast<int>(((s0 + it) * kBk % 256) / 64);
#pragma unroll
      for (int i = 0; i < kRowsPerBlock * 4 / kThreads; ++i) {
        const int c = tid + i * kThreads;
        const int r = c / 4, piece = c % 4;
        const uint4 hdr = *reinterpret_cast<const uint4*>(skt + r * kLdK4);
        const uint4 raw = *reinterpret_cast<const uint4*>(skt + r * kLdK4 + 16 + 16 * (piece % 2));
        uint32_t sj, mj;
        q4k_scale_min(hdr, 2 * chunk + piece / 2, &sj, &mj);
        const float dj = q4k_d(hdr) * static_cast<float>(sj), nj = q4k_dmin(hdr) * static_cast<float>(mj);
        const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
        __align__(16) __half h[16];
#pragma unroll
        for (int e = 0; e < 16; ++e) {
          const uint32_t byte = (words[e / 4] >> (8 * (e % 4))) & 0xFFu;
          const uint32_t q = piece >= 2 ? byte >> 4 : byte & 0xFu;
          h[e] = __float2half_rn(dj * static_cast<float>(q) - nj);
        }
        store_16_halves(sconv + r * kLd + piece * 16, h);
      }
      __syncthreads();
      swt = sconv;
    }
    if constexpr (WF == kQ8) {
      // The step's codes x scales into the F16 tile (the previous step's products are done with it:
      // the barrier above), 16 codes per piece.
      const uint8_t* sqt = sq + (it % kStages) * kRowsPerBlock * kLdQ;
      const __half* sst = ss + (it % kStages) * kRowsPerBlock * 2;
#pragma unroll
      for (int i = 0; i < kRowsPerBlock * 4 / kThreads; ++i) {
        const int c = tid + i * kThreads;
        const int r = c / 4, col = (c % 4) * 16;
        const int4 q = *reinterpret_cast<const int4*>(sqt + r * kLdQ + col);
        const float d = __half2float(sst[r * 2 + col / 32]);
        const int8_t* qb = reinterpret_cast<const int8_t*>(&q);
        __align__(16) __half h[16];
#pragma unroll
        for (int e = 0; e < 16; ++e) h[e] = __float2half_rn(d * static_cast<float>(qb[e]));
        store_16_halves(sconv + r * kLd + col, h);
      }
      __syncthreads();
      swt = sconv;
    }
    const T* sxt = sx + (it % kStages) * kTok * kLd;
#pragma unroll
    for (int kk = 0; kk < kBk / 16; ++kk) {
      uint32_t af[4];
      ldsm_x4(af, smem_u32(swt + (warp * 16 + lane % 16) * kLd + kk * 16 + (lane / 16) * 8));
#pragma unroll
      for (int jp = 0; jp < NT / 2; ++jp) {
        uint32_t b[4];
        const int tok = jp * 16 + (lane % 8) + (lane / 16) * 8;
        ldsm_x4(b, smem_u32(sxt + tok * kLd + kk * 16 + ((lane / 8) % 2) * 8));
        if constexpr (BF16) {
          mma_16816_bf16(acc[2 * jp], af, b[0], b[1]);
          mma_16816_bf16(acc[2 * jp + 1], af, b[2], b[3]);
        } else {
          mma_16816(acc[2 * jp], af, b[0], b[1]);
          mma_16816(acc[2 * jp + 1], af, b[2], b[3]);
        }
      }
    }
  }
  cp_async_wait<0>();
  pdl_trigger();

  // Accumulator element e of tile j: row warp * 16 + lane / 4 (+ 8 for e >= 2), token
  // j * 8 + 2 (lane % 4) + e % 2.
  float* y = a.y[part];
  const float* bias = a.bias[part];
  const int r_lo = warp * 16 + lane / 4;
  if (gridDim.y == 1) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t row = row0 + r_lo + (e >= 2 ? 8 : 0);
        const int tok = j * 8 + 2 * (lane % 4) + e % 2;
        if (row >= rows || tok >= a.n) continue;
        float v = acc[j][e];
        if (bias != nullptr) v += bias[row];
        float* yp = y + static_cast<int64_t>(tok) * rows + row;
        *yp = a.acc ? *yp + v : v;
      }
    }
    return;
  }
  // Split: the partial tile [token][128 rows] into this block's shared memory, then block c of
  // the cluster sums its share of every block's tile, slice 0 first.
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  __syncthreads();  // every warp is done with the stages the tile overwrites
  float* tile = reinterpret_cast<float*>(smem_raw);
#pragma unroll
  for (int j = 0; j < NT; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      tile[(j * 8 + 2 * (lane % 4) + e % 2) * kRowsPerBlock + r_lo + (e >= 2 ? 8 : 0)] = acc[j][e];
    }
  }
  cluster.sync();
  const int slices = static_cast<int>(gridDim.y);
  const int rank = static_cast<int>(blockIdx.y);
  const int total = a.n * kRowsPerBlock;
  const int per = (total + slices - 1) / slices;
  const int e1 = min(total, (rank + 1) * per);
  for (int e = rank * per + tid; e < e1; e += kThreads) {
    const int64_t row = row0 + e % kRowsPerBlock;
    if (row >= rows) continue;
    float v = 0.f;
    for (int s = 0; s < slices; ++s) v += cluster.map_shared_rank(tile, s)[e];
    if (bias != nullptr) v += bias[row];
    float* yp = y + static_cast<int64_t>(e / kRowsPerBlock) * rows + row;
    *yp = a.acc ? *yp + v : v;
  }
  cluster.sync();  // no block leaves while another still reads its tile
#else
  __trap();  // gemm_mma_built_for_device() declines on GPUs that run this build
#endif
}

template <bool BF16, int WF, int NT>
cudaError_t allow_smem() {
  return cudaFuncSetAttribute(gemm_mma_kernel<BF16, WF, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(smem_bytes<WF, NT>()));
}

template <bool BF16, int WF, int NT>
void launch_one(const MmaArgs& a, dim3 grid, cudaStream_t s) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem_bytes<WF, NT>();
  cfg.stream = s;
  cudaLaunchAttribute attr[2] = {};
  int n_attr = 0;
  if (grid.y > 1) {
    attr[n_attr].id = cudaLaunchAttributeClusterDimension;
    attr[n_attr].val.clusterDim.x = 1;
    attr[n_attr].val.clusterDim.y = grid.y;
    attr[n_attr].val.clusterDim.z = 1;
    ++n_attr;
  }
  if (pdl_enabled()) {
    attr[n_attr].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n_attr].val.programmaticStreamSerializationAllowed = 1;
    ++n_attr;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n_attr;
  (void)cudaLaunchKernelEx(&cfg, gemm_mma_kernel<BF16, WF, NT>, a);  // checked by after_launch
  after_launch("gemm_mma_kernel", grid, dim3(kThreads), s);
}

}  // namespace

bool gemm_mma_built_for_device() {
  return once_per_device([] {
    if (!kernel_built_for_device(reinterpret_cast<const void*>(gemm_mma_kernel<false, kF16Bits, 8>), 90)) {
      return false;
    }
    // More than 48 KB of shared memory is opt-in per kernel and device; here, not at the first
    // launch, which may be inside a graph capture.
    const cudaError_t e[] = {allow_smem<false, kF16Bits, 2>(), allow_smem<false, kF16Bits, 4>(),
                             allow_smem<false, kF16Bits, 8>(), allow_smem<true, kF16Bits, 2>(),
                             allow_smem<true, kF16Bits, 4>(),  allow_smem<true, kF16Bits, 8>(),
                             allow_smem<false, kQ8, 2>(),      allow_smem<false, kQ8, 4>(),
                             allow_smem<false, kQ8, 8>(),      allow_smem<false, kQ4K, 2>(),
                             allow_smem<false, kQ4K, 4>(),     allow_smem<false, kQ4K, 8>()};
    for (cudaError_t x : e) {
      if (x != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
      }
    }
    return true;
  });
}

bool gemm_mma_fits(const MmaPart& p, int64_t cols) {
  if (p.w == nullptr || p.rows <= 0 || cols <= 0 || reinterpret_cast<uintptr_t>(p.w) % 16 != 0) return false;
  switch (p.type) {
    case DType::kF16:
    case DType::kBF16:
      return cols % 8 == 0 && p.ld % 8 == 0;
    case DType::kQ8_0:  // whole steps of 64, 16-byte code rows, 4-byte scale pairs
      return p.scales != nullptr && cols % kBk == 0 && p.ld % 16 == 0 &&
             reinterpret_cast<uintptr_t>(p.scales) % 4 == 0;
    case DType::kQ4_K:  // whole blocks, 16-byte aligned rows
      return cols % 256 == 0 && p.ld % 16 == 0;
    default:
      return false;
  }
}

int gemm_mma_slices(int64_t blocks, int64_t cols, int sm_count) {
  static const int forced = [] {
    const char* e = std::getenv("FRUGAL_CUDA_MMA_SLICES");
    return e != nullptr ? std::atoi(e) : 0;
  }();
  const int64_t steps = (cols + kBk - 1) / kBk;
  // As many slices as keep every block resident at once (two per SM), at most a portable cluster,
  // each of at least kMinStepsPerSlice steps.
  int64_t s = forced > 0 ? forced : 2 * static_cast<int64_t>(std::max(sm_count, 1)) / std::max<int64_t>(blocks, 1);
  s = std::min<int64_t>(s, kMaxSlices);
  s = std::min<int64_t>(s, forced > 0 ? steps : steps / kMinStepsPerSlice);
  return static_cast<int>(std::max<int64_t>(s, 1));
}

void launch_gemm_mma(const MmaPart* parts, int count, const void* x, int n, int64_t cols, bool bf16, bool acc,
                     bool w_ready, int sm_count, cudaStream_t s) {
  const DType type = parts[0].type;
  for (int i = 1; i < count; ++i) {
    if (parts[i].type != type) {
      record_launch_error(cat("cuda: launch_gemm_mma: weights of different types in one launch"));
      return;
    }
  }
  if (count < 1 || count > kMmaMaxParts || n < 1 || n > kMmaMaxTokens) {
    record_launch_error(cat("cuda: launch_gemm_mma: ", count, " weights, ", n, " tokens (1..", kMmaMaxParts, ", 1..",
                            kMmaMaxTokens, ")"));
    return;
  }
  MmaArgs a{};
  int blocks = 0;
  for (int i = 0; i < kMmaMaxParts; ++i) {
    const MmaPart& p = parts[std::min(i, count - 1)];
    if (i < count) blocks += static_cast<int>((p.rows + kRowsPerBlock - 1) / kRowsPerBlock);
    a.w[i] = p.w;
    a.scales[i] = p.scales;
    a.ld[i] = p.ld;
    a.rows[i] = p.rows;
    a.y[i] = p.y;
    a.bias[i] = p.bias;
    a.block_end[i] = blocks;
  }
  a.x = x;
  a.n = n;
  a.cols = cols;
  a.acc = acc;
  a.w_ready = w_ready;
  const int slices = gemm_mma_slices(blocks, cols, sm_count);
  const int64_t steps = (cols + kBk - 1) / kBk;
  a.steps_per_slice = static_cast<int>((steps + slices - 1) / slices);
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(slices));
  if (profiling()) {
    profile_label(cat("gemm_mma ", std::string(dtype_name(type)), " ", parts[0].rows, count > 1 ? "+.." : "", "x", cols,
                      " n=", n, " parts=", count, " K/", slices),
                  0);
  }
  const int nt = n <= 16 ? 2 : (n <= 32 ? 4 : 8);
  const auto go = [&](auto bf16_tag, auto wf_tag) {
    constexpr bool kBf16 = decltype(bf16_tag)::value;
    constexpr int kWf = decltype(wf_tag)::value;
    if (nt == 2) launch_one<kBf16, kWf, 2>(a, grid, s);
    if (nt == 4) launch_one<kBf16, kWf, 4>(a, grid, s);
    if (nt == 8) launch_one<kBf16, kWf, 8>(a, grid, s);
  };
  if (type == DType::kQ8_0) {
    go(std::false_type{}, std::integral_constant<int, kQ8>{});
  } else if (type == DType::kQ4_K) {
    go(std::false_type{}, std::integral_constant<int, kQ4K>{});
  } else if (bf16) {
    go(std::true_type{}, std::integral_constant<int, kF16Bits>{});
  } else {
    go(std::false_type{}, std::integral_constant<int, kF16Bits>{});
  }
}

}  // namespace frugal::cuda
