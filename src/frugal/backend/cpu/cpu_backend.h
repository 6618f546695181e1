// The CPU backend: ops of backend.h on host memory, parallelized over a persistent thread pool.
// Internal header: the rest of frugal reaches it through make_cpu_backend().
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "frugal/attention/tilemix/router.h"
#include "frugal/backend/backend.h"
#include "frugal/core/thread_pool.h"

namespace frugal {
struct TypeTraits;

namespace cpu {

// A 64-byte aligned byte buffer that only grows, so steady-state calls never allocate.
class AlignedBuffer {
 public:
  void* ensure(size_t bytes);
  void* data() const { return p_.get(); }

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> p_;
  size_t size_ = 0;
};

// One attention work item: tokens [t0, t0 + nt) of one sequence against KV head `group`.
struct AttentionItem {
  int32_t t0;
  int32_t nt;
  int32_t group;
  int64_t mask = -1;  // sparse prefill: byte offset of the tile's key-block row in the masks; -1: dense
  int64_t route = -1; // TileMix: byte offset of the tile's key-block row in the routes; -1: float
  int32_t mix = -1;   // TileMix: the chunk head's index in the backend's TileMixHead list
};

// TileMix of one KV head of one prefill chunk: its keys' int8 codes and its tiles' routes.
struct TileMixHead {
  int32_t t0;        // first batch token of the chunk
  int32_t nt;        // its tokens
  int32_t seq;
  int32_t group;
  int32_t n_k;       // keys of the sequence (slot j at position j)
  int64_t key_off;   // floats into the key buffer; int8 codes at the same index into the codes
  int64_t scale_off; // into the per-key scales and code sums
  int64_t route_off; // bytes into the routes
  sparse::BlockMask shape;
  int64_t sparse_off;  // bytes into the sparse masks of the same chunk head; -1: none
  int64_t tiles;       // candidate tiles, and those routed to INT8
  int64_t int8;
};

// Sparse prefill of one KV head of one prefill chunk: where its keys (read back as floats) and its
// block mask live.
struct SparseHead {
  int32_t t0;       // first batch token of the chunk
  int32_t nt;       // its tokens
  int32_t seq;
  int32_t group;
  int32_t n_k;      // keys of the sequence (slot j at position j)
  int64_t key_off;  // floats into the key buffer
  int64_t mask_off; // bytes into the masks
  sparse::BlockMask shape;
  int64_t kept;     // blocks selected
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int n_threads);

  std::string name() const override { return "cpu"; }
  int n_threads() const override { return pool_.size(); }
  uint64_t contended_dispatches() const override { return pool_.contended_dispatches(); }

  void set_row_invariant(bool on) override { row_invariant_ = on; }
  Status set_prefill_sparse(const sparse::PrefillSparseOptions& o) override;
  sparse::PrefillSparseStats prefill_sparse_stats() const override { return sparse_stats_; }
  Status set_tilemix(const tilemix::TileMixOptions& o) override;
  tilemix::TileMixStats tilemix_stats() const override { return tilemix_stats_; }
  void matmul(const WeightTensor& w, const float* x, int64_t n, float* y, const float* bias) override;
  void get_rows(const WeightTensor& w, const int32_t* ids, int64_t n, float* y) override;
  void rms_norm(const float* x, const float* weight, int64_t n_rows, int64_t dim, float eps,
                float* y) override;
  void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos,
            const RopeParams& p) override;
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override;
  void add(float* x, const float* y, int64_t n) override;
  void attention(const float* q, const KvView& kv, int layer, const int32_t* seq, const int32_t* pos,
                 int64_t n, const AttentionParams& p, float* out) override;

 private:
  // Per-thread scratch of at least `bytes`, grown on the calling thread before a dispatch.
  void ensure_thread_scratch(size_t bytes);
  float* thread_scratch(int thread) const { return static_cast<float*>(scratch_[thread].data()); }
  // matmul of F32/F16/BF16 weights with a batch, through the packed F32 kernel.
  void matmul_float(const WeightTensor& w, const TypeTraits* tt, const float* x, int64_t n, float* y,
                    const float* bias);
  // matmul of a batch whose every row equals the one-token product (set_row_invariant).
  void matmul_row_invariant(const WeightTensor& w, const float* x, int64_t n, float* y, const float* bias);
  // Q4_0 (either layout) and Q8_0 prefill through the int8 VNNI panels (quant/simd_q4_0_gemm.cc).
  void matmul_int8_panels(const WeightTensor& w, const float* x, int64_t n, float* y, const float* bias);
  // matmul of Q4_0 weights in the 8-row group layout.
  void matmul_q4_0x8(const WeightTensor& w, const float* x, int64_t n, float* y, const float* bias);
  // matmul through to_float + float dots, for types without a dot kernel.
  void matmul_dequant(const WeightTensor& w, const TypeTraits* tt, const float* x, int64_t n, float* y,
                      const float* bias);

  ThreadPool pool_;
  std::vector<AlignedBuffer> scratch_;  // [thread]
  size_t scratch_bytes_ = 0;
  AlignedBuffer act_;                   // activations converted to the weight's vec_dot_type
  bool row_invariant_ = false;          // set_row_invariant()
  std::vector<AttentionItem> items_;
  // Sparse prefill: chooses the key blocks of prefill chunks (null: none, the dense path).
  void select_sparse_blocks(const float* q, const KvView& kv, int layer, const int32_t* seq, const int32_t* pos,
                            int64_t n, const AttentionParams& p);
  std::unique_ptr<sparse::PrefillSparsity> sparse_;
  sparse::PrefillSparseOptions sparse_opts_;
  sparse::PrefillSparseStats sparse_stats_;
  std::vector<SparseHead> sparse_heads_;
  std::vector<sparse::Scratch> sparse_scratch_;  // [thread]
  std::vector<float> sparse_keys_;  // the chunks' keys as floats, [n_k][head_dim] per SparseHead
  std::vector<uint8_t> sparse_masks_;
  // TileMix: routes prefill chunks' tiles to INT8 or float (null: off, every tile float).
  void route_tilemix(const float* q, const KvView& kv, int layer, const int32_t* seq, const int32_t* pos,
                     int64_t n, const AttentionParams& p);
  std::unique_ptr<tilemix::TileRouter> tilemix_;
  tilemix::TileMixOptions tilemix_opts_;
  tilemix::TileMixStats tilemix_stats_;
  std::vector<TileMixHead> tilemix_heads_;
  std::vector<tilemix::RouteScratch> tilemix_scratch_;  // [thread]
  std::vector<float> tilemix_keys_;     // the chunks' keys as floats, [n_k][head_dim] per head
  std::vector<int8_t> tilemix_codes_;   // and as int8 codes
  std::vector<float> tilemix_scales_;   // [n_k] per head
  std::vector<int32_t> tilemix_sums_;   // [n_k] per head
  std::vector<uint8_t> tilemix_routes_;
};

}  // namespace cpu
}  // namespace frugal
