// The CUDA backend: the whole forward pass on one NVIDIA GPU. Weights are uploaded once (quantized
// blocks stay quantized; Q8_0/Q4_0 are split into code and scale arrays so every load is 16-byte
// aligned), and activations and the KV cache live on the device for the whole step, so a decode
// step moves only token ids in and logits out. Batches of up to 8 tokens run through GEMV kernels
// that dequantize in registers; larger batches through cuBLAS (weights dequantized to F16 once per
// call). Steps of up to kGraphMaxTokens tokens are captured as CUDA graphs and replayed.
//
// The backend keeps its own KV cache with the host cache's shape (capacity, sequences): a
// sequence's device rows are truncated to the positions before the batch's first token of that
// sequence, so fresh caches, rollbacks and new requests all work through Model::forward. The host
// KvCache stays empty. Eviction rounds read and thin the device cache through device_kv() (every
// head keeps positions of its own; the rows are compacted on the device before the next step);
// quantized caches are CPU-only (kNotSupported).
//
// This header has no CUDA types, so the CLI and tests include it from plain C++.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "frugal/backend/backend.h"
#include "frugal/core/status.h"

namespace frugal {

struct CudaBackendOptions {
  int device = 0;
  bool graphs = true;  // capture decode steps as CUDA graphs (env FRUGAL_CUDA_GRAPHS=0 turns off)
  int cpu_threads = 0;  // threads of the CPU backend that serves op-level calls (0: all cores)
  // After upload, drop the host's resident pages of the model file (they are re-read from the
  // file if the CPU ever needs them).
  bool release_host_weights = true;
  // Keep the recent queries the scored eviction policies read in rings on the device, where the
  // rounds' statistics are computed (env FRUGAL_CUDA_QUERY_RING=0 copies them to the host every
  // step instead, as for a model whose heads the statistics kernels do not take).
  bool query_ring = true;
};

// kNotFound (with the reason) when no usable device or driver is present.
Result<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& opts = {});

