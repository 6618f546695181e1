// Internal to the CUDA backend: error checks, the device weight view and the kernel launchers.
#pragma once

#include <cstdint>
#include <algorithm>
#include <cstdio>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "frugal/core/dtype.h"
#include "frugal/core/status.h"

namespace frugal::cuda {

// Messages are concatenated, not formatted: nvcc's front end cannot evaluate fmt's consteval
// format-string checks, so .cu files never call frugal::error().
inline std::string str(const std::string& s) { return s; }
inline std::string str(const char* s) { return s; }
inline std::string str(int64_t v) { return std::to_string(v); }
inline std::string str(uint64_t v) { return std::to_string(v); }  // size_t
inline std::string str(int v) { return std::to_string(v); }
inline std::string str(unsigned v) { return std::to_string(v); }
template <typename... A>
std::string cat(const A&... parts) {
  std::string m;
  ((m += str(parts)), ...);
  return m;
}
template <typename... A>
Status fail(ErrorCode code, const A&... parts) {
  return Status(code, cat(parts...));
}
// Every message names the call, the status's symbolic name, its text and its number: run 1 on the
// H200 lost its only clue to a message that gave a bare cuBLAS number.
inline Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return ok_status();
  return fail(ErrorCode::kIo, "cuda: ", what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ", error ",
              static_cast<int>(e), ")");
}
// cuBLAS is opened with dlopen the first time the backend needs it, not linked: a linked libcublas
// (and the libcublasLt it pulls in) is mapped and initialised in every frugal process, which made
// ~150 MB resident before main() even on CPU-only runs (`frugal --help`: 225 MB). Only the entry
// points below are used; the types come from cublas_v2.h.
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  // The exported cublasGemmEx (cublasComputeType_t); the header's inline overload taking a
  // cudaDataType compute type is not in the library.
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusName) status_name = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};
// Opens libcublas.so.<major it was compiled against> once; kNotSupported names the library and the
// loader's reason when it is missing or lacks an entry point (cublas_loader.cu).
Result<const CublasApi*> load_cublas();
// The table; its entries are set only after load_cublas() succeeded.
const CublasApi& cublas();
Status cublas_status(cublasStatus_t e, const char* what);
#define FRUGAL_CUDA(expr) FRUGAL_RETURN_IF_ERROR(::frugal::cuda::cuda_status((expr), #expr))
#define FRUGAL_CUBLAS(expr) FRUGAL_RETURN_IF_ERROR(::frugal::cuda::cublas_status((expr), #expr))

// Diagnostics (ops.cu), all off unless asked for, so a normal run is unchanged:
// - FRUGAL_CUDA_TRACE=1 prints the backend's setup phases (upload, cache, buffers, graph capture) and
//   the test hooks' steps on stderr; =2 also every forward step. The current phase is also kept for
//   the exit/signal trace (cuda_backend.h: install_exit_trace).
// - FRUGAL_CUDA_SYNC=1 synchronizes the stream after every kernel launch made outside graph capture
//   (graphs are then off), so an asynchronous fault (illegal address, trap) is reported against the
//   kernel that caused it instead of at the step's final synchronization.
int trace_level();
bool sync_each_launch();
// - FRUGAL_CUDA_PROFILE=1 runs steps eagerly (graphs off) with an event after every kernel and
//   prints, when the backend is destroyed, each kernel's share of the GPU time per step, its mean
//   time and, for weight products, the bandwidth of the weight bytes it read.
bool profiling();
// - FRUGAL_CUDA_NORM_LOOP=1 runs the RMSNorm kernels in their looped form (one memory round trip
//   per loop iteration) instead of the register form: the baseline of the same run's comparison.
bool norm_in_registers();
void profile_mark(const std::string& name, uint64_t bytes, cudaStream_t s);  // after a launch
void profile_step_begin(cudaStream_t s);
// The name and bytes read that the next launch's mark carries (weight products name their shape).
void profile_label(const std::string& name, uint64_t bytes);
void profile_step_end();  // after the step's synchronization
std::string profile_report();
void set_phase_text(const std::string& phase);  // kept in a fixed buffer for the signal handler
const char* phase_text();
template <typename... A>
void trace(int level, const A&... parts) {
  if (trace_level() < level) return;
  const std::string m = cat(parts...);
  set_phase_text(m);
  std::fprintf(stderr, "cuda trace: %s\n", m.c_str());
  std::fflush(stderr);
}

