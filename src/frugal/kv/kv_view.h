// What attention reads of a KV cache, without the cache: its options, and per (layer, sequence,
// KV head) the tokens' positions and where their rows are stored (pages of F16/F32 rows, or a
// quantized head's codes and FP16 rows). kv/kv_cache.h implements KvView; backends take a
// `const KvView&`, so they need neither the cache type nor its bookkeeping.
#pragma once

#include <cstddef>
#include <cstdint>

#include "frugal/core/dtype.h"
#include "frugal/kv/kv_quant.h"

namespace frugal {

using PageId = int32_t;  // as kv/page_pool.h (this header stays C++17 for the CUDA sources)

struct KvCacheOptions {
  int n_layer = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int n_seq = 1;        // sequences that can be live at once (slot ids 0..n_seq-1)
  int capacity = 0;     // most tokens per (layer, sequence, head)
  // Unquantized caches: rows of one (layer, KV head) per page, and pages in the pool (0: enough for
  // every sequence to reach `capacity` in every head, the reservation of a cache without a pool).
  int32_t page_tokens = 32;
  int64_t n_pages = 0;
  DType dtype = DType::kF16;  // kF16 (as llama.cpp) or kF32; unused when quantized
  KvQuant quant = KvQuant::kNone;
  int residual = 0;           // FP16 rows per head for not yet quantized tokens; 0: 2 * kKvGroup
                              // (hyquant: 2 * kKvGroup + 512, room for one prefill chunk)
  float hot_ratio = 0.05f;    // hyquant: share of a head's quantized tokens kept in FP16
};

// Where an unquantized head's rows are: slot s at k + (pages[s / page_tokens] * page_tokens +
// s % page_tokens) * row_bytes (v likewise), in options().dtype.
struct KvHeadPages {
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;
  const PageId* pages = nullptr;
  int32_t page_tokens = 0;
  size_t row_bytes = 0;
  int32_t size = 0;
  size_t row_offset(int32_t slot) const {
    return (static_cast<size_t>(pages[slot / page_tokens]) * page_tokens + slot % page_tokens) * row_bytes;
  }
};

// The storage of one quantized head as it is, for kernels that dequantize it themselves (the CPU
// attention); KvCache::read_rows() is their reference. Slots [0, cold) hold codes, [cold, size) FP16 rows;
// a hot slot (< cold) also has an FP16 copy, which read_rows() returns instead of its codes.
struct KvQuantHeadView {
  int bits = 0;
  int code_bytes = 0;                    // bytes of one row of codes
  int32_t size = 0;
  int32_t cold = 0;
  const uint8_t* k_codes = nullptr;      // slot t at t * code_bytes
  const uint16_t* k_params = nullptr;    // key group g at g * head_dim * 2: (step, min) per channel
  const uint8_t* v_codes = nullptr;      // slot t at t * code_bytes
  const uint16_t* v_params = nullptr;    // slot t at t * (head_dim / kKvGroup) * 2: (step, min) per group
  // hbq (kv_quant.h): k_params and v_params hold slot t at t * hbq_words, per token.
  int hbq_words = 0;
  const uint16_t* k_residual = nullptr;  // slot t >= cold at (t - cold) * head_dim
  const uint16_t* v_residual = nullptr;
  int32_t hot_n = 0;
  const int32_t* hot_slot = nullptr;     // [hot_n]
  const uint16_t* hot_k = nullptr;       // row r at r * head_dim
  const uint16_t* hot_v = nullptr;
};

class KvView {
 public:
  virtual const KvCacheOptions& options() const = 0;
  bool quantized() const { return options().quant != KvQuant::kNone; }
  // Tokens held by one head, and their positions in time order.
  virtual int32_t size(int layer, int seq, int head) const = 0;
  virtual const int32_t* positions(int layer, int seq, int head) const = 0;
  // Where an unquantized head's rows are (empty for a quantized cache).
  virtual KvHeadPages head_pages(int layer, int seq, int head) const = 0;
  // A quantized head's storage (empty for an unquantized cache).
  virtual KvQuantHeadView quant_view(int layer, int seq, int head) const = 0;
  // Every row of one head as floats, [size][head_dim] each (either pointer may be null), or, for a
  // quantized cache, rows [begin, end) only: the reference the kernels reading head_pages() and
  // quant_view() agree with.
  virtual void read_rows(int layer, int seq, int head, float* k, float* v) const = 0;
  virtual void read_rows(int layer, int seq, int head, int32_t begin, int32_t end, float* k, float* v) const = 0;

 protected:
  ~KvView() = default;
};

}  // namespace frugal
