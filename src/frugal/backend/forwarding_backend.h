// A Backend that hands every operation to another one: the base of wrappers that change a single
// operation (a quantized product, statistics of the products' inputs) and leave the rest alone.
#pragma once

#include <string>

#include "frugal/backend/backend.h"

namespace frugal {

class ForwardingBackend : public Backend {
 public:
  std::string name() const override { return inner_.name(); }
  int n_threads() const override { return inner_.n_threads(); }
  uint64_t contended_dispatches() const override { return inner_.contended_dispatches(); }
  Status set_prefill_sparse(const sparse::PrefillSparseOptions& o) override { return inner_.set_prefill_sparse(o); }
  sparse::PrefillSparseStats prefill_sparse_stats() const override { return inner_.prefill_sparse_stats(); }
  Status set_tilemix(const tilemix::TileMixOptions& o) override { return inner_.set_tilemix(o); }
  tilemix::TileMixStats tilemix_stats() const override { return inner_.tilemix_stats(); }
  void matmul(const WeightTensor& w, const float* x, int64_t n, float* y, const float* bias) override {
    inner_.matmul(w, x, n, y, bias);
  }
  void get_rows(const WeightTensor& w, const int32_t* ids, int64_t n, float* y) override {
    inner_.get_rows(w, ids, n, y);
  }
  void rms_norm(const float* x, const float* weight, int64_t n_rows, int64_t dim, float eps, float* y) override {
    inner_.rms_norm(x, weight, n_rows, dim, eps, y);
  }
  void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos,
            const RopeParams& p) override {
    inner_.rope(x, n_tokens, n_heads, head_dim, pos, p);
  }
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override { inner_.swiglu(gate, up, n, out); }
  void add(float* x, const float* y, int64_t n) override { inner_.add(x, y, n); }
  void attention(const float* q, const KvView& kv, int layer, const int32_t* seq, const int32_t* pos, int64_t n,
                 const AttentionParams& p, float* out) override {
    inner_.attention(q, kv, layer, seq, pos, n, p, out);
  }

 protected:
  explicit ForwardingBackend(Backend& inner) : inner_(inner) {}
  Backend& inner_;
};

}  // namespace frugal
