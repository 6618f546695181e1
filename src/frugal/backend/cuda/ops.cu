// Normalization, RoPE, SwiGLU, KV writes and attention on the device. Formulas match the CPU
// backend (cpu_backend.cc, attention.cc) so the CPU scalar references check both.
#include <cuda_bf16.h>

#include <cfloat>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <map>
#include <mutex>
#include <vector>
#include <string>

#include "frugal/backend/cuda/common.cuh"

namespace frugal::cuda {
namespace {

constexpr int kWarp = 32;


// One block per row; row_ids (optional) picks which input rows feed the output rows.
// Rounds v to the precision the next product's GEMV would round it to (RoundTo): producers round
// their outputs so that no separate rounding kernel runs.
__device__ __forceinline__ float round_to(float v, int mode) {
  return mode == 1 ? __half2float(__float2half_rn(v)) : (mode == 2 ? __bfloat162float(__float2bfloat16_rn(v)) : v);
}

// kPer > 0: dim is exactly kPer x blockDim.x and each thread keeps its elements (t, t + bd, ...) in
// registers, the weights loaded before waiting for the previous kernel and the row in one burst:
// about one memory round trip per call instead of one per loop iteration. kPer = 0 loops (any
// dim). Both add the same elements in the same order. In place (y == x, the Q/K norms) is fine:
// every thread reads its elements before writing them.
// half_out (optional): the output also as 16-bit operands of the next product (half_mode 1: F16,
// 2: BF16), what launch_to_half / launch_to_bf16 of y would write, without their launch.
__device__ __forceinline__ void store_half(void* out, int64_t i, float v, int half_mode) {
  if (half_mode == 2) {
    static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(v);
  } else {
    static_cast<__half*>(out)[i] = __float2half_rn(v);
  }
}

template <int kPer>
__global__ void rms_norm_kernel(const float* x, const float* __restrict__ w, int dim, float eps, float* y,
                                const int32_t* __restrict__ row_ids, int round, void* half_out, int half_mode) {
  const int bd = static_cast<int>(blockDim.x);
  const int t = static_cast<int>(threadIdx.x);
  float wv[kPer > 0 ? kPer : 1];
  if constexpr (kPer > 0) {
#pragma unroll
    for (int k = 0; k < kPer; ++k) wv[k] = w[t + k * bd];
  }
  pdl_wait();
  pdl_trigger();
  const int64_t out_row = blockIdx.x;
  const int64_t in_row = row_ids != nullptr ? row_ids[out_row] : out_row;
  const float* xr = x + in_row * dim;
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
  float* yr = y + out_row * dim;
  if constexpr (kPer > 0) {
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const float v = round_to(xv[k] * scale * wv[k], round);
      yr[t + k * bd] = v;
      if (half_out != nullptr) store_half(half_out, out_row * dim + t + k * bd, v, half_mode);
    }
  } else {
    for (int i = t; i < dim; i += bd) {
      const float v = round_to(xr[i] * scale * w[i], round);
      yr[i] = v;
      if (half_out != nullptr) store_half(half_out, out_row * dim + i, v, half_mode);
    }
  }
}

__global__ void to_half_kernel(const float* __restrict__ x, int64_t n, __half* __restrict__ y) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __float2half_rn(x[i]);
}
// Greedy token per logits row, with core/greedy_token.h's rule: NaN counts as -inf,
// +inf as the largest finite float, ties go to the lowest id. One block per row; each thread keeps
// its best (value, id) over a strided slice, then the block reduces pairs in shared memory.
__device__ __forceinline__ bool greedy_better(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}
__global__ void argmax_rows_kernel(const float* __restrict__ logits, int64_t n_vocab, int32_t* __restrict__ out) {
  pdl_wait();
  pdl_trigger();
  constexpr int kThreads = 1024;
  __shared__ float sv[kThreads];
  __shared__ int si[kThreads];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * n_vocab;
  float best = -INFINITY;
  int best_i = INT_MAX;
  for (int64_t j = threadIdx.x; j < n_vocab; j += kThreads) {
    float v = row[j];
    v = v != v ? -INFINITY : fminf(v, FLT_MAX);
    if (greedy_better(v, static_cast<int>(j), best, best_i)) {
      best = v;
      best_i = static_cast<int>(j);
    }
  }
  sv[threadIdx.x] = best;
  si[threadIdx.x] = best_i;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) {
      const float v = sv[threadIdx.x + stride];
      const int i = si[threadIdx.x + stride];
      if (greedy_better(v, i, sv[threadIdx.x], si[threadIdx.x])) {
        sv[threadIdx.x] = v;
        si[threadIdx.x] = i;
      }
    }
    __syncthreads();
  }
  // Every value -inf (or NaN): the lowest id, as the host rule gives.
  if (threadIdx.x == 0) out[blockIdx.x] = si[0] == INT_MAX ? 0 : si[0];
}
__global__ void to_bf16_kernel(const float* __restrict__ x, int64_t n, __nv_bfloat16* __restrict__ y) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __float2bfloat16_rn(x[i]);
}
// Rounds activations to F16 (or BF16) precision, kept as floats: what the CPU backend's F16/BF16
// dot products see for single tokens.
__global__ void round_kernel(const float* __restrict__ x, int64_t n, float* __restrict__ y, int bf16) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  y[i] = bf16 ? __bfloat162float(__float2bfloat16_rn(x[i])) : __half2float(__float2half_rn(x[i]));
}
__global__ void add_bias_kernel(float* __restrict__ y, const float* __restrict__ b, int64_t n, int64_t rows) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n * rows) y[i] += b[i % rows];
}
__global__ void swiglu_kernel(float* __restrict__ gate, const float* __restrict__ up, int64_t n, int round,
                              void* half_out, int half_mode) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = gate[i];
  const float v = round_to(g / (1.f + expf(-g)) * up[i], round);
  gate[i] = v;
  if (half_out != nullptr) store_half(half_out, i, v, half_mode);
}

