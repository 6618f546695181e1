// Three kernels, each small next to a decode step: the softmax weights of every recorded query of
// every query head over its KV head's slots (one block per query and KV head, a warp per key, the
// group's query heads sharing each key load), their sums per slot (a thread per slot, in the
// reference's order: query heads outer, queries inner), and the keys' mean cosine similarity by
// u_i . (sum of u) - u_i . u_i (one block per KV head). And the copy of a step's captured queries
// into the rings they are read from at the next round.
#include "frugal/backend/cuda/common.cuh"
#include "frugal/backend/cuda/round_stats.cuh"

namespace frugal::cuda {
namespace {

constexpr int kProbsThreads = 128;

__device__ __forceinline__ float block_max(float a, float* part) {
  const int t = static_cast<int>(threadIdx.x);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) a = fmaxf(a, __shfl_xor_sync(0xFFFFFFFFu, a, o));
  if (t % 32 == 0) part[t / 32] = a;
  __syncthreads();
  if (t < 32) {
    float v = t < static_cast<int>(blockDim.x) / 32 ? part[t] : -INFINITY;
#pragma unroll
    for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
    if (t == 0) part[0] = v;
  }
  __syncthreads();
  const float m = part[0];
  __syncthreads();  // part is reused by the next reduction
  return m;
}

// grid (nq, n_head_kv): the n_rep rows of query j of KV head h.
__global__ void round_probs_kernel(RoundStatsDev a) {
  pdl_wait();
  extern __shared__ float sq[];  // [n_rep][head_dim]
  __shared__ float part[32];
  const int j = static_cast<int>(blockIdx.x), h = static_cast<int>(blockIdx.y);
  const int hd = a.head_dim, n_rep = a.n_rep;
  for (int t = static_cast<int>(threadIdx.x); t < n_rep * hd; t += blockDim.x) {
    const int r = t / hd, d = t % hd;
    const size_t qrow = a.qslot != nullptr ? static_cast<size_t>(a.qslot[j]) : static_cast<size_t>(j);
    sq[t] = a.q[(qrow * a.n_head_kv * n_rep + static_cast<size_t>(h) * n_rep + r) * hd + d];
  }
  __syncthreads();
  const int32_t qp = a.qpos[j];
  const __half* kh = a.k + static_cast<size_t>(h) * a.head_stride * hd;
  const int32_t* ph = a.kpos + static_cast<size_t>(h) * a.head_stride;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int n_warps = static_cast<int>(blockDim.x) / 32;
  const size_t row0 = (static_cast<size_t>(h) * n_rep * a.nq + j) * a.n;  // row of r: row0 + r * nq * n
  const size_t rstride = static_cast<size_t>(a.nq) * a.n;
  for (int i = warp; i < a.n; i += n_warps) {
    const int32_t kp = ph[i];
    const bool seen = kp <= qp && (a.window <= 0 || kp > qp - a.window);
    float acc[kRoundStatsMaxRep];
#pragma unroll
    for (int r = 0; r < kRoundStatsMaxRep; ++r) acc[r] = 0.f;
    if (seen) {  // the same on every lane
      const __half* k = kh + static_cast<size_t>(i) * hd;
      for (int d = lane; d < hd; d += 32) {
        const float kd = __half2float(k[d]);
#pragma unroll
        for (int r = 0; r < kRoundStatsMaxRep; ++r) {
          if (r < n_rep) acc[r] += sq[r * hd + d] * kd;
        }
      }
#pragma unroll
      for (int r = 0; r < kRoundStatsMaxRep; ++r) {
        if (r < n_rep) acc[r] = warp_sum(acc[r]);  // n_rep is the same on every lane: no divergence
      }
    }
    if (lane == 0) {
      for (int r = 0; r < n_rep; ++r) a.probs[row0 + r * rstride + i] = seen ? acc[r] * a.scale : -INFINITY;
    }
  }
  __syncthreads();
  for (int r = 0; r < n_rep; ++r) {
    float* row = a.probs + row0 + r * rstride;
    float mx = -INFINITY;
    for (int i = static_cast<int>(threadIdx.x); i < a.n; i += blockDim.x) mx = fmaxf(mx, row[i]);
    mx = block_max(mx, part);
    if (mx == -INFINITY) {  // a query that saw no key: a row of zeros
      for (int i = static_cast<int>(threadIdx.x); i < a.n; i += blockDim.x) row[i] = 0.f;
      continue;
    }
    float z = 0.f;
    for (int i = static_cast<int>(threadIdx.x); i < a.n; i += blockDim.x) {
      const float e = row[i] == -INFINITY ? 0.f : expf(row[i] - mx);
      row[i] = e;
      z += e;
    }
    z = block_sum(z, part);
    __syncthreads();  // part is reused by the next row's reduction
    const float inv = 1.f / z;
    for (int i = static_cast<int>(threadIdx.x); i < a.n; i += blockDim.x) row[i] *= inv;
  }
  pdl_trigger();
}

// grid (slots / 256, n_head_kv).
__global__ void round_sums_kernel(RoundStatsDev a) {
  pdl_wait();
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x), h = static_cast<int>(blockIdx.y);
  if (i < a.n) {
    float att = 0.f, last = 0.f, fresh = 0.f;
    for (int r = 0; r < a.n_rep; ++r) {
      const float* p = a.probs + (static_cast<size_t>(h) * a.n_rep + r) * a.nq * a.n + i;
      for (int j = 0; j < a.nq; ++j) {
        const float x = p[static_cast<size_t>(j) * a.n];
        att += x;
        if (j == a.nq - 1) last += x;
        if (a.qpos[j] > a.fresh_after) fresh += x;
      }
    }
    float* o = a.sums + static_cast<size_t>(h) * 3 * a.n + i;
    o[0] = att;
    o[a.n] = last;
    o[2 * static_cast<size_t>(a.n)] = fresh;
  }
  pdl_trigger();
}

