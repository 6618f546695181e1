// The op set a transformer forward pass needs. The model is written once against this interface;
// each backend (cpu/, later cuda/) implements it. Pointers are in the backend's own memory
// (host memory for the CPU backend). All activations are F32, row-major.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "frugal/attention/sparse/prefill_sparsity.h"
#include "frugal/attention/tilemix/tilemix.h"
#include "frugal/core/attention_params.h"
#include "frugal/core/dtype.h"
#include "frugal/core/status.h"
#include "frugal/kv/kv_view.h"

namespace frugal {

class KvTokenStore;
class Model;
struct Batch;

// How a weight's bytes are arranged. kRows is GGUF's; the others are repacked once at load for
// the CPU kernels (backend/cpu/repack.h) and read only by the CPU backend.
enum class WeightLayout : uint8_t {
  kRows = 0,
  kQ4_0x8 = 1,  // Q4_0 in groups of 8 rows (quant::fast::BlockQ4_0x8); rows % 8 == 0
};

// The column scales and salient columns of a kFLUXBIN weight (quant/fluxbin.h), shared by all rows:
// `cols` F16 values per basis, and with salient > 0 the salient column indices and per-row values.
struct FluxBinParts {
  const uint16_t* col_scales = nullptr;
  const uint8_t* salient_idx = nullptr;
  const uint8_t* salient_vals = nullptr;
  int salient = 0;
};

// A 2-D weight matrix as stored in GGUF: `rows` rows of `cols` contiguous elements in `type`
// (GGUF dims = [cols, rows]). For the CPU backend `data` points into the mmap'd file.
struct WeightTensor {
  DType type = DType::kF32;
  int64_t cols = 0;
  int64_t rows = 0;
  size_t row_stride = 0;  // bytes between rows (kRows); bytes per row on average otherwise
  const void* data = nullptr;
  WeightLayout layout = WeightLayout::kRows;
  // Every product with this matrix is multiplied by `scale` (before any bias): the per-tensor
  // FP32 global scale of NVFP4, stored in the file as the companion tensor `<name>.scale`
  // (model/architecture.cc). 1 for every other weight.
  float scale = 1.f;
  // FluxBin's per-tensor parts (quant/fluxbin.h), bound from the companion tensors; unused otherwise.
  FluxBinParts fluxbin;
};

struct RopeParams {
  int n_rot = 0;            // rotated dims per head (<= head_dim)
  float freq_base = 10000.f;
  float freq_scale = 1.f;   // linear scaling: angle *= freq_scale
  bool neox = false;        // NEOX pairs (i, i + n_rot/2) instead of NORM pairs (2i, 2i+1)
  const float* freq_factors = nullptr;  // [n_rot/2] or nullptr (llama-3 rope_freqs): angle /= f
};

// A backend is driven by one thread at a time: its kernels share scratch buffers and a pool.
// The post-RoPE queries of chosen rows of a batch, taken by a backend that runs the pass whole
// (forward_model) for the attention observers (kv/attention_observer.h) of the scored eviction
// policies: rows[0 .. m) are batch indices. With ring_rows == 0 they are copied to the host, out
// [n_layer][m][n_head * head_dim]. With ring_rows > 0 (only where keeps_queries() said so) they
// stay on the device, in a ring per sequence of at least ring_rows rows indexed by position: row i
// (sequence seq[i], position pos[i]) replaces the query at the same position modulo the ring, in
// every layer, and the store's round statistics read them there (KvTokenStore::round_stats with
// RoundStatsRequest::queries null); out is unused.
struct QueryCapture {
  const int32_t* rows = nullptr;
  int64_t m = 0;
  float* out = nullptr;
  int32_t ring_rows = 0;
  const int32_t* seq = nullptr;  // [m], with ring_rows > 0
  const int32_t* pos = nullptr;  // [m], with ring_rows > 0
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual int n_threads() const = 0;
  // Times a second thread used this backend while another was inside it (it was made to wait).
  // Non-zero means two callers share a backend that each should have of their own.
  virtual uint64_t contended_dispatches() const { return 0; }