// One thread per (token, head, pair). Angles as the CPU backend builds them: theta multiplied by
// theta_scale once per pair index, divided by the frequency factor, times freq_scale.
__global__ void kv_store_kernel(KvDev kv, int layer, const float* __restrict__ k, const float* __restrict__ v,
                                int n, const int32_t* __restrict__ seq, const int32_t* __restrict__ pos,
                                const int32_t* __restrict__ slot) {
  pdl_wait();
  pdl_trigger();
  const int kv_dim = kv.n_head_kv * kv.head_dim;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(n) * kv_dim) return;
  const int t = static_cast<int>(i / kv_dim);
  const int e = static_cast<int>(i % kv_dim);
  const int head = e / kv.head_dim, d = e % kv.head_dim;
  const int s = seq[t], sl = slot[t];
  const int64_t row = kv_slot0(kv, layer, s, head) + sl;
  kv.k[row * kv.head_dim + d] = __float2half_rn(k[i]);
  kv.v[row * kv.head_dim + d] = __float2half_rn(v[i]);
  if (d == 0) kv.pos[row] = pos[t];
}

// One block of kAttnWarps warps per (query token, head). Each warp walks every kAttnWarps-th key
// with an online softmax, lanes splitting head_dim (element lane + 32 i); the warps' partial
// results are merged at the end. Keys are in position order, so the walk stops at the first key
// past the query's position.
// The angle of rotation pair `pair` at position `pos`, computed as the CPU does (theta by repeated
// multiplication, so both backends round alike).
__device__ __forceinline__ void rope_angle(int pos, int pair, const RopeDev& p, float* c, float* s) {
  float theta = static_cast<float>(pos);
  for (int k = 0; k < pair; ++k) theta *= p.theta_scale;
  const float ff = p.freq_factors != nullptr ? p.freq_factors[pair] : 1.f;
  const float angle = p.freq_scale * (theta / ff);
  *c = cosf(angle);
  *s = sinf(angle);
}

