// Which tensors are quantized and to which type: llama-quantize's rules (llama.cpp build 4748),
// written from its documented behaviour and the types its files contain, so a frugal Q4_K_M file
// has the same per-tensor types as llama-quantize's.
//
// The rules depend on the order tensors are visited (attn_v and ffn_down are counted, and a
// counter picks the layers that get more bits), so callers visit tensors in llama-quantize's
// order: by layer number ("blk.N."; tensors outside a layer first), then by name
// (tensor_order_less).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "frugal/core/dtype.h"
#include "frugal/quantize/target.h"

namespace frugal::quantize {

// The hyperparameters the rules read.
struct ModelShape {
  std::string arch;        // general.architecture
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  bool has_output = true;  // an output.weight tensor (else token_embd.weight is also the output)
  int n_attention_wv = 0;  // attn_v.weight / attn_qkv.weight tensors (one per attention layer)
  int n_gqa() const { return n_head_kv > 0 ? n_head / n_head_kv : 0; }
};

struct MixOptions {
  bool pure = false;         // --pure: every quantized tensor gets the base type
  bool has_imatrix = false;  // some rules differ when an importance matrix is given
  std::optional<DType> output_type;      // --output-tensor-type
  std::optional<DType> token_embd_type;  // --token-embedding-type
};

// Whether llama-quantize quantizes a tensor at all: 2-D (or 3-D) weights, not norms, not the MoE
// router, nor the few small tensors of other architectures it leaves alone.
bool is_quantizable(std::string_view name, int n_dims);

// llama-quantize's visiting order.
bool tensor_order_less(std::string_view a, std::string_view b);

struct TypeChoice {
  DType type;
  bool fallback = false;  // the rule's type did not divide the row length; a compatible one was used
};

class MixRules {
 public:
  MixRules(const Target& target, const ModelShape& shape, const MixOptions& opts);
  // The type of quantizable tensor `name` with rows of `cols` elements. Call once per tensor, in
  // tensor_order_less order (counters advance).
  TypeChoice choose(std::string_view name, int64_t cols);

 private:
  DType rule_type(std::string_view name, int64_t cols);
  Target target_;
  ModelShape shape_;
  MixOptions opts_;
  int i_attention_wv_ = 0;
  int i_ffn_down_ = 0;
};

}  // namespace frugal::quantize
