// The kernels of a round, each small next to a decode step: the softmax weights of every recorded query of
// every query head over its KV head's slots (one block per query and KV head, a thread per key,
// the group's query heads sharing each key load), their sums per slot (a column of threads per 32
// slots, each summing a contiguous share of the rows, the shares added in the reference's order:
// query heads outer, queries inner), and the keys' mean cosine similarity by
// u_i . (sum of u) - u_i . u_i (two kernels, a block per 32 keys: the unit keys' sums per block,
// then each key's dot with their total). And the copy of a step's captured queries
// into the rings they are read from at the next round.
#include "frugal/backend/cuda/common.cuh"
#include "frugal/backend/cuda/round_stats.cuh"

namespace frugal::cuda {
namespace {

constexpr int kProbsThreads = 128;
constexpr int kSumSlots = 32;  // round_sums_kernel: slots of a block (a warp's coalesced load)
constexpr int kSumParts = 8;   // and the row shares of each slot
constexpr int kSimThreads = 256;

// (m, z) with z = sum of exp(s - m) over a set of scores, merged with another set's (m2, z2).
__device__ __forceinline__ void softmax_merge(float& m, float& z, float m2, float z2) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) return;  // neither set has a score
  z = (m == -INFINITY ? 0.f : z * expf(m - mx)) + (m2 == -INFINITY ? 0.f : z2 * expf(m2 - mx));
  m = mx;
}