// rope(q) in place, rope(k) and v into the cache, and the slot positions, in one launch per layer.
// Threads [0, n*n_head*half) rotate one pair of q each;
// the next n*kv_dim threads write one element of k (rotated: the thread reads its pair partner)
// and one of v.
__global__ void rope_store_kernel(float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                                  int n, int n_head, KvDev kv, int layer, const int32_t* __restrict__ seq,
                                  const int32_t* __restrict__ pos, const int32_t* __restrict__ slot, RopeDev p) {
  pdl_wait();
  pdl_trigger();
  const int half = p.n_rot / 2;
  const int hd = kv.head_dim;
  const int64_t nq = static_cast<int64_t>(n) * n_head * half;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < nq) {
    const int pair = static_cast<int>(i % half);
    const int64_t th = i / half;
    float c, sn;
    rope_angle(pos[th / n_head], pair, p, &c, &sn);
    float* h = q + th * hd;
    const int a = p.neox ? pair : 2 * pair;
    const int b = p.neox ? pair + half : 2 * pair + 1;
    const float x0 = h[a], x1 = h[b];
    h[a] = x0 * c - x1 * sn;
    h[b] = x0 * sn + x1 * c;
    return;
  }
  i -= nq;
  const int kv_dim = kv.n_head_kv * hd;
  if (i >= static_cast<int64_t>(n) * kv_dim) return;
  const int t = static_cast<int>(i / kv_dim);
  const int e = static_cast<int>(i % kv_dim);
  const int head = e / hd, d = e % hd;
  float kval = k[i];
  if (d < p.n_rot) {
    const bool second = p.neox ? d >= half : (d & 1) != 0;
    const int pair = p.neox ? (second ? d - half : d) : d / 2;
    const int partner = p.neox ? (second ? d - half : d + half) : (d ^ 1);
    const float other = k[i - d + partner];
    float c, sn;
    rope_angle(pos[t], pair, p, &c, &sn);
    const float x0 = second ? other : kval, x1 = second ? kval : other;
    kval = second ? x0 * sn + x1 * c : x0 * c - x1 * sn;
  }
  const int s = seq[t], sl = slot[t];
  const int64_t row = kv_slot0(kv, layer, s, head) + sl;
  kv.k[row * hd + d] = __float2half_rn(kval);
  kv.v[row * hd + d] = __float2half_rn(v[i]);
  if (d == 0) kv.pos[row] = pos[t];
}

// Eviction's compaction, one block per (layer, KV head) of one sequence. Kept slots are ascending
// (keep[i] >= i), so rows only move towards the front; a tile of kCompactTile rows is read whole
// into shared memory before any of it is written, and a later tile's sources lie at or past its
// own rows, beyond everything written before it: in-place moves without a second buffer. Rows
// that stay where they are (keep[i] == i, the untouched prefix) are neither read nor written.
constexpr int kCompactTile = 16;
__global__ void kv_compact_kernel(KvDev kv, int seq, const int32_t* __restrict__ keep, int n_kept) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ uint32_t tile[];  // [2][kCompactTile][head_dim / 2]: K rows, then V rows
  __shared__ int32_t tile_pos[kCompactTile];
  const int lh = static_cast<int>(blockIdx.x);
  const int layer = lh / kv.n_head_kv, head = lh % kv.n_head_kv;
  const int64_t slot0 = kv_slot0(kv, layer, seq, head);
  const int w = kv.head_dim / 2;  // 32-bit words per row
  uint32_t* k = reinterpret_cast<uint32_t*>(kv.k) + slot0 * w;
  uint32_t* v = reinterpret_cast<uint32_t*>(kv.v) + slot0 * w;
  int32_t* pos = kv.pos + slot0;
  const int32_t* kp = keep + static_cast<int64_t>(lh) * n_kept;
  for (int i0 = 0; i0 < n_kept; i0 += kCompactTile) {
    const int rows = min(kCompactTile, n_kept - i0);
    for (int e = threadIdx.x; e < rows * w; e += blockDim.x) {
      const int r = e / w, c = e % w;
      const int src = kp[i0 + r];
      if (src == i0 + r) continue;
      tile[r * w + c] = k[static_cast<int64_t>(src) * w + c];
      tile[(kCompactTile + r) * w + c] = v[static_cast<int64_t>(src) * w + c];
    }
    for (int r = threadIdx.x; r < rows; r += blockDim.x) tile_pos[r] = pos[kp[i0 + r]];
    __syncthreads();
    for (int e = threadIdx.x; e < rows * w; e += blockDim.x) {
      const int r = e / w, c = e % w;
      if (kp[i0 + r] == i0 + r) continue;
      k[static_cast<int64_t>(i0 + r) * w + c] = tile[r * w + c];
      v[static_cast<int64_t>(i0 + r) * w + c] = tile[(kCompactTile + r) * w + c];
    }
    for (int r = threadIdx.x; r < rows; r += blockDim.x) pos[i0 + r] = tile_pos[r];
    __syncthreads();
  }
}

constexpr int kAttnWarps = 4;

