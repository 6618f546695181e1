// Tiled attention on tensor cores (prefill) and split-key attention (decode over long contexts).
//
// Algorithm. One kernel serves both launchers. A block owns a tile of kRows = 64 "rows"; a row is
// one (query token, query head) pair, and the rows of a block are the G = n_head / n_head_kv query
// heads of one KV group for T = 64 / G consecutive batch tokens (row r: token t0 + r / G, head
// g * G + r % G). All rows of a block read the same KV head, so every K/V tile loaded into shared
// memory serves G heads (GQA) and T tokens. Each of the 4 warps owns 16 rows. Per key tile of
// kKeys = 64 keys (F16 straight from the cache, zero-filled past the range), everything between
// the two products stays in registers (the FlashAttention-2 arrangement):
//   S = Q K^T      mma.sync m16n8k16, F16 inputs (Q pre-multiplied by `scale` and rounded to F16,
//                  its fragments loaded once), F32 accumulation; K fragments by ldmatrix;
//   mask           per element from the key's cached position and the row's query position:
//                  visible when kpos <= qpos and (window <= 0 or kpos > qpos - window);
//   softmax        online, in F32, base 2 (scores times log2 e). In the accumulator layout a lane
//                  holds two rows (lane / 4 and lane / 4 + 8 of its warp's 16) and two columns of
//                  each 8-key tile, so a row's max is a reduction over the 4 lanes of a quad; the
//                  running sum l is kept per lane and reduced once at the end;
//   O = O*c + P V  P rounded to F16 and packed straight from the S accumulators into A fragments
//                  (the two layouts coincide), V fragments by transposing ldmatrix; O lives in
//                  accumulators, so the per-row rescale is a multiply by the lane's row factor.
// K/V tiles are double-buffered with cp.async: the next tile is in flight while this one is used.
// A row with no visible key ends with l = 0 and outputs zeros, as launch_attention does.
//
// Sequences. seq/pos are device arrays, so the host need not describe the batch: a block finds
// the distinct sequences among its rows (smallest id first) and runs the key loop once per
// sequence with only that sequence's rows unmasked. Batches where a sequence's tokens are
// consecutive (the normal case) give one pass per block; a block straddling two sequences makes
// two; any order stays correct. The key range of a pass is cut by binary search in the sequence's
// cached positions, which are in position order (the assumption launch_attention makes too):
// keys past the largest query position of the pass, and with a window keys at or before
// (smallest query position - window), are never loaded.
//
// Split (flash-decoding). With few query tokens there are too few tiles to fill 132 SMs, so
// grid.z splits each pass's key range into Z equal chunks (multiples of 64 keys, sized in the
// kernel from the actual range, so Z only needs to be chosen on the host from an upper bound on
// the context); each block writes its rows' unnormalised O, m and l to scratch and a merge kernel
// combines the Z partials per (token, head). A block whose chunk is empty writes l = 0.
//
// Architectures. mma.sync m16n8k16, ldmatrix and cp.async need sm_80. The build's compute_75 PTX
// holds a kernel that traps; fa_supported() asks the runtime which build of the kernel this GPU
// runs and declines below 8.0, so the backend takes launch_attention there. Shared memory per
// block is about 86 KB at head_dim 128 (47 KB at 64): two blocks per SM.
#include <algorithm>
#include <cfloat>
#include <climits>
#include <mutex>
#include <vector>

#include <cuda_bf16.h>

#include "frugal/backend/cuda/common.cuh"
#include "frugal/backend/cuda/cuda_backend.h"
#include "frugal/backend/cuda/mma.cuh"

