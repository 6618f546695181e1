// Internal to the CUDA backend: the statistics an eviction round's scored policies read
// (kv/round_stats.h), computed on the device rows of one (layer, sequence), so that a round copies
// back a few vectors per head instead of every key (an 8B-shaped model's round read 134 MB of keys
// and spent ~17 GFLOP on the host). kv/round_stats.cc is the reference (tests/cuda).
#pragma once

#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace frugal::cuda {

struct RoundStatsDev {
  const __half* k = nullptr;      // KV head h's slot i row at k + (h * head_stride + i) * head_dim
  const int32_t* kpos = nullptr;  // its position at kpos + h * head_stride + i
  int64_t head_stride = 0;        // slots between two KV heads' first rows
  int n = 0;                      // tokens each head holds
  int n_head_kv = 0, n_rep = 0, head_dim = 0;
  const float* q = nullptr;       // [nq][n_head_kv * n_rep][head_dim], oldest first (or, with
  const int32_t* qslot = nullptr; // qslot, query j at row qslot[j] of q: a ring)
  const int32_t* qpos = nullptr;  // [nq]
  int nq = 0;
  float scale = 0;
  int32_t window = 0;
  int32_t fresh_after = -1;
  float* probs = nullptr;  // scratch [n_head_kv * n_rep][nq][n]
  float* sums = nullptr;   // out [n_head_kv][3][n]: attention, last, fresh
  int n_cand = 0;          // > 0: similarity of each head's first n_cand keys
  float* sim = nullptr;    // out [n_head_kv][n_cand]
  float* inv = nullptr;    // scratch [n_head_kv][n_cand]
  float* unit_sums = nullptr;  // scratch [n_head_kv][round_stats_chunks(n_cand)][head_dim]
};
constexpr int kRoundStatsMaxRep = 8;  // query heads per KV head the kernels hold in registers
constexpr int kRoundStatsSimKeys = 32;  // keys of one block of the similarity kernels
__host__ __device__ inline int round_stats_chunks(int n_cand) { return (n_cand + kRoundStatsSimKeys - 1) / kRoundStatsSimKeys; }

// The softmax weights and their three sums (when a.nq > 0), then the similarities (a.n_cand > 0),
// on stream s.
void launch_round_stats(const RoundStatsDev& a, cudaStream_t s);

// Row rows[i] of q [.][cols] to row dst[i] of ring, for i < m: a step's captured queries into
// the rings of recent queries.
void launch_scatter_query_rows(const float* q, const int32_t* rows, const int32_t* dst, int m, int cols, float* ring,
                               cudaStream_t s);

}  // namespace frugal::cuda