// Every launcher ends with after_launch: a failed launch (bad configuration, no kernel image for
// this GPU, or a sticky fault left by earlier work) is printed on stderr at once, naming the kernel
// and its geometry, and kept until take_launch_error(); kernel launches have no status of their own.
// With FRUGAL_CUDA_SYNC=1 it also waits for the kernel and checks how it ended.
void after_launch(const char* kernel, dim3 grid, dim3 block, cudaStream_t s);
void record_launch_error(const std::string& message);  // the same for errors found before a launch
Status take_launch_error();
// Programmatic dependent launch (Hopper and later). A decode step is ~500 small kernels; without
// it each one starts only after the previous one has drained, so every launch pays the ramp-up and
// the tail of a nearly idle GPU (measured ~2 us per kernel: a third of an 8B Q8_0 token). Kernels
// launched through launch_kernel may start while their predecessor still runs: each one first
// prefetches what does not depend on it (weights), then pdl_wait() blocks until the predecessor has
// finished and its writes are visible, then pdl_trigger() lets the next kernel get scheduled.
// Rule: every kernel launched through launch_kernel calls pdl_wait() before it reads or writes
// anything another kernel of the step touches. FRUGAL_CUDA_PDL=0 turns the attribute off.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// Brings the 128-byte line at p into L2 without waiting for it.
__device__ __forceinline__ void prefetch_l2(const void* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#endif
}
// Sum of `a` over a warp (butterfly, the same order on every lane).
__device__ __forceinline__ float warp_sum(float a) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) a += __shfl_xor_sync(0xFFFFFFFFu, a, o);
  return a;
}
// Sum of `a` over the block (blockDim.x a multiple of 32, at most 1024), returned to every thread:
// each warp's sum, then the first warp adds those in warp order. `part` is 32 floats of shared
// memory. The norm kernels use it so that their sums of squares agree bit for bit.
__device__ __forceinline__ float block_sum(float a, float* part) {
  const int t = static_cast<int>(threadIdx.x);
  a = warp_sum(a);
  if (t % 32 == 0) part[t / 32] = a;
  __syncthreads();
  if (t < 32) {
    float v = t < static_cast<int>(blockDim.x) / 32 ? part[t] : 0.f;
    v = warp_sum(v);
    if (t == 0) part[0] = v;
  }
  __syncthreads();
  return part[0];
}
bool pdl_enabled();  // compute capability 9.0 or later and FRUGAL_CUDA_PDL not 0 (ops.cu)

// Whether the current GPU runs a build of `kernel` made for compute capability `min_version`
// (x 10: 80 for 8.0) or later, machine code or PTX of such a virtual architecture; the kernels
// that need newer instructions trap in the build's compute_75 PTX (ops.cu).
bool kernel_built_for_device(const void* kernel, int min_version);
// `answer()` computed once per device (the current one) and kept: for checks made before launches.
// Each call site has its own cache (its lambda's type).
template <typename F>
bool once_per_device(F answer) {
  constexpr int kMaxDevices = 64;
  static std::once_flag once[kMaxDevices];
  static bool ok[kMaxDevices] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return false;
  std::call_once(once[dev], [&] { ok[dev] = answer(); });
  return ok[dev];
}

// Q4_K block header (the first 16 bytes: F16 d and dmin, 12 bytes of packed 6-bit scales and mins):
// d, dmin, and sub-block j's scale and min (j < 8), as GGUF packs them. (gemv.cu's Dec<Q4_K> keeps
// its own copy for now: taking these changed that tuned kernel's register allocation, untimed.)
__device__ __forceinline__ float q4k_d(const uint4& hdr) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(hdr.x & 0xFFFF)));
}
__device__ __forceinline__ float q4k_dmin(const uint4& hdr) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(hdr.x >> 16)));
}
__device__ __forceinline__ void q4k_scale_min(const uint4& hdr, int j, uint32_t* sc, uint32_t* mn) {
  const auto byte = [&hdr](int k) -> uint32_t {
    const uint32_t word = k < 4 ? hdr.y : (k < 8 ? hdr.z : hdr.w);
    return (word >> (8 * (k & 3))) & 0xFFu;
  };
  if (j < 4) {
    *sc = byte(j) & 63;
    *mn = byte(j + 4) & 63;
  } else {
    *sc = (byte(j + 4) & 0xF) | ((byte(j - 4) >> 6) << 4);
    *mn = (byte(j + 4) >> 4) | ((byte(j) >> 6) << 4);
  }
}