// grid (nq, n_head_kv): the n_rep rows of query j of KV head h. Each thread takes keys i, i + 128,
// ...: it reads a key row once (16-byte loads when head_dim allows) and dots it with the n_rep
// query rows held in shared memory (every lane reads the same word: a broadcast), so the scores
// need no cross-lane sums. The scaled scores (-inf for a key the query does not see) go to
// `probs`, each row's max and sum of exp(score - max) come from an online softmax per thread
// merged over the block, and a second pass over the thread's own keys turns its scores into weights.
__global__ void round_probs_kernel(RoundStatsDev a) {
  pdl_wait();
  extern __shared__ float sq[];  // [n_rep][head_dim]
  __shared__ float part_m[kProbsThreads / 32][kRoundStatsMaxRep], part_z[kProbsThreads / 32][kRoundStatsMaxRep];
  __shared__ float row_max[kRoundStatsMaxRep], row_inv[kRoundStatsMaxRep];
  const int j = static_cast<int>(blockIdx.x), h = static_cast<int>(blockIdx.y);
  const int hd = a.head_dim, n_rep = a.n_rep;
  const size_t qrow = a.qslot != nullptr ? static_cast<size_t>(a.qslot[j]) : static_cast<size_t>(j);
  const float* qh = a.q + (qrow * a.n_head_kv * n_rep + static_cast<size_t>(h) * n_rep) * hd;
  for (int t = static_cast<int>(threadIdx.x); t < n_rep * hd; t += blockDim.x) sq[t] = qh[t];
  __syncthreads();
  const int32_t qp = a.qpos[j];
  const __half* kh = a.k + static_cast<size_t>(h) * a.head_stride * hd;
  const int32_t* ph = a.kpos + static_cast<size_t>(h) * a.head_stride;
  const size_t row0 = (static_cast<size_t>(h) * n_rep * a.nq + j) * a.n;  // row of r: row0 + r * nq * n
  const size_t rstride = static_cast<size_t>(a.nq) * a.n;
  const bool vec = hd % 8 == 0 && (reinterpret_cast<uintptr_t>(a.k) % 16) == 0 && (a.head_stride * hd) % 8 == 0;
  float m[kRoundStatsMaxRep], z[kRoundStatsMaxRep];
#pragma unroll
  for (int r = 0; r < kRoundStatsMaxRep; ++r) {
    m[r] = -INFINITY;
    z[r] = 0.f;
  }
  for (int i = static_cast<int>(threadIdx.x); i < a.n; i += blockDim.x) {
    const int32_t kp = ph[i];
    const bool seen = kp <= qp && (a.window <= 0 || kp > qp - a.window);
    float acc[kRoundStatsMaxRep];
#pragma unroll
    for (int r = 0; r < kRoundStatsMaxRep; ++r) acc[r] = 0.f;
    if (seen) {
      const __half* k = kh + static_cast<size_t>(i) * hd;
      if (vec) {
#pragma unroll 4
        for (int d0 = 0; d0 < hd; d0 += 8) {
          const uint4 raw = *reinterpret_cast<const uint4*>(k + d0);
          const __half2* k2 = reinterpret_cast<const __half2*>(&raw);
          float kf[8];
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float2 f = __half22float2(k2[e]);
            kf[2 * e] = f.x;
            kf[2 * e + 1] = f.y;
          }
#pragma unroll
          for (int r = 0; r < kRoundStatsMaxRep; ++r) {
            if (r < n_rep) {  // the same on every lane
              const float4 q0 = *reinterpret_cast<const float4*>(sq + r * hd + d0);
              const float4 q1 = *reinterpret_cast<const float4*>(sq + r * hd + d0 + 4);
              acc[r] += q0.x * kf[0] + q0.y * kf[1] + q0.z * kf[2] + q0.w * kf[3] + q1.x * kf[4] + q1.y * kf[5] +
                        q1.z * kf[6] + q1.w * kf[7];
            }
          }
        }
      } else {
        for (int d = 0; d < hd; ++d) {
          const float kd = __half2float(k[d]);
#pragma unroll
          for (int r = 0; r < kRoundStatsMaxRep; ++r) {
            if (r < n_rep) acc[r] += sq[r * hd + d] * kd;
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRoundStatsMaxRep; ++r) {
      if (r < n_rep) {
        const float s = seen ? acc[r] * a.scale : -INFINITY;
        a.probs[row0 + r * rstride + i] = s;
        if (seen) softmax_merge(m[r], z[r], s, 1.f);
      }
    }
  }
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
  for (int r = 0; r < kRoundStatsMaxRep; ++r) {
    if (r < n_rep) {
#pragma unroll
      for (int o = 16; o > 0; o /= 2) {
        const float m2 = __shfl_xor_sync(0xFFFFFFFFu, m[r], o), z2 = __shfl_xor_sync(0xFFFFFFFFu, z[r], o);
        softmax_merge(m[r], z[r], m2, z2);
      }
      if (lane == 0) {
        part_m[warp][r] = m[r];
        part_z[warp][r] = z[r];
      }
    }
  }
  __syncthreads();
  if (static_cast<int>(threadIdx.x) < n_rep) {
    const int r = static_cast<int>(threadIdx.x);
    float mr = -INFINITY, zr = 0.f;
    for (int w = 0; w < static_cast<int>(blockDim.x) / 32; ++w) softmax_merge(mr, zr, part_m[w][r], part_z[w][r]);
    row_max[r] = mr;
    row_inv[r] = mr == -INFINITY ? 0.f : 1.f / zr;  // a query that saw no key: weights of zero
  }
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < a.n; i += blockDim.x) {
#pragma unroll
    for (int r = 0; r < kRoundStatsMaxRep; ++r) {
      if (r < n_rep) {
        float* p = a.probs + row0 + r * rstride + i;
        const float sc = *p;
        *p = sc == -INFINITY ? 0.f : expf(sc - row_max[r]) * row_inv[r];
      }
    }
  }
  pdl_trigger();
}

// grid (slots / 32, n_head_kv), block (32, 8): thread (x, y) sums slot x's weights over the
// y-th contiguous share of the n_rep * nq rows (query heads outer, queries inner); the shares are
// then added in order, so the sum follows the reference's order share by share.
__global__ void round_sums_kernel(RoundStatsDev a) {
  pdl_wait();
  __shared__ float part[3][kSumParts][kSumSlots];
  const int x = static_cast<int>(threadIdx.x), y = static_cast<int>(threadIdx.y), h = static_cast<int>(blockIdx.y);
  const int i = static_cast<int>(blockIdx.x) * kSumSlots + x;
  const int rows = a.n_rep * a.nq, per = (rows + kSumParts - 1) / kSumParts;
  const int t0 = y * per, t1 = min(rows, t0 + per);
  float att = 0.f, last = 0.f, fresh = 0.f;
  if (i < a.n) {
    const float* p = a.probs + static_cast<size_t>(h) * rows * a.n + i;
#pragma unroll 4
    for (int t = t0; t < t1; ++t) {  // row t: query head t / nq, query t % nq
      const float v = p[static_cast<size_t>(t) * a.n];
      const int j = t % a.nq;
      att += v;
      if (j == a.nq - 1) last += v;
      if (a.qpos[j] > a.fresh_after) fresh += v;
    }
  }
  part[0][y][x] = att;
  part[1][y][x] = last;
  part[2][y][x] = fresh;
  __syncthreads();
  if (y < 3 && i < a.n) {
    float sum = 0.f;
#pragma unroll
    for (int g = 0; g < kSumParts; ++g) sum += part[y][g][x];
    a.sums[(static_cast<size_t>(h) * 3 + y) * a.n + i] = sum;  // y: attention, last, fresh
  }
  pdl_trigger();
}

// grid (chunks of 32 keys, n_head_kv), block 256: warp w takes keys w, w + 8, ... of the chunk,
// reads each row once (coalesced), its norm by a warp sum, and adds the unit row to the warp's
// share in shared memory; the shares are added in warp order into the chunk's sum of unit keys.
__global__ void round_unit_sums_kernel(RoundStatsDev a) {
  pdl_wait();
  extern __shared__ float share[];  // [256 / 32][head_dim]
  const int c = static_cast<int>(blockIdx.x), h = static_cast<int>(blockIdx.y), hd = a.head_dim, n = a.n_cand;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int n_warps = static_cast<int>(blockDim.x) / 32;
  float* mine = share + warp * hd;
  const __half* kh = a.k + static_cast<size_t>(h) * a.head_stride * hd;
  for (int d = lane; d < hd; d += 32) mine[d] = 0.f;
  const int end = min(n, (c + 1) * kRoundStatsSimKeys);
  for (int i = c * kRoundStatsSimKeys + warp; i < end; i += n_warps) {
    const __half* k = kh + static_cast<size_t>(i) * hd;
    float ss = 0.f;
    for (int d = lane; d < hd; d += 32) {
      const float x = __half2float(k[d]);
      ss += x * x;
    }
    ss = warp_sum(ss);
    const float r = ss > 0.f ? rsqrtf(ss) : 0.f;
    if (lane == 0) a.inv[static_cast<size_t>(h) * n + i] = r;
    for (int d = lane; d < hd; d += 32) mine[d] += __half2float(k[d]) * r;
  }
  __syncthreads();
  float* out = a.unit_sums + (static_cast<size_t>(h) * round_stats_chunks(n) + c) * hd;
  for (int d = static_cast<int>(threadIdx.x); d < hd; d += blockDim.x) {
    float s = 0.f;
    for (int w = 0; w < n_warps; ++w) s += share[w * hd + d];
    out[d] = s;
  }
  pdl_trigger();
}

// grid (chunks of 32 keys, n_head_kv), block 256; dynamic shared memory: head_dim floats. The sum
// of every unit key (the chunks' sums added in chunk order), then a warp per key of this chunk.
__global__ void round_similarity_kernel(RoundStatsDev a) {
  pdl_wait();
  extern __shared__ float sum[];  // [head_dim]
  const int c = static_cast<int>(blockIdx.x), h = static_cast<int>(blockIdx.y), hd = a.head_dim, n = a.n_cand;
  const int chunks = round_stats_chunks(n);
  const float* parts = a.unit_sums + static_cast<size_t>(h) * chunks * hd;
  for (int d = static_cast<int>(threadIdx.x); d < hd; d += blockDim.x) {
    float s = 0.f;
    for (int p = 0; p < chunks; ++p) s += parts[static_cast<size_t>(p) * hd + d];
    sum[d] = s;
  }
  __syncthreads();
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int n_warps = static_cast<int>(blockDim.x) / 32;
  const __half* kh = a.k + static_cast<size_t>(h) * a.head_stride * hd;
  const int end = min(n, (c + 1) * kRoundStatsSimKeys);
  for (int i = c * kRoundStatsSimKeys + warp; i < end; i += n_warps) {
    const __half* k = kh + static_cast<size_t>(i) * hd;
    const float r = a.inv[static_cast<size_t>(h) * n + i];
    float dot = 0.f, self = 0.f;
    for (int d = lane; d < hd; d += 32) {
      const float u = __half2float(k[d]) * r;
      dot += u * sum[d];
      self += u * u;
    }
    dot = warp_sum(dot);
    self = warp_sum(self);
    if (lane == 0) a.sim[static_cast<size_t>(h) * n + i] = n > 1 ? (dot - self) / static_cast<float>(n - 1) : 0.f;
  }
  pdl_trigger();
}

// grid m, block 128: captured row i of the step (batch row rows[i]) into ring row dst[i].
__global__ void scatter_query_rows_kernel(const float* q, const int32_t* rows, const int32_t* dst, int cols,
                                          float* ring) {
  pdl_wait();
  const int i = static_cast<int>(blockIdx.x);
  const float* from = q + static_cast<size_t>(rows[i]) * cols;
  float* to = ring + static_cast<size_t>(dst[i]) * cols;
  if (cols % 4 == 0) {
    for (int c = static_cast<int>(threadIdx.x); c < cols / 4; c += blockDim.x) {
      reinterpret_cast<float4*>(to)[c] = reinterpret_cast<const float4*>(from)[c];
    }
  } else {
    for (int c = static_cast<int>(threadIdx.x); c < cols; c += blockDim.x) to[c] = from[c];
  }
  pdl_trigger();
}

}  // namespace