namespace cuda {

struct DeviceInfo {
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
  int driver_version = 0;
  int runtime_version = 0;
};
// The device `device`, or kNotFound naming why none can be used (no driver, no device).
Result<DeviceInfo> device_info(int device = 0);

// Test and bench hooks: one weight product on the device from host data (upload, run, download).
// n <= 8 runs the GEMV kernel of the weight's type (for Q8_0/Q4_0/Q4_K/Q6_K the one over 8-bit
// activations unless float_activations), 9..64 the tensor-core product (gemm_mma.cu; cuBLAS where
// the GPU or the weight's layout does not take it), larger n cuBLAS. y [n][w.rows]; with
// `accumulate` the product is added to y's values (as the residual products do).
Status matmul_on_device(const WeightTensor& w, const float* x, int64_t n, float* y, bool float_activations = false,
                        bool accumulate = false);
// The FluxBin GEMV's block shape, "WxR" (W warps of R rows sharing one block's tables: 8x2, 16x2,
// 8x4 or 16x4), for the launches after it; FRUGAL_FLUXBIN_GEMV sets it for a whole run, 8x4
// by default. kInvalidArgument names any other string.
Status set_fluxbin_gemv_shape(const std::string& shape);
// Products of Q8_0 and Q4_K weights from this many tokens on (up to 8) run on the tensor-core kernel
// instead of the decode GEMV: 9 by default for every type (never below 9: the GEMV is the faster
// there); FRUGAL_CUDA_MMA_MIN_TOKENS=1..8 sets it for Q8_0 and Q4_K.
int tensor_core_min_tokens(DType weight);
// Whether a product of `weight` at n tokens runs as a decode GEMV on this device and settings.
bool gemv_runs_product(DType weight, int64_t n);
// Bench hook: microseconds per product of `count` (1..3) weights of one n-token input, as the
// tensor-core kernel (gemm_mma.cu) and as cuBLAS per weight, measured in one process. For n <= 8
// there is one path, the one a step takes (the decode GEMV, or the tensor-core kernel where
// gemv_runs_product says so): gemv_us holds its time, and with `fresh_input` false the
// input is converted (rounded or quantized to 8 bits) once, outside the timed graph, as in a step
// where the producer kernel writes the product's input form itself.
struct ProductTiming {
  double mma_us = 0;
  double cublas_us = 0;
  double gemv_us = 0;
  uint64_t weight_bytes = 0;
  bool mma_used = false;  // false: this GPU runs no build of the kernel, both figures are cuBLAS
};
Result<ProductTiming> time_product_on_device(const WeightTensor* const* ws, int count, int64_t n, int reps,
                                             bool fresh_input = true);
// Test hook: the device's greedy token of each of `rows` logits rows (what forward_model writes
// with `greedy`), out [rows].
Status greedy_tokens_on_device(const float* logits, int rows, int64_t n_vocab, int32_t* out);
// Rows ids[i] of w dequantized on the device: y [n][w.cols].
Status get_rows_on_device(const WeightTensor& w, const int32_t* ids, int64_t n, float* y);
// Test hook (gemv_q8.cu): the 8-bit activations the integer GEMV reads, as made on the device from
// x [rows][dim]: op 0 quantizes x, op 1 rms_norm(x) * w (eps) then quantizes, op 2 silu(x) * w
// (w [rows][dim]) then quantizes. k256: Q8_K blocks of 256, else Q8_0 blocks of 32. Returns the
// float values that were quantized (y [rows][dim]) and the device's codes q [rows][dim], scales
// d [rows][dim/32 or dim/256] and sums s [rows][dim/32 or dim/16].
Status quantize_activations_on_device(int op, bool k256, const float* x, const float* w, int rows, int dim, float eps,
                                      float* y, int8_t* q, float* d, int* s);
// Test hook (flash_attention.cu): uploads a cache (k_half/v_half: F16 bits [n_layer][n_seq][n_head_kv][capacity][head_dim],
// kpos [n_layer][n_seq][n_head_kv][capacity], seq_len [n_seq]) and queries, runs launch_attention (which 0),
// launch_attention_flash (1) or launch_attention_split (2, scratch sized from max_keys), or those
// two with one query token per block (4: flash, 3: split), on layer `layer`, and downloads out [n][n_head][head_dim]. kNotSupported when the launcher declined.
Status attention_on_device(int which, const uint16_t* k_half, const uint16_t* v_half, const int32_t* kpos,
                           const int32_t* seq_len, int n_layer, int layer, int n_seq, int n_head_kv, int head_dim,
                           int capacity, const float* q, int n, const int32_t* seq, const int32_t* pos, int n_head,
                           float scale, int window, int max_keys, float* out);
// Bench hook (flash_attention.cu): one sequence of n_ctx cached keys (positions 0..n_ctx-1, layer
// 0), n queries at the last n positions; *ms = mean time of one launcher call (which as above)
// over `reps` back-to-back calls after one warm-up.
Status attention_bench_on_device(int which, int n_head, int n_head_kv, int head_dim, int n_ctx, int n, int reps,
                                 double* ms);


// Device-to-device copy bandwidth (bytes read + written per second) over `bytes`-sized buffers,
// and cuBLAS BF16 GEMM throughput (FLOP/s) at m = n = k = `dim`; median of `reps` timed runs.
struct Roofline {
  double copy_bytes_per_s = 0;
  double bf16_flops = 0;
};
Result<Roofline> measure_roofline(uint64_t bytes, int dim, int reps);

// Diagnostics for a process that ends without a message (run 1 on the H200: status 1, empty
// output). After install_exit_trace(who), exit() (before finish_exit_trace(), when expect_finish)
// and the fatal signals (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) print "who: ..." with the step
// set by set_trace_step, the backend's last traced phase and a backtrace (library+offset per frame)
// on stderr. make_cuda_backend installs it when FRUGAL_CUDA_TRACE=1 (expect_finish false: every exit
// prints); the CUDA tests always do. Nothing happens on a CPU-only path.
void install_exit_trace(const char* who, bool expect_finish = true);
void finish_exit_trace();
void set_trace_step(const char* step);

}  // namespace cuda
}  // namespace frugal