void after_launch(const char* kernel, dim3 grid, dim3 block, cudaStream_t s);
// kernel<<<grid, block, smem, s>>>(args...) with the programmatic-serialization attribute when
// pdl_enabled(), then after_launch.
template <typename... P, typename... A>
void launch_kernel(const char* name, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                   A&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  if (pdl_enabled()) {
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);  // checked by after_launch
  after_launch(name, grid, block, s);
}

// Blocks for `total` threads of `per` per block; an error is recorded (and 0 returned: the caller
// launches nothing) when the count does not fit a 1-D grid.
unsigned blocks_1d(int64_t total, int per, const char* kernel);

// A weight matrix in device memory. `type` is the device layout: Q8_0 and Q4_0 are split at upload
// into codes (`data`, [rows][cols] int8 or [rows][cols/2] nibble bytes, blocks in file order) and
// F16 scales (`scales`, [rows][cols/32]); MXFP4, NVFP4, HBQ_A and HBQ_E likewise into their code
// bytes (`data`: 16, 32, 64 and 64 per block) and each block's other bytes (`block_scales`: E8M0
// scale 1, four UE4M3 scales 4, HBQ headers padded to 8 and 4: hbq.cuh); the other types keep
// their GGUF blocks.
// Q6_K blocks on the device: GGUF's 210 bytes (ql[128], qh[64], scales[16], F16 d) padded to 224
// at upload, so that every field starts 16-byte aligned and the kernels read codes with 8-byte
// loads instead of 2-byte ones (210 is only 2-byte aligned). The pad shares the 32-byte sector of
// the scale and d, which is read anyway, so it costs memory (6.7%) but no bandwidth.
constexpr int kQ6KBlockBytes = 210;
constexpr int kQ6KDeviceBlockBytes = 224;

// The blocks that upload_weight splits into codes and headers (header first in the file).
// block_elems 0: not such a type.
struct SplitLayout {
  int block_elems = 0, block_bytes = 0, header_bytes = 0, header_device_bytes = 0;
};
__host__ __device__ constexpr SplitLayout split_layout(DType t) {
  return t == DType::kMXFP4   ? SplitLayout{32, 17, 1, 1}    // E8M0 scale, 16 code bytes
         : t == DType::kNVFP4 ? SplitLayout{64, 36, 4, 4}    // four UE4M3 scales, 32 code bytes
         : t == DType::kHBQ_A ? SplitLayout{128, 70, 6, 8}   // scale, set, 4 code bytes; 64 code bytes
         : t == DType::kHBQ_E ? SplitLayout{128, 67, 3, 4}   // scale, set, 1 code byte; 64 code bytes
                              : SplitLayout{};
}

struct DevWeight {
  DType type = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;  // bytes between rows of `data`
  const uint8_t* data = nullptr;
  const __half* scales = nullptr;
  const uint8_t* block_scales = nullptr;  // [rows][blocks per row][header bytes] (FP4 and HBQ types)
  float scale = 1.f;  // per tensor, applied by the NVFP4 decoders (its F32 global scale)
  // FluxBin (fluxbin.cuh): `data` holds the sign nibbles, `scales` the row scales (r_1, r_2 pairs);
  // these hold the column scales and, in the hybrid, the salient columns.
  const __half* col_scales = nullptr;      // [2][padded groups * 128]: c_1, then c_2
  const uint8_t* salient_idx = nullptr;    // [padded groups][salient]
  const __half* salient_scales = nullptr;  // [rows][padded groups]
  const uint8_t* salient_codes = nullptr;  // [rows][padded groups][salient / 2]
  int salient = 0;
};