template <int kPerLane>
__global__ void __launch_bounds__(kAttnWarps * kWarp) attention_kernel(KvDev kv, int layer, const float* __restrict__ q,
                                                                        const int32_t* __restrict__ seq,
                                                                        const int32_t* __restrict__ qpos_arr, AttnDev p,
                                                                        float* __restrict__ out) {
  pdl_wait();
  pdl_trigger();
  const int t = blockIdx.x, h = blockIdx.y;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int hd = p.head_dim;
  const int g = h / (p.n_head / p.n_head_kv);
  const int s = seq[t];
  const int qp = qpos_arr[t];
  const int n_keys = kv.seq_len[s];
  const int32_t* kpos = kv.pos + kv_slot0(kv, layer, s, g);
  const int64_t base = kv_slot0(kv, layer, s, g) * hd;
  const __half* kb = kv.k + base;
  const __half* vb = kv.v + base;
  const float* qh = q + (static_cast<int64_t>(t) * p.n_head + h) * hd;
  float qv[kPerLane], acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + kWarp * i;
    qv[i] = e < hd ? qh[e] * p.scale : 0.f;
    acc[i] = 0.f;
  }
  float m = -FLT_MAX, l = 0.f;
  for (int j = warp; j < n_keys; j += kAttnWarps) {
    const int kp = kpos[j];
    if (kp > qp) break;
    if (p.window > 0 && kp <= qp - p.window) continue;
    const __half* kr = kb + static_cast<int64_t>(j) * hd;
    float sdot = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + kWarp * i;
      if (e < hd) sdot += qv[i] * __half2float(kr[e]);
    }
    sdot = warp_sum(sdot);
    const float mn = fmaxf(m, sdot);
    const float corr = expf(m - mn);
    const float pe = expf(sdot - mn);
    l = l * corr + pe;
    const __half* vr = vb + static_cast<int64_t>(j) * hd;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + kWarp * i;
      acc[i] = acc[i] * corr + (e < hd ? pe * __half2float(vr[e]) : 0.f);
    }
    m = mn;
  }
  __shared__ float sm_m[kAttnWarps], sm_l[kAttnWarps];
  __shared__ float sm_acc[kAttnWarps][kPerLane * kWarp];
  if (lane == 0) {
    sm_m[warp] = m;
    sm_l[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) sm_acc[warp][lane + kWarp * i] = acc[i];
  __syncthreads();
  float mx = -FLT_MAX;
#pragma unroll
  for (int w = 0; w < kAttnWarps; ++w) mx = fmaxf(mx, sm_m[w]);
  float wsum[kAttnWarps];
  float lsum = 0.f;
#pragma unroll
  for (int w = 0; w < kAttnWarps; ++w) {
    wsum[w] = sm_l[w] > 0.f ? expf(sm_m[w] - mx) : 0.f;
    lsum += sm_l[w] * wsum[w];
  }
  const float inv = lsum > 0.f ? 1.f / lsum : 0.f;  // no visible key: zeros, as on the CPU
  float* o = out + (static_cast<int64_t>(t) * p.n_head + h) * hd;
  for (int e = threadIdx.x; e < hd; e += blockDim.x) {
    float a = 0.f;
#pragma unroll
    for (int w = 0; w < kAttnWarps; ++w) a += sm_acc[w][e] * wsum[w];
    o[e] = a * inv;
  }
}

unsigned blocks_for(int64_t n, int per, const char* kernel) { return blocks_1d(n, per, kernel); }

// Diagnostics state (common.cuh). Environment variables are read once.
int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : 0;
}
std::mutex g_launch_mu;
std::string g_launch_error;  // first failed launch since the last take_launch_error()
bool g_launch_printed = false;
char g_phase[256] = "";  // last trace phase, read by the exit/signal trace

}  // namespace

void record_launch_error(const std::string& m) {
  std::lock_guard<std::mutex> lock(g_launch_mu);
  if (g_launch_error.empty()) g_launch_error = m;
  // Printed at once (the first per process): a process that dies later still leaves the cause.
  if (!g_launch_printed) {
    g_launch_printed = true;
    std::fprintf(stderr, "%s\n", m.c_str());
    std::fflush(stderr);
  }
}

bool pdl_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("FRUGAL_CUDA_PDL");
    if (e != nullptr && std::strcmp(e, "0") == 0) return false;
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
    return major >= 9;
  }();
  return on;
}