void launch_scatter_query_rows(const float* q, const int32_t* rows, const int32_t* dst, int m, int cols, float* ring,
                               cudaStream_t s) {
  if (m <= 0 || cols <= 0) return;
  launch_kernel("scatter_query_rows_kernel", scatter_query_rows_kernel, dim3(static_cast<unsigned>(m)), dim3(128), 0,
                s, q, rows, dst, cols, ring);
}

void launch_round_stats(const RoundStatsDev& a, cudaStream_t s) {
  if (a.n_head_kv <= 0 || a.n_rep <= 0 || a.n_rep > kRoundStatsMaxRep) return;
  if (a.nq > 0 && a.n > 0) {
    const size_t smem = sizeof(float) * static_cast<size_t>(a.n_rep) * a.head_dim;
    launch_kernel("round_probs_kernel", round_probs_kernel,
                  dim3(static_cast<unsigned>(a.nq), static_cast<unsigned>(a.n_head_kv)), dim3(kProbsThreads), smem, s, a);
    launch_kernel("round_sums_kernel", round_sums_kernel,
                  dim3(static_cast<unsigned>((a.n + kSumSlots - 1) / kSumSlots), static_cast<unsigned>(a.n_head_kv)),
                  dim3(kSumSlots, kSumParts), 0, s, a);
  }
  if (a.n_cand > 0) {
    const dim3 grid(static_cast<unsigned>(round_stats_chunks(a.n_cand)), static_cast<unsigned>(a.n_head_kv));
    launch_kernel("round_unit_sums_kernel", round_unit_sums_kernel, grid, dim3(kSimThreads),
                  sizeof(float) * static_cast<size_t>(kSimThreads / 32) * a.head_dim, s, a);
    launch_kernel("round_similarity_kernel", round_similarity_kernel, grid, dim3(kSimThreads),
                  sizeof(float) * static_cast<size_t>(a.head_dim), s, a);
  }
}

}  // namespace frugal::cuda