namespace frugal::cuda {
namespace {

constexpr int kFaWarps = 4;
constexpr int kFaThreads = kFaWarps * 32;
constexpr int kRows = 16 * kFaWarps;  // query rows per block
constexpr int kKeys = 64;             // keys per tile
constexpr int kStages = 2;            // K/V tiles in shared memory (one in use, one in flight)
[[maybe_unused]] constexpr float kLog2e = 1.4426950408889634f;
// Blocks the split launcher aims for: two resident blocks per SM on 132 SMs, about four waves.
constexpr int kSplitTargetBlocks = 1024;
constexpr int kSplitMaxChunks = 1024;
constexpr int kSplitMinKeysPerChunk = 256;  // for choosing Z from max_keys only

template <int D>
struct FaSmem {
  // Row stride in halves: 16 bytes past a multiple of 128, so the 8 rows an ldmatrix reads hit
  // 8 different 16-byte bank groups.
  static constexpr int kLdH = D + 8;
  static constexpr size_t kTile = sizeof(__half) * kKeys * kLdH;
  static constexpr size_t kQ = 0;
  static constexpr size_t kK = kQ + sizeof(__half) * kRows * kLdH;
  static constexpr size_t kV = kK + kStages * kTile;
  static constexpr size_t kKpos = kV + kStages * kTile;
  static constexpr size_t kRowSeq = kKpos + sizeof(int) * kStages * kKeys;
  static constexpr size_t kRowPos = kRowSeq + sizeof(int) * kRows;
  static constexpr size_t kCtl = kRowPos + sizeof(int) * kRows;
  static constexpr size_t kBytes = kCtl + sizeof(int) * 4;
  static_assert(kK % 128 == 0 && kV % 128 == 0 && kTile % 128 == 0 && kKpos % 16 == 0, "16-byte copies");
};

struct FaArgs {
  KvDev kv;
  int layer = 0;
  const float* q = nullptr;
  const int32_t* seq = nullptr;
  const int32_t* pos = nullptr;
  AttnDev p;
  int n = 0;
  int group = 1;   // G: query heads per KV head
  int tokens = 1;  // T: tokens per block (T * G <= kRows)
  float* out = nullptr;        // final output (split off)
  float* part_o = nullptr;     // split: [n][n_head][Z][D] unnormalised
  float2* part_ml = nullptr;   // split: [n][n_head][Z] (m in log2 units, l)
};

// Number of keys in kp[0, count) with kp[i] <= x (kp ascending). The newest key first: in decode
// every key is visible, and one load answers instead of a chain of ~log2(count) dependent ones
// (each a trip to memory now that every head has positions of its own).
[[maybe_unused]] __device__ __forceinline__ int count_le(const int32_t* kp, int count, int64_t x) {
  if (count > 0 && static_cast<int64_t>(kp[count - 1]) <= x) return count;
  int lo = 0, hi = count;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (static_cast<int64_t>(kp[mid]) <= x) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ bool key_visible(bool row_active, bool in_range, int kpos, int qpos, int window) {
  return row_active && in_range && kpos <= qpos && (window <= 0 || kpos > qpos - window);
}
#endif

template <int D>
__global__ void __launch_bounds__(kFaThreads, 2) flash_attention_kernel(FaArgs a) {
  pdl_wait();
  pdl_trigger();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using L = FaSmem<D>;
  constexpr int kLdH = L::kLdH;
  constexpr int kDSteps = D / 16;     // k-steps of S = Q K^T
  constexpr int kOTiles = D / 8;      // 8-column tiles of O
  constexpr int kSTiles = kKeys / 8;  // 8-key tiles of S
  extern __shared__ __align__(128) unsigned char smem[];
  __half* sq = reinterpret_cast<__half*>(smem + L::kQ);
  __half* sk = reinterpret_cast<__half*>(smem + L::kK);
  __half* sv = reinterpret_cast<__half*>(smem + L::kV);
  int* skpos = reinterpret_cast<int*>(smem + L::kKpos);
  int* row_seq = reinterpret_cast<int*>(smem + L::kRowSeq);
  int* row_pos = reinterpret_cast<int*>(smem + L::kRowPos);
  int* ctl = reinterpret_cast<int*>(smem + L::kCtl);

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int G = a.group;
  const int t0 = blockIdx.x * a.tokens;
  const int g = blockIdx.y;
  const int n_head = a.p.n_head;
  const int used_rows = a.tokens * G;
  const int window = a.p.window;

  // Row metadata: seq -1 marks a row with no query (past the batch or past T * G).
  for (int r = tid; r < kRows; r += kFaThreads) {
    const int t = t0 + r / G;
    const bool valid = r < used_rows && t < a.n;
    row_seq[r] = valid ? a.seq[t] : -1;
    row_pos[r] = valid ? a.pos[t] : 0;
  }
  // Q rows, times scale, rounded to F16 (zeros for rows without a query).
  for (int i = tid; i < kRows * (D / 4); i += kFaThreads) {
    const int r = i / (D / 4), c = (i % (D / 4)) * 4;
    const int t = t0 + r / G;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r < used_rows && t < a.n) {
      const int h = g * G + r % G;
      v = *reinterpret_cast<const float4*>(a.q + (static_cast<int64_t>(t) * n_head + h) * D + c);
    }
    __half2* dst = reinterpret_cast<__half2*>(sq + r * kLdH + c);
    dst[0] = __floats2half2_rn(v.x * a.p.scale, v.y * a.p.scale);
    dst[1] = __floats2half2_rn(v.z * a.p.scale, v.w * a.p.scale);
  }
  __syncthreads();

  // This lane's two rows of the warp's 16 and its Q fragments (the A operand of every S product).
  const int quad = lane % 4;
  const int row0 = warp * 16 + lane / 4, row1 = row0 + 8;
  uint32_t qf[kDSteps][4];
#pragma unroll
  for (int kk = 0; kk < kDSteps; ++kk) {
    ldsm_x4(qf[kk], smem_u32(sq + (warp * 16 + lane % 16) * kLdH + kk * 16 + (lane / 16) * 8));
  }
  float o[kOTiles][4];
#pragma unroll
  for (int j = 0; j < kOTiles; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY;  // running max of row0 / row1 (equal in the 4 lanes of a quad)
  float l0 = 0.f, l1 = 0.f;              // this lane's part of the running sums

  int prev_seq = -1;
  for (;;) {
    __syncthreads();  // the previous pass is done with ctl and the tile buffers
    if (warp == 0) {
      // The next sequence: the smallest id above the previous pass's among the rows.
      int next = INT_MAX;
      for (int r = lane; r < kRows; r += 32) {
        const int sr = row_seq[r];
        if (sr > prev_seq && sr < next) next = sr;
      }
#pragma unroll
      for (int off = 16; off > 0; off /= 2) next = min(next, __shfl_xor_sync(0xFFFFFFFFu, next, off));
      int qmin = INT_MAX, qmax = INT_MIN;
      for (int r = lane; r < kRows; r += 32) {
        if (row_seq[r] == next) {
          qmin = min(qmin, row_pos[r]);
          qmax = max(qmax, row_pos[r]);
        }
      }
#pragma unroll
      for (int off = 16; off > 0; off /= 2) {
        qmin = min(qmin, __shfl_xor_sync(0xFFFFFFFFu, qmin, off));
        qmax = max(qmax, __shfl_xor_sync(0xFFFFFFFFu, qmax, off));
      }
      if (lane == 0) {
        int kbeg = 0, kend = 0;
        if (next != INT_MAX) {
          const int n_keys = a.kv.seq_len[next];
          const int32_t* kp = a.kv.pos + kv_slot0(a.kv, a.layer, next, g);
          kend = count_le(kp, n_keys, qmax);
          if (window > 0) kbeg = count_le(kp, kend, static_cast<int64_t>(qmin) - window);
          if (gridDim.z > 1) {
            // Split: chunk blockIdx.z of Z equal parts of [kbeg, kend), whole tiles each.
            const int len = kend - kbeg;
            int per = (len + static_cast<int>(gridDim.z) - 1) / static_cast<int>(gridDim.z);
            per = max(kKeys, (per + kKeys - 1) / kKeys * kKeys);
            const int64_t cb = static_cast<int64_t>(kbeg) + static_cast<int64_t>(blockIdx.z) * per;
            const int64_t ce = cb + per;
            const int cbeg = cb < kend ? static_cast<int>(cb) : kend;
            const int cend = ce < kend ? static_cast<int>(ce) : kend;
            kbeg = cbeg;
            kend = cend;
          }
        }
        ctl[0] = next;
        ctl[1] = kbeg;
        ctl[2] = kend;
      }
    }
    __syncthreads();
    const int s = ctl[0];
    if (s == INT_MAX) break;
    const int kbeg = ctl[1], kend = ctl[2];
    prev_seq = s;

    const bool act0 = row_seq[row0] == s, act1 = row_seq[row1] == s;
    const int qp0 = row_pos[row0], qp1 = row_pos[row1];
    const bool warp_active = __any_sync(0xFFFFFFFFu, act0 || act1);
    const int32_t* kp = a.kv.pos + kv_slot0(a.kv, a.layer, s, g);
    const int64_t base = kv_slot0(a.kv, a.layer, s, g) * static_cast<int64_t>(D);
    const __half* kb = a.kv.k + base;
    const __half* vb = a.kv.v + base;

    // K, V and positions of keys [k0, k0 + kKeys) into buffer `stage`; rows past kend are zeros
    // (V must be finite: masked keys get P = 0, and 0 * NaN would poison O), and their positions
    // are never read (the mask checks the key index first).
    auto load_tile = [&](int k0, int stage) {
      constexpr int kChunks = kKeys * D / 8;  // 16-byte pieces per tile
      static_assert(kChunks % kFaThreads == 0, "tile pieces must split evenly");
      __half* skt = sk + stage * kKeys * kLdH;
      __half* svt = sv + stage * kKeys * kLdH;
#pragma unroll
      for (int i = 0; i < kChunks / kFaThreads; ++i) {
        const int c = tid + i * kFaThreads;
        const int row = c / (D / 8), col = (c % (D / 8)) * 8;
        const bool in = k0 + row < kend;
        const int64_t off = in ? static_cast<int64_t>(k0 + row) * D + col : 0;
        cp_async_16(smem_u32(skt + row * kLdH + col), kb + off, in ? 16 : 0);
        cp_async_16(smem_u32(svt + row * kLdH + col), vb + off, in ? 16 : 0);
      }
      if (tid < kKeys) {
        const bool in = k0 + tid < kend;
        cp_async_4(smem_u32(skpos + stage * kKeys + tid), kp + (in ? k0 + tid : 0), in ? 4 : 0);
      }
    };

    const int n_tiles = (kend - kbeg + kKeys - 1) / kKeys;
    if (n_tiles > 0) load_tile(kbeg, 0);
    cp_async_commit();
    for (int it = 0; it < n_tiles; ++it) {
      const int k0 = kbeg + it * kKeys;
      const int stage = it % kStages;
      if (it + 1 < n_tiles) load_tile(k0 + kKeys, (it + 1) % kStages);
      cp_async_commit();
      cp_async_wait_one();  // this thread's copies of tile `it` have landed
      __syncthreads();      // and everyone's
      if (warp_active) {
        const __half* skt = sk + stage * kKeys * kLdH;
        const __half* svt = sv + stage * kKeys * kLdH;
        const int* kpt = skpos + stage * kKeys;
        // S = Q K^T: 16 rows x 64 keys per warp. An ldmatrix.x4 of K gives the B fragments of
        // two 8-key tiles for one 16-wide step of D.
        float sacc[kSTiles][4];
#pragma unroll
        for (int j = 0; j < kSTiles; ++j) sacc[j][0] = sacc[j][1] = sacc[j][2] = sacc[j][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < kDSteps; ++kk) {
#pragma unroll
          for (int jp = 0; jp < kSTiles / 2; ++jp) {
            uint32_t b[4];
            const int key = jp * 16 + (lane % 8) + (lane / 16) * 8;
            const int d = kk * 16 + ((lane / 8) % 2) * 8;
            ldsm_x4(b, smem_u32(skt + key * kLdH + d));
            mma_16816(sacc[2 * jp], qf[kk], b[0], b[1]);
            mma_16816(sacc[2 * jp + 1], qf[kk], b[2], b[3]);
          }
        }
        // Mask and online softmax. Accumulator element e of tile j: row (e < 2 ? row0 : row1),
        // key j * 8 + 2 * quad + e % 2.
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int j = 0; j < kSTiles; ++j) {
          const int c = j * 8 + 2 * quad;
          const int2 kp2 = *reinterpret_cast<const int2*>(kpt + c);
          const bool in0 = k0 + c < kend, in1 = k0 + c + 1 < kend;
          sacc[j][0] = key_visible(act0, in0, kp2.x, qp0, window) ? sacc[j][0] * kLog2e : -INFINITY;
          sacc[j][1] = key_visible(act0, in1, kp2.y, qp0, window) ? sacc[j][1] * kLog2e : -INFINITY;
          sacc[j][2] = key_visible(act1, in0, kp2.x, qp1, window) ? sacc[j][2] * kLog2e : -INFINITY;
          sacc[j][3] = key_visible(act1, in1, kp2.y, qp1, window) ? sacc[j][3] * kLog2e : -INFINITY;
          mx0 = fmaxf(mx0, fmaxf(sacc[j][0], sacc[j][1]));
          mx1 = fmaxf(mx1, fmaxf(sacc[j][2], sacc[j][3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xFFFFFFFFu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xFFFFFFFFu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xFFFFFFFFu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xFFFFFFFFu, mx1, 2));
        const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
        // Nothing visible yet: keep O = 0, l = 0 (and avoid -inf - -inf).
        const float ms0 = mn0 == -INFINITY ? 0.f : mn0;
        const float ms1 = mn1 == -INFINITY ? 0.f : mn1;
        const float c0 = exp2f(m0 - ms0), c1 = exp2f(m1 - ms1);  // m = -inf: 0 (O and l are 0 anyway)
        m0 = mn0;
        m1 = mn1;
        // P, packed into the A fragments of P V: keys 16 kk2 + [0, 8) are tile 2 kk2 (registers 0
        // and 1), keys 16 kk2 + [8, 16) tile 2 kk2 + 1 (registers 2 and 3).
        uint32_t pf[kKeys / 16][4];
        float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
        for (int j = 0; j < kSTiles; ++j) {
          const float p0 = exp2f(sacc[j][0] - ms0), p1 = exp2f(sacc[j][1] - ms0);
          const float p2 = exp2f(sacc[j][2] - ms1), p3 = exp2f(sacc[j][3] - ms1);
          sum0 += p0 + p1;
          sum1 += p2 + p3;
          pf[j / 2][(j % 2) * 2] = pack_half2(p0, p1);
          pf[j / 2][(j % 2) * 2 + 1] = pack_half2(p2, p3);
        }
        l0 = l0 * c0 + sum0;
        l1 = l1 * c1 + sum1;
#pragma unroll
        for (int j = 0; j < kOTiles; ++j) {
          o[j][0] *= c0;
          o[j][1] *= c0;
          o[j][2] *= c1;
          o[j][3] *= c1;
        }
        // O += P V. A transposing ldmatrix.x4 of V gives the B fragments of two 8-column tiles of
        // O for one 16-key step.
#pragma unroll
        for (int kk2 = 0; kk2 < kKeys / 16; ++kk2) {
#pragma unroll
          for (int dp = 0; dp < kOTiles / 2; ++dp) {
            uint32_t b[4];
            const int key = kk2 * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
            const int d = dp * 16 + (lane / 16) * 8;
            ldsm_x4_trans(b, smem_u32(svt + key * kLdH + d));
            mma_16816(o[2 * dp], pf[kk2], b[0], b[1]);
            mma_16816(o[2 * dp + 1], pf[kk2], b[2], b[3]);
          }
        }
      }
      __syncthreads();  // everyone is done with buffer `stage` before the next copy into it
    }
  }

  // Results: every row with a query writes, including rows that saw no key (zeros, or l = 0).
  l0 += __shfl_xor_sync(0xFFFFFFFFu, l0, 1);
  l0 += __shfl_xor_sync(0xFFFFFFFFu, l0, 2);
  l1 += __shfl_xor_sync(0xFFFFFFFFu, l1, 1);
  l1 += __shfl_xor_sync(0xFFFFFFFFu, l1, 2);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = half == 0 ? row0 : row1;
    if (row_seq[row] < 0) continue;
    const float m = half == 0 ? m0 : m1;
    const float l = half == 0 ? l0 : l1;
    const int t = t0 + row / G;
    const int h = g * G + row % G;
    const int64_t th = static_cast<int64_t>(t) * n_head + h;
    if (a.part_o == nullptr) {
      const float inv = l > 0.f ? 1.f / l : 0.f;
      float* dst = a.out + th * D + 2 * quad;
#pragma unroll
      for (int j = 0; j < kOTiles; ++j) {
        *reinterpret_cast<float2*>(dst + j * 8) = make_float2(o[j][2 * half] * inv, o[j][2 * half + 1] * inv);
      }
    } else {
      const int64_t idx = th * gridDim.z + blockIdx.z;
      float* dst = a.part_o + idx * D + 2 * quad;
#pragma unroll
      for (int j = 0; j < kOTiles; ++j) {
        *reinterpret_cast<float2*>(dst + j * 8) = make_float2(o[j][2 * half], o[j][2 * half + 1]);
      }
      if (quad == 0) a.part_ml[idx] = make_float2(m, l);
    }
  }
#else
  __trap();  // fa_supported() declines on GPUs that run this build (no mma.sync m16n8k16)
#endif
}

// One block per (token, head), one thread per output column: out = sum_c w_c O_c / sum_c w_c l_c
// with w_c = 2^(m_c - M), M the largest m of the chunks that saw a key.
__global__ void attention_merge_kernel(const float* __restrict__ part_o, const float2* __restrict__ part_ml, int z,
                                       int d, float* __restrict__ out, int round) {
  pdl_wait();
  pdl_trigger();
  const int64_t th = blockIdx.x;
  const float2* ml = part_ml + th * z;
  float mx = -INFINITY;
  for (int c = 0; c < z; ++c) {
    const float2 v = ml[c];
    if (v.y > 0.f) mx = fmaxf(mx, v.x);
  }
  for (int e = threadIdx.x; e < d; e += blockDim.x) {
    float num = 0.f, den = 0.f;
    for (int c = 0; c < z; ++c) {
      const float2 v = ml[c];
      if (!(v.y > 0.f)) continue;
      const float w = exp2f(v.x - mx);
      num += w * part_o[(th * z + c) * d + e];
      den += w * v.y;
    }
    const float o = den > 0.f ? num / den : 0.f;
    out[th * d + e] = round == 1 ? __half2float(__float2half_rn(o)) : (round == 2 ? __bfloat162float(__float2bfloat16_rn(o)) : o);
  }
}

// The kernel for head_dim d, or false.
// Whether the current GPU runs a build of the kernel made for sm_80 or later (machine code, or PTX
// of such a virtual architecture): the compute_75 PTX build only traps.
bool fa_built_for_device() {
  return once_per_device(
      [] { return kernel_built_for_device(reinterpret_cast<const void*>(flash_attention_kernel<128>), 80); });
}

bool fa_supported(const KvDev& kv, const AttnDev& p) {
  if (p.head_dim != 64 && p.head_dim != 128) return false;
  if (!fa_built_for_device()) return false;
  if (kv.head_dim != p.head_dim || kv.n_head_kv != p.n_head_kv) return false;
  if (p.n_head <= 0 || p.n_head_kv <= 0 || p.n_head % p.n_head_kv != 0) return false;
  return p.n_head / p.n_head_kv <= kRows;
}

int fa_tokens_per_block(const AttnDev& p) {
  const int fill = kRows / (p.n_head / p.n_head_kv);
  return p.tokens_per_block > 0 && p.tokens_per_block < fill ? p.tokens_per_block : fill;
}

template <int D>
bool fa_launch(const FaArgs& a, unsigned z, cudaStream_t s) {
  using L = FaSmem<D>;
  static std::once_flag once;
  static cudaError_t attr_err = cudaSuccess;
  std::call_once(once, [] {
    attr_err = cudaFuncSetAttribute(flash_attention_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(L::kBytes));
  });
  const char* name = D == 64 ? "flash_attention_kernel<64>" : "flash_attention_kernel<128>";
  const int64_t tiles = (static_cast<int64_t>(a.n) + a.tokens - 1) / a.tokens;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(a.p.n_head_kv), z);
  if (attr_err != cudaSuccess) {
    record_launch_error(cat("cuda: ", name, ": cudaFuncSetAttribute(", static_cast<uint64_t>(L::kBytes),
                            " bytes of shared memory) failed: ", cudaGetErrorName(attr_err)));
    return true;  // an error is recorded; falling back would hide it
  }
  if (tiles > 0x7FFFFFFF) {
    record_launch_error(cat("cuda: ", name, ": ", a.n, " tokens need ", tiles, " blocks"));
    return true;
  }
  launch_kernel(name, flash_attention_kernel<D>, grid, dim3(kFaThreads), L::kBytes, s, a);
  return true;
}

bool fa_dispatch(const FaArgs& a, unsigned z, cudaStream_t s) {
  return a.p.head_dim == 64 ? fa_launch<64>(a, z, s) : fa_launch<128>(a, z, s);
}

FaArgs fa_args(const KvDev& kv, int layer, const float* q, int n, const int32_t* seq, const int32_t* pos,
               const AttnDev& p) {
  FaArgs a;
  a.kv = kv;
  a.layer = layer;
  a.q = q;
  a.seq = seq;
  a.pos = pos;
  a.p = p;
  a.n = n;
  a.group = p.n_head / p.n_head_kv;
  a.tokens = fa_tokens_per_block(p);
  return a;
}

// Z for the split launcher: enough blocks for ~kSplitTargetBlocks, at most one chunk per
// kSplitMinKeysPerChunk keys of max_keys.
int split_chunks(int n, const AttnDev& p, int max_keys) {
  if (p.split_as_tokens > 0) n = p.split_as_tokens;
  if (n <= 0 || p.n_head_kv <= 0 || p.n_head <= 0 || p.n_head % p.n_head_kv != 0) return 1;
  if (p.n_head / p.n_head_kv > kRows) return 1;
  const int64_t tiles = (static_cast<int64_t>(n) + fa_tokens_per_block(p) - 1) / fa_tokens_per_block(p) * p.n_head_kv;
  int64_t z = (kSplitTargetBlocks + tiles - 1) / tiles;
  const int64_t by_keys = (static_cast<int64_t>(std::max(max_keys, 1)) + kSplitMinKeysPerChunk - 1) / kSplitMinKeysPerChunk;
  z = std::min<int64_t>(z, by_keys);
  z = std::min<int64_t>(z, kSplitMaxChunks);
  return static_cast<int>(std::max<int64_t>(z, 1));
}

}  // namespace

bool launch_attention_flash(const KvDev& kv, int layer, const float* q, int n, const int32_t* seq, const int32_t* pos,
                            const AttnDev& p, float* out, cudaStream_t s) {
  if (!fa_supported(kv, p)) return false;
  if (n <= 0) return true;
  FaArgs a = fa_args(kv, layer, q, n, seq, pos, p);
  a.out = out;
  return fa_dispatch(a, 1, s);
}

size_t attention_split_scratch_bytes(int n, const AttnDev& p, int max_keys) {
  if (n <= 0 || p.head_dim <= 0 || p.n_head <= 0) return 0;
  const size_t z = static_cast<size_t>(split_chunks(n, p, max_keys));
  return static_cast<size_t>(n) * static_cast<size_t>(p.n_head) * z *
         (sizeof(float) * static_cast<size_t>(p.head_dim) + sizeof(float2));
}

bool launch_attention_split(const KvDev& kv, int layer, const float* q, int n, const int32_t* seq, const int32_t* pos,
                            const AttnDev& p, int max_keys, void* scratch, size_t scratch_bytes, float* out,
                            cudaStream_t s) {
  if (!fa_supported(kv, p)) return false;
  if (n <= 0) return true;
  const size_t need = attention_split_scratch_bytes(n, p, max_keys);
  if (scratch == nullptr || scratch_bytes < need) return false;
  const int z = split_chunks(n, p, max_keys);
  FaArgs a = fa_args(kv, layer, q, n, seq, pos, p);
  const size_t rows = static_cast<size_t>(n) * static_cast<size_t>(p.n_head) * static_cast<size_t>(z);
  a.part_o = static_cast<float*>(scratch);
  a.part_ml = reinterpret_cast<float2*>(static_cast<char*>(scratch) + rows * sizeof(float) * p.head_dim);
  fa_dispatch(a, static_cast<unsigned>(z), s);
  const int64_t th = static_cast<int64_t>(n) * p.n_head;
  if (th > 0x7FFFFFFF) {
    record_launch_error(cat("cuda: attention_merge_kernel: ", th, " (token, head) pairs"));
    return true;
  }
  const dim3 grid(static_cast<unsigned>(th));
  launch_kernel("attention_merge_kernel", attention_merge_kernel, grid, dim3(p.head_dim), 0, s, a.part_o, a.part_ml, z,
                p.head_dim, out, p.round_out);
  return true;
}

bool attention_prefer_split(int n, const AttnDev& p) {
  if (n <= 0 || p.n_head_kv <= 0 || p.n_head <= 0 || p.n_head % p.n_head_kv != 0) return false;
  if (p.n_head / p.n_head_kv > kRows) return false;
  const int64_t tiles = (static_cast<int64_t>(n) + fa_tokens_per_block(p) - 1) / fa_tokens_per_block(p) * p.n_head_kv;
  return tiles < 264;  // fewer blocks than one wave of two per SM on an H200
}

// Test hook: see common.cuh.
Status attention_on_device(int which, const uint16_t* k_half, const uint16_t* v_half, const int32_t* kpos,
                           const int32_t* seq_len, int n_layer, int layer, int n_seq, int n_head_kv, int head_dim,
                           int capacity, const float* q, int n, const int32_t* seq, const int32_t* pos, int n_head,
                           float scale, int window, int max_keys, float* out) {
  KvDev kv;
  kv.n_layer = n_layer;
  kv.n_seq = n_seq;
  kv.n_head_kv = n_head_kv;
  kv.head_dim = head_dim;
  kv.capacity = capacity;
  AttnDev p;
  p.n_head = n_head;
  p.n_head_kv = n_head_kv;
  p.head_dim = head_dim;
  p.scale = scale;
  p.window = window;
  // 3 and 4: the split and flash launchers with one token per block (as a batched decode step).
  if (which == 3 || which == 4) {
    p.tokens_per_block = 1;
    which = which == 3 ? 2 : 1;
  }
  const size_t kv_elems = static_cast<size_t>(n_layer) * n_seq * n_head_kv * capacity * head_dim;
  const size_t pos_elems = static_cast<size_t>(n_layer) * n_seq * n_head_kv * capacity;
  const size_t q_elems = static_cast<size_t>(n) * n_head * head_dim;
  DeviceArena arena;  // everything below is freed when the hook returns
  auto alloc = [&](size_t bytes, void** ptr) -> Status {
    uint8_t* p = nullptr;
    FRUGAL_RETURN_IF_ERROR(arena.alloc(std::max<size_t>(bytes, 16), &p));
    *ptr = p;
    return ok_status();
  };
  auto run = [&]() -> Status {
    void *dk = nullptr, *dv = nullptr, *dpos = nullptr, *dlen = nullptr, *dq = nullptr, *dseq = nullptr;
    void *dqpos = nullptr, *dout = nullptr, *dscratch = nullptr;
    FRUGAL_RETURN_IF_ERROR(alloc(kv_elems * sizeof(__half), &dk));
    FRUGAL_RETURN_IF_ERROR(alloc(kv_elems * sizeof(__half), &dv));
    FRUGAL_RETURN_IF_ERROR(alloc(pos_elems * sizeof(int32_t), &dpos));
    FRUGAL_RETURN_IF_ERROR(alloc(static_cast<size_t>(n_seq) * sizeof(int32_t), &dlen));
    FRUGAL_RETURN_IF_ERROR(alloc(q_elems * sizeof(float), &dq));
    FRUGAL_RETURN_IF_ERROR(alloc(static_cast<size_t>(n) * sizeof(int32_t), &dseq));
    FRUGAL_RETURN_IF_ERROR(alloc(static_cast<size_t>(n) * sizeof(int32_t), &dqpos));
    FRUGAL_RETURN_IF_ERROR(alloc(q_elems * sizeof(float), &dout));
    FRUGAL_CUDA(cudaMemcpy(dk, k_half, kv_elems * sizeof(__half), cudaMemcpyHostToDevice));
    FRUGAL_CUDA(cudaMemcpy(dv, v_half, kv_elems * sizeof(__half), cudaMemcpyHostToDevice));
    FRUGAL_CUDA(cudaMemcpy(dpos, kpos, pos_elems * sizeof(int32_t), cudaMemcpyHostToDevice));
    FRUGAL_CUDA(cudaMemcpy(dlen, seq_len, static_cast<size_t>(n_seq) * sizeof(int32_t), cudaMemcpyHostToDevice));
    FRUGAL_CUDA(cudaMemcpy(dq, q, q_elems * sizeof(float), cudaMemcpyHostToDevice));
    FRUGAL_CUDA(cudaMemcpy(dseq, seq, static_cast<size_t>(n) * sizeof(int32_t), cudaMemcpyHostToDevice));
    FRUGAL_CUDA(cudaMemcpy(dqpos, pos, static_cast<size_t>(n) * sizeof(int32_t), cudaMemcpyHostToDevice));
    // NaN bytes (0xFF) in the output: a row the kernel forgets to write fails the comparison.
    FRUGAL_CUDA(cudaMemset(dout, 0xFF, q_elems * sizeof(float)));
    kv.k = static_cast<__half*>(dk);
    kv.v = static_cast<__half*>(dv);
    kv.pos = static_cast<int32_t*>(dpos);
    kv.seq_len = static_cast<int32_t*>(dlen);
    const auto* dq_f = static_cast<const float*>(dq);
    const auto* dseq_i = static_cast<const int32_t*>(dseq);
    const auto* dpos_i = static_cast<const int32_t*>(dqpos);
    auto* dout_f = static_cast<float*>(dout);
    bool handled = true;
    if (which == 0) {
      launch_attention(kv, layer, dq_f, n, dseq_i, dpos_i, p, dout_f, nullptr);
    } else if (which == 1) {
      handled = launch_attention_flash(kv, layer, dq_f, n, dseq_i, dpos_i, p, dout_f, nullptr);
    } else {
      const size_t bytes = attention_split_scratch_bytes(n, p, max_keys);
      FRUGAL_RETURN_IF_ERROR(alloc(bytes, &dscratch));
      // Garbage in the scratch too: every partial must be written before the merge reads it.
      FRUGAL_CUDA(cudaMemset(dscratch, 0xFF, std::max<size_t>(bytes, 16)));
      handled = launch_attention_split(kv, layer, dq_f, n, dseq_i, dpos_i, p, max_keys, dscratch, bytes, dout_f,
                                       nullptr);
    }
    if (!handled) return fail(ErrorCode::kNotSupported, "attention_on_device: launcher ", which, " declined");
    FRUGAL_RETURN_IF_ERROR(take_launch_error());
    FRUGAL_CUDA(cudaDeviceSynchronize());
    FRUGAL_CUDA(cudaMemcpy(out, dout, q_elems * sizeof(float), cudaMemcpyDeviceToHost));
    return ok_status();
  };
  Status st = run();
  return st;
}

// Bench hook: see common.cuh.
Status attention_bench_on_device(int which, int n_head, int n_head_kv, int head_dim, int n_ctx, int n, int reps,
                                 double* ms) {
  KvDev kv;
  kv.n_layer = 1;
  kv.n_seq = 1;
  kv.n_head_kv = n_head_kv;
  kv.head_dim = head_dim;
  kv.capacity = n_ctx;
  AttnDev p;
  p.n_head = n_head;
  p.n_head_kv = n_head_kv;
  p.head_dim = head_dim;
  p.scale = 1.f / sqrtf(static_cast<float>(head_dim));
  const size_t kv_elems = static_cast<size_t>(n_head_kv) * n_ctx * head_dim;
  const size_t q_elems = static_cast<size_t>(n) * n_head * head_dim;
  std::vector<int32_t> kpos(static_cast<size_t>(n_head_kv) * n_ctx), qseq(static_cast<size_t>(n), 0),
      qpos(static_cast<size_t>(n));
  for (size_t i = 0; i < kpos.size(); ++i) kpos[i] = static_cast<int32_t>(i % static_cast<size_t>(n_ctx));
  for (int i = 0; i < n; ++i) qpos[static_cast<size_t>(i)] = n_ctx - n + i;
  const int32_t len = n_ctx;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  DeviceArena arena;  // everything below is freed when the hook returns
  auto alloc = [&](size_t bytes, void** ptr) -> Status {
    uint8_t* p = nullptr;
    FRUGAL_RETURN_IF_ERROR(arena.alloc(std::max<size_t>(bytes, 16), &p));
    *ptr = p;
    return ok_status();
  };
  auto run = [&]() -> Status {
    void *dk = nullptr, *dv = nullptr, *dpos = nullptr, *dlen = nullptr, *dq = nullptr, *dseq = nullptr;
    void *dqpos = nullptr, *dout = nullptr, *dscratch = nullptr;
    FRUGAL_RETURN_IF_ERROR(alloc(kv_elems * sizeof(__half), &dk));
    FRUGAL_RETURN_IF_ERROR(alloc(kv_elems * sizeof(__half), &dv));
    FRUGAL_RETURN_IF_ERROR(alloc(kpos.size() * sizeof(int32_t), &dpos));
    FRUGAL_RETURN_IF_ERROR(alloc(sizeof(int32_t), &dlen));
    FRUGAL_RETURN_IF_ERROR(alloc(q_elems * sizeof(float), &dq));
    FRUGAL_RETURN_IF_ERROR(alloc(qseq.size() * sizeof(int32_t), &dseq));
    FRUGAL_RETURN_IF_ERROR(alloc(qpos.size() * sizeof(int32_t), &dqpos));
    FRUGAL_RETURN_IF_ERROR(alloc(q_elems * sizeof(float), &dout));
    FRUGAL_CUDA(cudaMemset(dk, 0x2C, kv_elems * sizeof(__half)));  // 0x2C2C: about 0.06
    FRUGAL_CUDA(cudaMemset(dv, 0x3C, kv_elems * sizeof(__half)));
    FRUGAL_CUDA(cudaMemset(dq, 0, q_elems * sizeof(float)));
    FRUGAL_CUDA(cudaMemcpy(dpos, kpos.data(), kpos.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    FRUGAL_CUDA(cudaMemcpy(dlen, &len, sizeof(int32_t), cudaMemcpyHostToDevice));
    FRUGAL_CUDA(cudaMemcpy(dseq, qseq.data(), qseq.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    FRUGAL_CUDA(cudaMemcpy(dqpos, qpos.data(), qpos.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    kv.k = static_cast<__half*>(dk);
    kv.v = static_cast<__half*>(dv);
    kv.pos = static_cast<int32_t*>(dpos);
    kv.seq_len = static_cast<int32_t*>(dlen);
    const size_t bytes = attention_split_scratch_bytes(n, p, n_ctx);
    FRUGAL_RETURN_IF_ERROR(alloc(bytes, &dscratch));
    auto once = [&]() -> bool {
      const auto* qf = static_cast<const float*>(dq);
      const auto* si = static_cast<const int32_t*>(dseq);
      const auto* pi = static_cast<const int32_t*>(dqpos);
      auto* of = static_cast<float*>(dout);
      if (which == 0) {
        launch_attention(kv, 0, qf, n, si, pi, p, of, nullptr);
        return true;
      }
      if (which == 1) return launch_attention_flash(kv, 0, qf, n, si, pi, p, of, nullptr);
      return launch_attention_split(kv, 0, qf, n, si, pi, p, n_ctx, dscratch, bytes, of, nullptr);
    };
    if (!once()) return fail(ErrorCode::kNotSupported, "attention_bench_on_device: launcher ", which, " declined");
    FRUGAL_CUDA(cudaDeviceSynchronize());
    FRUGAL_CUDA(cudaEventCreate(&e0));
    FRUGAL_CUDA(cudaEventCreate(&e1));
    FRUGAL_CUDA(cudaEventRecord(e0, nullptr));
    for (int i = 0; i < reps; ++i) once();
    FRUGAL_CUDA(cudaEventRecord(e1, nullptr));
    FRUGAL_CUDA(cudaEventSynchronize(e1));
    float t = 0.f;
    FRUGAL_CUDA(cudaEventElapsedTime(&t, e0, e1));
    *ms = static_cast<double>(t) / std::max(reps, 1);
    return take_launch_error();
  };
  Status st = run();
  if (e0 != nullptr) cudaEventDestroy(e0);
  if (e1 != nullptr) cudaEventDestroy(e1);
  return st;
}

}  // namespace frugal::cuda