int trace_level() {
  static const int level = env_int("FRUGAL_CUDA_TRACE");
  return level;
}
bool sync_each_launch() {
  static const bool on = env_int("FRUGAL_CUDA_SYNC") != 0;
  return on;
}
void set_phase_text(const std::string& phase) {
  std::snprintf(g_phase, sizeof g_phase, "%s", phase.c_str());
}
const char* phase_text() { return g_phase; }

bool norm_in_registers() {
  static const bool on = env_int("FRUGAL_CUDA_NORM_LOOP") == 0;
  return on;
}

bool kernel_built_for_device(const void* kernel, int min_version) {
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: clear it so the next launch does not report it
    return false;
  }
  return attr.binaryVersion >= min_version && (attr.ptxVersion == 0 || attr.ptxVersion >= min_version);
}

bool profiling() {
  static const bool on = env_int("FRUGAL_CUDA_PROFILE") != 0;
  return on;
}

namespace {
// Kernel profile: an event after each launch of an eager step; a kernel's time is the gap between
// its event and the previous one (launches are queued ahead, so the GPU runs them back to back
// and the gap is the kernel plus the GPU's switch between kernels, which is what a step pays).
struct ProfMark {
  std::string name;
  uint64_t bytes;
  cudaEvent_t ev;
};
struct ProfTotal {
  uint64_t calls = 0;
  double ms = 0;
  uint64_t bytes = 0;
};
std::vector<ProfMark> g_prof_marks;
std::vector<cudaEvent_t> g_prof_free;
std::map<std::string, ProfTotal> g_prof;
uint64_t g_prof_steps = 0;

cudaEvent_t prof_event() {
  cudaEvent_t e = nullptr;
  if (!g_prof_free.empty()) {
    e = g_prof_free.back();
    g_prof_free.pop_back();
  } else if (cudaEventCreate(&e) != cudaSuccess) {
    e = nullptr;
  }
  return e;
}
}  // namespace

void profile_mark(const std::string& name, uint64_t bytes, cudaStream_t s) {
  if (!profiling()) return;
  cudaEvent_t e = prof_event();
  if (e == nullptr || cudaEventRecord(e, s) != cudaSuccess) return;
  g_prof_marks.push_back({name, bytes, e});
}
void profile_step_begin(cudaStream_t s) {
  if (!profiling()) return;
  for (auto& m : g_prof_marks) g_prof_free.push_back(m.ev);
  g_prof_marks.clear();
  profile_mark("", 0, s);
}
void profile_step_end() {
  if (!profiling() || g_prof_marks.empty()) return;
  ++g_prof_steps;
  for (size_t i = 1; i < g_prof_marks.size(); ++i) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, g_prof_marks[i - 1].ev, g_prof_marks[i].ev) != cudaSuccess) continue;
    ProfTotal& t = g_prof[g_prof_marks[i].name];
    ++t.calls;
    t.ms += ms;
    t.bytes += g_prof_marks[i].bytes;
  }
  for (auto& m : g_prof_marks) g_prof_free.push_back(m.ev);
  g_prof_marks.clear();
}
std::string profile_report() {
  if (!profiling() || g_prof.empty()) return "";
  std::vector<std::pair<std::string, ProfTotal>> v(g_prof.begin(), g_prof.end());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  double total = 0;
  uint64_t calls = 0;
  for (const auto& [n, t] : v) {
    total += t.ms;
    calls += t.calls;
  }
  char line[512];
  std::string out;
  std::snprintf(line, sizeof line, "cuda profile: %llu eager steps, %llu kernels, %.3f ms of GPU time per step\n",
                static_cast<unsigned long long>(g_prof_steps), static_cast<unsigned long long>(calls),
                g_prof_steps ? total / static_cast<double>(g_prof_steps) : 0.0);
  out += line;
  out += "  share      ms/step   calls/step   us/call     GB/s  kernel\n";
  for (const auto& [n, t] : v) {
    const double per = g_prof_steps ? 1.0 / static_cast<double>(g_prof_steps) : 0.0;
    const double gbs = t.ms > 0 && t.bytes > 0 ? static_cast<double>(t.bytes) / (t.ms * 1e-3) / 1e9 : 0.0;
    std::snprintf(line, sizeof line, "  %5.1f%%  %10.4f  %11.1f  %8.2f  %7.0f  %s\n", 100.0 * t.ms / total, t.ms * per,
                  static_cast<double>(t.calls) * per, 1e3 * t.ms / static_cast<double>(t.calls), gbs, n.c_str());
    out += line;
  }
  return out;
}