// grid n_head_kv; dynamic shared memory: head_dim floats.
__global__ void round_similarity_kernel(RoundStatsDev a) {
  pdl_wait();
  extern __shared__ float sum[];  // [head_dim]: the sum of the unit keys
  const int h = static_cast<int>(blockIdx.x), hd = a.head_dim, n = a.n_cand;
  const __half* kh = a.k + static_cast<size_t>(h) * a.head_stride * hd;
  float* inv = a.inv + static_cast<size_t>(h) * n;
  float* sim = a.sim + static_cast<size_t>(h) * n;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int n_warps = static_cast<int>(blockDim.x) / 32;
  for (int i = warp; i < n; i += n_warps) {
    float ss = 0.f;
    for (int d = lane; d < hd; d += 32) {
      const float x = __half2float(kh[static_cast<size_t>(i) * hd + d]);
      ss += x * x;
    }
    ss = warp_sum(ss);
    if (lane == 0) inv[i] = ss > 0.f ? rsqrtf(ss) : 0.f;
  }
  __syncthreads();
  for (int d = static_cast<int>(threadIdx.x); d < hd; d += blockDim.x) {
    float s = 0.f;
    for (int i = 0; i < n; ++i) s += __half2float(kh[static_cast<size_t>(i) * hd + d]) * inv[i];
    sum[d] = s;
  }
  __syncthreads();
  for (int i = warp; i < n; i += n_warps) {
    float dot = 0.f, self = 0.f;
    for (int d = lane; d < hd; d += 32) {
      const float u = __half2float(kh[static_cast<size_t>(i) * hd + d]) * inv[i];
      dot += u * sum[d];
      self += u * u;
    }
    dot = warp_sum(dot);
    self = warp_sum(self);
    if (lane == 0) sim[i] = n > 1 ? (dot - self) / static_cast<float>(n - 1) : 0.f;
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
                  dim3(static_cast<unsigned>((a.n + 255) / 256), static_cast<unsigned>(a.n_head_kv)), dim3(256), 0, s, a);
  }
  if (a.n_cand > 0) {
    launch_kernel("round_similarity_kernel", round_similarity_kernel, dim3(static_cast<unsigned>(a.n_head_kv)),
                  dim3(256), sizeof(float) * static_cast<size_t>(a.head_dim), s, a);
  }
}

}  // namespace frugal::cuda