  // y[t][r] = sum_k x[t][k] * W[r][k] (+ bias[r]); x [n][w.cols], y [n][w.rows].
  // While on, every row of a multi-token product is computed exactly as the same row alone would
  // be (n = 1), bit for bit, so a pass over several tokens of a sequence gives each the logits of
  // one-token decoding: speculative verification is then exactly plain greedy decoding. Set by
  // Model::forward from Batch::row_invariant. A backend whose kernels are row-invariant anyway
  // ignores it.
  virtual void set_row_invariant(bool on) { (void)on; }
  // Sparse prefill (attention/sparse/prefill_sparsity.h): from now on, attention over a prefill
  // chunk computes only the key blocks the method selects. The default backend has no block-sparse
  // kernel and refuses every method but none.
  virtual Status set_prefill_sparse(const sparse::PrefillSparseOptions& o) {
    if (o.method == sparse::Method::kNone) return ok_status();
    return error(ErrorCode::kNotSupported, "--prefill-sparse {}: the {} backend has no block-sparse attention",
                 sparse::method_name(o.method), name());
  }
  // What sparse prefill did since the backend was made (zeros without it).
  virtual sparse::PrefillSparseStats prefill_sparse_stats() const { return {}; }
  // TileMix (attention/tilemix/tilemix.h): from now on, the given fraction of each prefill
  // chunk's score tiles is computed in INT8. The default backend has no mixed-precision kernel and
  // refuses every fraction but 0.
  virtual Status set_tilemix(const tilemix::TileMixOptions& o) {
    if (!o.enabled()) return ok_status();
    return error(ErrorCode::kNotSupported, "--tilemix-int8 {}: the {} backend has no mixed-precision attention",
                 o.int8_fraction, name());
  }
  // What TileMix did since the backend was made (zeros without it).
  virtual tilemix::TileMixStats tilemix_stats() const { return {}; }
  virtual void matmul(const WeightTensor& w, const float* x, int64_t n, float* y,
                      const float* bias = nullptr) = 0;
  // y[i][:] = W[ids[i]][:] as floats; y [n][w.cols].
  virtual void get_rows(const WeightTensor& w, const int32_t* ids, int64_t n, float* y) = 0;
  // Per row of `dim` floats: y = x / sqrt(mean(x^2) + eps) * weight. In place allowed.
  virtual void rms_norm(const float* x, const float* weight, int64_t n_rows, int64_t dim,
                        float eps, float* y) = 0;
  // In place on x [n_tokens][n_heads][head_dim]; token t at position pos[t].
  virtual void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                    const int32_t* pos, const RopeParams& p) = 0;
  // out[i] = silu(gate[i]) * up[i].
  virtual void swiglu(const float* gate, const float* up, int64_t n, float* out) = 0;
  // x[i] += y[i].
  virtual void add(float* x, const float* y, int64_t n) = 0;
  // Causal attention of each query token over the KV cache of its sequence (read through its
  // view: the cache itself stays the caller's):
  // q [n][n_head][head_dim]; token t belongs to seq[t] at position pos[t] and sees cached tokens
  // with position <= pos[t] (and > pos[t] - window when window > 0). out [n][n_head][head_dim].
  virtual void attention(const float* q, const KvView& kv, int layer, const int32_t* seq,
                         const int32_t* pos, int64_t n, const AttentionParams& p, float* out) = 0;

  // A backend that keeps weights, activations and its own KV cache in device memory (cuda) runs
  // the whole forward pass itself and returns true after writing the logits; Model::forward then
  // skips its op-by-op path. With `greedy` given it writes instead, per logit row, the greedy token
  // (core/greedy_token.h) and no logits (`logits` may then be null): a greedy step of
  // many sequences moves n_logits ids off the device rather than n_logits x n_vocab floats. With
  // `queries` it also copies those rows' queries of every layer there. The default declines.
  virtual Result<bool> forward_model(const Model& model, const Batch& batch, const KvView& kv, float* logits,
                                     int32_t* greedy, const QueryCapture* queries) {
    (void)model, (void)batch, (void)kv, (void)logits, (void)greedy, (void)queries;
    return false;
  }
  // Whether forward_model can keep captured queries of a model of these heads in rings of
  // `ring_rows` rows per sequence on the device (QueryCapture::ring_rows) and compute the rounds'
  // statistics from there: then no query crosses to the host.
  virtual bool keeps_queries(int n_head, int n_head_kv, int32_t ring_rows) const {
    (void)n_head, (void)n_head_kv, (void)ring_rows;
    return false;
  }

  // Prefix sharing for a backend that keeps its own KV cache (forward_model): copies the rows of
  // positions [begin, end) of sequence `src` into sequence `dst`, which holds exactly the rows of
  // positions [0, begin) of the same prefix, and returns true. The default declines (false): the
  // rows live in the caller's KvCache, which the caller copies itself.
  virtual Result<bool> copy_kv_rows(int src, int dst, int32_t begin, int32_t end) { return false; }

  // A backend that keeps its own KV cache (forward_model) exposes its token tables here, so the
  // engine's eviction rounds (kv/eviction.h) read and thin the rows where they live; the cache is
  // made ready for `model` and a caller cache of `shape` first (the model uploaded, the slots
  // allocated), as the first forward_model would. Null (the default): the rows are in the
  // caller's KvCache.
  virtual Result<KvTokenStore*> device_kv(const Model& model, const KvCacheOptions& shape) {
    (void)model, (void)shape;
    return static_cast<KvTokenStore*>(nullptr);
  }
};

struct CpuBackendOptions {
  int n_threads = 0;  // 0: all cores
};
std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& opts);

// The CPU's memory roofline: the best rate at which `n_threads` threads (0: all cores) read a
// buffer far larger than the caches, with vector loads, over `passes` passes. Decode reads every
// weight once per token, so weight bytes per token x tokens/s can at most reach this rate.
struct CpuBandwidthOptions {
  size_t bytes = size_t{256} << 20;  // buffer size (rounded down to whole MiB; at least 1 MiB)
  int passes = 5;
};
struct CpuBandwidth {
  double read_bytes_per_s = 0;
  int threads = 0;
  size_t bytes = 0;
  int passes = 0;
};
Result<CpuBandwidth> measure_cpu_read_bandwidth(int n_threads, const CpuBandwidthOptions& opts = {});

}  // namespace frugal