namespace {
std::string g_label;  // profile_label for the next launch
uint64_t g_label_bytes = 0;
}  // namespace
void profile_label(const std::string& name, uint64_t bytes) {
  g_label = name;
  g_label_bytes = bytes;
}

void after_launch(const char* kernel, dim3 grid, dim3 block, cudaStream_t s) {
  if (profiling()) {
    profile_mark(g_label.empty() ? std::string(kernel) : g_label, g_label_bytes, s);
    g_label.clear();
    g_label_bytes = 0;
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    record_launch_error(cat("cuda: launch of ", kernel, " <<<(", grid.x, ",", grid.y, ",", grid.z, "), (", block.x, ",",
                            block.y, ",", block.z, ")>>> failed: ", cudaGetErrorName(e), " (", cudaGetErrorString(e),
                            ", error ", static_cast<int>(e), "; a sticky error may come from earlier work)"));
    return;
  }
  if (!sync_each_launch()) return;
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) return;
  const cudaError_t r = cudaStreamSynchronize(s);
  if (r != cudaSuccess) {
    record_launch_error(cat("cuda: ", kernel, " <<<(", grid.x, ",", grid.y, ",", grid.z, "), (", block.x, ",", block.y,
                            ",", block.z, ")>>> failed while running (FRUGAL_CUDA_SYNC): ", cudaGetErrorName(r), " (",
                            cudaGetErrorString(r), ", error ", static_cast<int>(r), ")"));
  }
}

Status take_launch_error() {
  std::lock_guard<std::mutex> lock(g_launch_mu);
  if (g_launch_error.empty()) return ok_status();
  Status st(ErrorCode::kIo, g_launch_error);
  g_launch_error.clear();
  return st;
}

unsigned blocks_1d(int64_t total, int per, const char* kernel) {
  const int64_t b = (total + per - 1) / per;
  if (b > 0x7FFFFFFF) {
    record_launch_error(cat("cuda: ", kernel, ": ", total, " threads need ", b, " blocks (at most 2^31-1)"));
    return 0;
  }
  return static_cast<unsigned>(b > 0 ? b : 0);
}

