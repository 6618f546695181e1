// The work of a forward pass in bytes and FLOPs, for the per-request record and the energy
// estimate (telemetry/estimate.h). A pass reads every weight matrix once whatever the number of
// tokens in it (the output matrix: the embedding table when tied); each sequence's chunk of tokens
// [begin, end) reads the K and V rows it may attend to once (the sliding window's when the model
// has one) and does 2 FLOPs per weight per token plus 4 x head_dim per (head, visible key) for
// QK^T and PV. Norms, RoPE and softmax are left out.
#pragma once

#include <algorithm>
#include <cstdint>

#include "frugal/kv/kv_quant.h"
#include "frugal/model/model.h"
#include "frugal/telemetry/estimate.h"

namespace frugal {

struct ModelWork {
  double weight_bytes_per_pass = 0;
  double flops_per_token = 0;          // 2 x weights of the matrices
  double kv_bytes_per_position = 0;    // K and V of every layer and KV head
  double attn_flops_per_key = 0;       // 4 x n_layer x n_head x head_dim
  int32_t window = 0;                  // sliding window (0: none)

  // The work of one sequence's chunk [begin, end) in a pass; `share` of the pass's weight reads
  // (the chunk's fraction of the pass's tokens).
  telemetry::Work chunk(int32_t begin, int32_t end, double share) const {
    telemetry::Work w;
    const int64_t n = end - begin;
    if (n <= 0) return w;
    w.weight_bytes = weight_bytes_per_pass * share;
    const int64_t lo = window > 0 ? std::max<int64_t>(0, static_cast<int64_t>(begin) - window + 1) : 0;
    w.kv_bytes = kv_bytes_per_position * static_cast<double>(end - lo);
    // Keys visible to the query at position p: min(p + 1, window).
    double keys = 0;
    if (window <= 0) {
      keys = static_cast<double>(n) * (static_cast<double>(begin) + static_cast<double>(end) + 1) / 2;
    } else {
      for (int64_t p = begin; p < end; ++p) keys += static_cast<double>(std::min<int64_t>(p + 1, window));
    }
    w.flops = flops_per_token * static_cast<double>(n) + attn_flops_per_key * keys;
    return w;
  }
};

inline ModelWork model_work(const Model& m, DType kv_dtype, KvQuant quant = KvQuant::kNone) {
  ModelWork mw;
  const ModelWeights& w = m.weights();
  const auto bytes = [](const WeightTensor& t) { return static_cast<double>(t.rows) * static_cast<double>(t.row_stride); };
  const auto params = [](const WeightTensor& t) { return static_cast<double>(t.rows) * static_cast<double>(t.cols); };
  mw.weight_bytes_per_pass = bytes(w.output);
  mw.flops_per_token = 2 * params(w.output);
  for (const LayerWeights& l : w.layers) {
    for (const WeightTensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      mw.weight_bytes_per_pass += bytes(*t);
      mw.flops_per_token += 2 * params(*t);
    }
  }
  const ModelConfig& c = m.config();
  const double hd = static_cast<double>(c.head_dim);
  const int bits = kv_quant_bits(quant);
  // Unquantized: head_dim values of 2 or 4 bytes for K and for V; quantized: the codes plus an
  // FP16 (step, min) pair per group of kKvGroup.
  const double per_head = bits == 0 ? 2 * hd * (kv_dtype == DType::kF32 ? 4.0 : 2.0)
                                    : 2 * (hd * bits / 8 + hd / kKvGroup * 4);
  mw.kv_bytes_per_position = static_cast<double>(c.n_layer * c.n_head_kv) * per_head;
  mw.attn_flops_per_key = 4.0 * static_cast<double>(c.n_layer * c.n_head) * hd;
  mw.window = c.sliding_window;
  return mw;
}

}  // namespace frugal