// A device allocation list freed together (or one allocation early, with free()).
class DeviceArena {
 public:
  ~DeviceArena() { release(); }
  void release() {
    for (void* p : ptrs_) cudaFree(p);
    ptrs_.clear();
    sizes_.clear();
    bytes_ = 0;
  }
  template <typename T>
  Status alloc(size_t count, T** out) {
    void* p = nullptr;
    FRUGAL_CUDA(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)));
    ptrs_.push_back(p);
    sizes_.push_back(count * sizeof(T));
    bytes_ += count * sizeof(T);
    *out = static_cast<T*>(p);
    return ok_status();
  }
  void adopt(void* p, uint64_t bytes) {
    ptrs_.push_back(p);
    sizes_.push_back(bytes);
    bytes_ += bytes;
  }
  // Frees one allocation of this arena now (null, or one it does not hold: nothing happens). The
  // caller makes sure no queued work still reads it.
  void free(const void* p) {
    if (p == nullptr) return;
    for (size_t i = 0; i < ptrs_.size(); ++i) {
      if (ptrs_[i] != p) continue;
      cudaFree(ptrs_[i]);
      bytes_ -= sizes_[i];
      ptrs_.erase(ptrs_.begin() + static_cast<std::ptrdiff_t>(i));
      sizes_.erase(sizes_.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }

 private:
  std::vector<void*> ptrs_;
  std::vector<uint64_t> sizes_;
  uint64_t bytes_ = 0;
};

bool device_type_supported(DType t);

// Uploads one GGUF weight (host bytes, `rows` rows of `row_stride` bytes) into `dst`, allocating
// with cudaMalloc; repacks Q8_0/Q4_0. Returns the bytes allocated through `bytes`.
// `consumed`, when set, is told of each slice of `host` once it is on the device (the copy goes in
// slices of at most 64 MiB), so the caller can drop the host pages while the rest is still read.
struct HostConsumed {
  void (*fn)(void* ctx, const void* data, size_t bytes) = nullptr;
  void* ctx = nullptr;
};
Status upload_weight(DType type, int64_t rows, int64_t cols, size_t row_stride, const void* host,
                     DevWeight* dst, void** alloc, uint64_t* bytes, cudaStream_t stream,
                     HostConsumed consumed = {});

// Up to three weights of one type applied to the same input (Q/K/V, gate/up) in one launch.
struct GemvSet {
  int n = 0;
  DevWeight w0, w1, w2;
  float *y0 = nullptr, *y1 = nullptr, *y2 = nullptr;
  const float *b0 = nullptr, *b1 = nullptr, *b2 = nullptr;
  int first1 = 0, first2 = 0;  // first block of w1, w2 (set by the launcher)
  int prefetch = 0;            // bytes of each row pulled into L2 before waiting for the input (launcher)
};
// Bytes of each weight row a GEMV prefetches into L2 before its input is ready (FRUGAL_GEMV_PREFETCH,
// a multiple of 128 up to 4096; default 512).
int gemv_prefetch_bytes();
// Warps per weight row of a decode GEMV with one row per warp: FRUGAL_GEMV_SPLIT=1|2|4 forces it;
// unset or 0: with `pick`, the smallest of 1, 2, 4 that gives `rows` rows at least 8192 warps
// (about a full H200) while each warp keeps two or more 64-unit strides of its row, else 1. The
// float-activation GEMV picks (8B F16 tg128 217.1 vs 207.6 tok/s unsplit, same run); the 8-bit one
// does not (Q8_0 318.0 split vs 329.9 unsplit: its rows are short already).
int gemv_split(int64_t rows, int64_t units, bool pick);
void launch_gemv_set(const GemvSet& set, const float* x, int n, bool accumulate, cudaStream_t s);

// y[t][r] (+)= dot(W[r], x[t]) (+ bias[r]) for t < n <= 8, dequantizing W in registers.
void launch_gemv(const DevWeight& w, const float* x, int n, float* y, const float* bias, bool accumulate,
                 cudaStream_t s);
// W as F16 into out [rows][cols] (quantized and F32/BF16 types).
void launch_dequant_f16(const DevWeight& w, __half* out, cudaStream_t s);
// y[i] = W[ids[i]] as floats.
void launch_get_rows(const DevWeight& w, const int32_t* ids, int n, float* y, cudaStream_t s);

// Elementwise and normalization kernels (ops.cu).
// round: 0 keeps F32, 1 rounds the outputs to F16 precision, 2 to BF16 (what the GEMV of an F16 or
// BF16 weight does to its input below 8 tokens: the producer does it instead of a separate kernel).
// half_out (optional): the output also as the next product's 16-bit operands, [rows][dim] F16
// (BF16 with half_bf16), saving that product its conversion kernel (Gemm::prehalf).
void launch_rms_norm(const float* x, const float* w, int64_t rows, int dim, float eps, float* y,
                     const int32_t* row_ids, cudaStream_t s, int round = 0, void* half_out = nullptr,
                     bool half_bf16 = false);
void launch_to_half(const float* x, int64_t n, __half* y, cudaStream_t s);
void launch_to_bf16(const float* x, int64_t n, void* y, cudaStream_t s);
void launch_round(const float* x, int64_t n, float* y, bool bf16, cudaStream_t s);
// out[r] = the greedy token of logits row r (core/greedy_token.h), r < n_rows.
void launch_argmax_rows(const float* logits, int n_rows, int64_t n_vocab, int32_t* out, cudaStream_t s);
void launch_add_bias(float* y, const float* bias, int64_t n, int64_t rows, cudaStream_t s);
void launch_swiglu(float* gate, const float* up, int64_t n, cudaStream_t s, int round = 0, void* half_out = nullptr,
                   bool half_bf16 = false);

// Tensor-core products of F16/BF16/Q8_0/Q4_K weights for 1..kMmaMaxTokens tokens (gemm_mma.cu): for each
// part, y [n][rows] (+)= x [n][cols] W^T (+ bias), x in the weights' 16-bit type. Up to
// kMmaMaxParts weights of one input in one launch. Needs sm_90 (gemm_mma_built_for_device) and
// gemm_mma_fits for every part.
constexpr int kMmaMaxTokens = 64;
constexpr int kMmaMaxParts = 3;
struct MmaPart {
  DType type = DType::kF16;        // F16, BF16, Q8_0 (device layout) or Q4_K
  const void* w = nullptr;         // 16-bit weights, Q8_0 codes (with `scales`) or Q4_K blocks
  const __half* scales = nullptr;  // Q8_0: F16 scales [rows][cols / 32]; null for F16/BF16
  int64_t rows = 0;
  int64_t ld = 0;  // elements (F16/BF16) or bytes (Q8_0 codes, Q4_K blocks) between weight rows
  float* y = nullptr;
  const float* bias = nullptr;
};
bool gemm_mma_built_for_device();
bool gemm_mma_fits(const MmaPart& p, int64_t cols);
// K slices for `blocks` row ranges of 128 (FRUGAL_CUDA_MMA_SLICES=N forces N, at most 8).
int gemm_mma_slices(int64_t blocks, int64_t cols, int sm_count);
// w_ready: no kernel of the step writes the weights (false for a just-dequantized copy).
void launch_gemm_mma(const MmaPart* parts, int count, const void* x, int n, int64_t cols, bool bf16, bool acc,
                     bool w_ready, int sm_count, cudaStream_t s);

struct RopeDev {
  int n_rot = 0;
  float theta_scale = 1.f;  // base^(-2/n_rot), computed on the host as the CPU backend does
  float freq_scale = 1.f;
  bool neox = false;
  const float* freq_factors = nullptr;  // device [n_rot/2] or null
};

// KV cache layout on the device: [layer][seq][kv head][capacity][head_dim] F16, and the position
// of every slot of every head, [layer][seq][kv head][capacity]: an eviction round keeps a
// different set of tokens in each head (as many in each: rounds cut every head of a sequence to
// the same budget, so one length per sequence describes them all).
struct KvDev {
  __half* k = nullptr;
  __half* v = nullptr;
  int32_t* pos = nullptr;      // [n_layer][n_seq][n_head_kv][capacity]
  int32_t* seq_len = nullptr;  // [n_seq] tokens held by each head after this step's appends
  int n_layer = 0, n_seq = 0, n_head_kv = 0, head_dim = 0, capacity = 0;
};
// Slot 0 of one (layer, sequence, KV head): its row is at k/v + slot0 * head_dim, its positions
// at pos + slot0.
__host__ __device__ inline int64_t kv_slot0(const KvDev& kv, int layer, int seq, int head) {
  return ((static_cast<int64_t>(layer) * kv.n_seq + seq) * kv.n_head_kv + head) * kv.capacity;
}
// Eviction on the device: for every (layer, KV head) of sequence `seq`, keeps the slots
// keep[(layer * n_head_kv + head) * n_kept + i], i < n_kept (ascending), compacted to the front
// with their positions. keep is a device array.
void launch_kv_compact(const KvDev& kv, int seq, const int32_t* keep, int n_kept, cudaStream_t s);
// Writes k, v [n][n_head_kv][head_dim] of token t into slot slot[t] of sequence seq[t].
void launch_kv_store(const KvDev& kv, int layer, const float* k, const float* v, int n, const int32_t* seq,
                     const int32_t* pos, const int32_t* slot, cudaStream_t s);
// Rope of q (in place) and of k, and k and v into the cache, in one kernel (k itself is left
// unrotated; launch_kv_store alone when n_rot < 2).
void launch_rope_store(float* q, const float* k, const float* v, int n, int n_head, const KvDev& kv, int layer,
                       const int32_t* seq, const int32_t* pos, const int32_t* slot, const RopeDev& p, cudaStream_t s);

struct AttnDev {
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  float scale = 1.f;
  int window = 0;
  int round_out = 0;  // launch_attention_split: rounding of the output, as launch_rms_norm's `round`
  // Tensor-core launchers: query tokens per block (its rows are G heads x T tokens); 0 = as many as
  // fill the 64 rows. A block holding tokens of several sequences runs its key loop once per
  // sequence, so a step of one token per sequence (batched decode) is fastest with T = 1.
  int tokens_per_block = 0;
  // launch_attention_split: > 0 chooses its key chunks (Z) as for a step of this many tokens, not
  // of n: with tokens_per_block = 1, every token's row is then computed as in a step of its own
  // (row-invariant steps: speculative verification).
  int split_as_tokens = 0;
};
// out [n][n_head][head_dim]: each query token over its sequence's cached keys with pos <= its pos.
void launch_attention(const KvDev& kv, int layer, const float* q, int n, const int32_t* seq, const int32_t* pos,
                      const AttnDev& p, float* out, cudaStream_t s);

// Tensor-core attention (flash_attention.cu), the semantics of launch_attention: out
// [n][n_head][head_dim] for q [n][n_head][head_dim], token t over the cached keys of sequence
// seq[t] with kpos <= pos[t] (and kpos > pos[t] - window when window > 0); zeros when no key is
// visible. seq/pos are device arrays; the batch may mix sequences in any order (tokens of one
// sequence being consecutive is only faster). Each sequence's kv.pos must be ascending over its
// seq_len slots (as launch_attention assumes). Both launchers return false, launching nothing,
// when they do not handle the shape: head_dim other than 64 or 128, n_head not a multiple of
// n_head_kv, more than 64 query heads per KV head, or kv/p disagreeing on head_dim/n_head_kv; the
// caller then uses launch_attention. Launch failures are recorded as for every launcher.
//
// launch_attention_flash: for prefill (many query tokens). Needs no scratch.
bool launch_attention_flash(const KvDev& kv, int layer, const float* q, int n, const int32_t* seq,
                            const int32_t* pos, const AttnDev& p, float* out, cudaStream_t s);
// launch_attention_split: flash-decoding for few query tokens over long contexts: each key range
// is cut into Z chunks (Z from n, the shape and max_keys) computed by separate blocks, then merged.
// max_keys is an estimate of the longest context in the batch (kv.capacity is always fine and
// keeps Z fixed for CUDA graphs); results are correct whatever it is, only the split changes.
// scratch: device memory of at least attention_split_scratch_bytes(n, p, max_keys) bytes (same
// n, p, max_keys), 16-byte aligned (cudaMalloc), not used concurrently by another launch; false
// (nothing launched) when it is too small. Launches two kernels on s.
size_t attention_split_scratch_bytes(int n, const AttnDev& p, int max_keys);
bool launch_attention_split(const KvDev& kv, int layer, const float* q, int n, const int32_t* seq,
                            const int32_t* pos, const AttnDev& p, int max_keys, void* scratch, size_t scratch_bytes,
                            float* out, cudaStream_t s);
// A hint for the caller: true when launch_attention_flash would run fewer than one wave of blocks
// (about n * n_head / 64 < 264 on an H200), i.e. decode-sized batches where the split pays.
bool attention_prefer_split(int n, const AttnDev& p);
}  // namespace frugal::cuda