// Launches with nothing to do are skipped: an empty grid is a launch error in CUDA.
void launch_rms_norm(const float* x, const float* w, int64_t rows, int dim, float eps, float* y,
                     const int32_t* row_ids, cudaStream_t s, int round, void* half_out, bool half_bf16) {
  if (rows <= 0) return;
  const int threads = dim >= 1024 ? 1024 : (dim >= 256 ? 256 : 64);
  const unsigned grid = blocks_1d(rows, 1, "rms_norm_kernel");
  if (grid == 0) return;
  const auto go = [&](auto kernel) {
    launch_kernel("rms_norm_kernel", kernel, dim3(grid), dim3(threads), 0, s, x, w, dim, eps, y, row_ids, round,
                  half_out, half_bf16 ? 2 : 1);
  };
  switch (norm_in_registers() && dim % threads == 0 ? dim / threads : 0) {
    case 1: go(rms_norm_kernel<1>); break;
    case 2: go(rms_norm_kernel<2>); break;
    case 3: go(rms_norm_kernel<3>); break;
    case 4: go(rms_norm_kernel<4>); break;
    case 5: go(rms_norm_kernel<5>); break;
    case 6: go(rms_norm_kernel<6>); break;
    case 7: go(rms_norm_kernel<7>); break;
    case 8: go(rms_norm_kernel<8>); break;
    default: go(rms_norm_kernel<0>); break;
  }
}
void launch_to_half(const float* x, int64_t n, __half* y, cudaStream_t s) {
  const unsigned grid = blocks_for(n, 256, "to_half_kernel");
  if (grid == 0) return;
  launch_kernel("to_half_kernel", to_half_kernel, dim3(grid), dim3(256), 0, s, x, n, y);
}
void launch_argmax_rows(const float* logits, int n_rows, int64_t n_vocab, int32_t* out, cudaStream_t s) {
  if (n_rows <= 0) return;
  launch_kernel("argmax_rows_kernel", argmax_rows_kernel, dim3(static_cast<unsigned>(n_rows)), dim3(1024), 0, s,
                logits, n_vocab, out);
}
void launch_to_bf16(const float* x, int64_t n, void* y, cudaStream_t s) {
  const unsigned grid = blocks_for(n, 256, "to_bf16_kernel");
  if (grid == 0) return;
  launch_kernel("to_bf16_kernel", to_bf16_kernel, dim3(grid), dim3(256), 0, s, x, n, static_cast<__nv_bfloat16*>(y));
}
void launch_round(const float* x, int64_t n, float* y, bool bf16, cudaStream_t s) {
  const unsigned grid = blocks_for(n, 256, "round_kernel");
  if (grid == 0) return;
  launch_kernel("round_kernel", round_kernel, dim3(grid), dim3(256), 0, s, x, n, y, bf16 ? 1 : 0);
}
void launch_add_bias(float* y, const float* bias, int64_t n, int64_t rows, cudaStream_t s) {
  const unsigned grid = blocks_for(n * rows, 256, "add_bias_kernel");
  if (grid == 0) return;
  launch_kernel("add_bias_kernel", add_bias_kernel, dim3(grid), dim3(256), 0, s, y, bias, n, rows);
}
void launch_swiglu(float* gate, const float* up, int64_t n, cudaStream_t s, int round, void* half_out,
                   bool half_bf16) {
  const unsigned grid = blocks_for(n, 256, "swiglu_kernel");
  if (grid == 0) return;
  launch_kernel("swiglu_kernel", swiglu_kernel, dim3(grid), dim3(256), 0, s, gate, up, n, round, half_out,
                half_bf16 ? 2 : 1);
}
void launch_rope_store(float* q, const float* k, const float* v, int n, int n_head, const KvDev& kv, int layer,
                       const int32_t* seq, const int32_t* pos, const int32_t* slot, const RopeDev& p, cudaStream_t s) {
  if (p.n_rot < 2) {
    launch_kv_store(kv, layer, k, v, n, seq, pos, slot, s);
    return;
  }
  const int64_t total = static_cast<int64_t>(n) * n_head * (p.n_rot / 2) + static_cast<int64_t>(n) * kv.n_head_kv * kv.head_dim;
  const unsigned grid = blocks_for(total, 256, "rope_store_kernel");
  if (grid == 0) return;
  launch_kernel("rope_store_kernel", rope_store_kernel, dim3(grid), dim3(256), 0, s, q, k, v, n, n_head, kv, layer, seq,
                pos, slot, p);
}
void launch_kv_compact(const KvDev& kv, int seq, const int32_t* keep, int n_kept, cudaStream_t s) {
  if (n_kept <= 0 || kv.n_layer <= 0 || kv.n_head_kv <= 0) return;
  const size_t smem = sizeof(uint32_t) * 2 * kCompactTile * static_cast<size_t>(kv.head_dim / 2);
  launch_kernel("kv_compact_kernel", kv_compact_kernel, dim3(static_cast<unsigned>(kv.n_layer * kv.n_head_kv)),
                dim3(256), smem, s, kv, seq, keep, n_kept);
}
void launch_kv_store(const KvDev& kv, int layer, const float* k, const float* v, int n, const int32_t* seq,
                     const int32_t* pos, const int32_t* slot, cudaStream_t s) {
  const int64_t total = static_cast<int64_t>(n) * kv.n_head_kv * kv.head_dim;
  const unsigned grid = blocks_for(total, 256, "kv_store_kernel");
  if (grid == 0) return;
  launch_kernel("kv_store_kernel", kv_store_kernel, dim3(grid), dim3(256), 0, s, kv, layer, k, v, n, seq, pos, slot);
}
void launch_attention(const KvDev& kv, int layer, const float* q, int n, const int32_t* seq, const int32_t* pos,
                      const AttnDev& p, float* out, cudaStream_t s) {
  if (n <= 0 || p.n_head <= 0) return;
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(p.n_head));
  if (p.head_dim <= 128) {
    launch_kernel("attention_kernel<4>", attention_kernel<4>, grid, dim3(kAttnWarps * kWarp), 0, s, kv, layer, q, seq,
                  pos, p, out);
  } else {
    launch_kernel("attention_kernel<8>", attention_kernel<8>, grid, dim3(kAttnWarps * kWarp), 0, s, kv, layer, q, seq,
                  pos, p, out);
  }
}

}  // namespace frugal::cuda
