// SIMD kernels of the CPU backend, written once with Highway and dispatched at run time to the
// best target of this CPU. They work on one thread; cpu_backend.cc splits work across threads.
#pragma once

#include <cstddef>
#include <cstdint>

#include "frugal/attention/tilemix/int8_tile.h"
#include "frugal/kv/kv_view.h"

namespace frugal::cpu {

// Per row of `dim` floats: y = x / sqrt(mean(x^2) + eps) * w. In place allowed.
void rms_norm_rows(const float* x, const float* w, int64_t n_rows, int64_t dim, float eps, float* y);
// out[i] = silu(gate[i]) * up[i]; out may alias gate or up.
void swiglu(const float* gate, const float* up, int64_t n, float* out);
// x[i] += y[i].
void add(float* x, const float* y, int64_t n);
// Sum of a[i] * b[i], accumulated in float vectors.
float dot_f32(const float* a, const float* b, int64_t n);
// XOR of the words p[0, n): a pure streaming read (the memory bandwidth probe).
uint64_t read_xor(const uint64_t* p, int64_t n);
// IEEE binary16 bits to float.
void f16_to_f32(const uint16_t* src, float* dst, int64_t n);

// Rows [r0, r1) of NORM or NEOX rotation for one token: x [n_heads][head_dim], cos/sin [n_rot/2].
void rope_token(float* x, int64_t n_heads, int64_t head_dim, int n_rot, bool neox,
                const float* cos_t, const float* sin_t);

// One unit of attention work: the query heads of one KV group for a few tokens of one sequence,
// against one (layer, sequence, KV head) of the cache. Rows are (token, head) pairs.
struct AttentionTile {
  const float* q = nullptr;  // q of the tile's first token, first head of the group
  float* out = nullptr;      // same layout as q
  int64_t token_stride = 0;  // floats between consecutive tokens of q and out
  int n_tokens = 0;          // tokens in the tile (rows = n_tokens * n_rep)
  int n_rep = 0;             // query heads per KV head
  const int32_t* qpos = nullptr;  // [n_tokens] positions of the tile's tokens
  const void* k = nullptr;        // [n_keys][head_dim] in F16 or F32
  const void* v = nullptr;
  // Paged rows (a KvCache page pool): when `pages` is set, key slot s is at byte
  // (pages[s / page_tokens] * page_tokens + s % page_tokens) * row_bytes of k (v likewise).
  const int32_t* pages = nullptr;
  int32_t page_tokens = 0;
  size_t row_bytes = 0;
  const int32_t* kpos = nullptr;  // [n_keys]
  int32_t n_keys = 0;
  bool f16 = true;
  int head_dim = 0;
  float scale = 1.f;
  int32_t window = 0;
  // For caches stored in another form (quantized): writes keys and values [k0, k0 + nk) of the
  // head as floats ([nk][head_dim] each) into k and v; k and v above are then unused. The block
  // is converted once and shared by every row of the tile, as F16 blocks are.
  void (*load_block)(const void* ctx, int32_t k0, int32_t nk, float* k, float* v) = nullptr;
  const void* load_ctx = nullptr;
  // Sparse prefill: when set, key block b (slots [64b, 64b + 64)) is computed only if
  // key_blocks[b] is nonzero; one byte per block of the head's keys.
  const uint8_t* key_blocks = nullptr;
  // TileMix: when set, key block b's scores are computed from int8 codes when int8_blocks[b] is
  // nonzero: the tile's queries (times scale) are quantized once per tile, the keys' codes come
  // from k8 (the head's keys quantized by slot); the online softmax and P·V are shared with the
  // float blocks. One byte per block of the head's keys.
  const uint8_t* int8_blocks = nullptr;
  tilemix::KeyCodes k8;
};

// Slots [k0, k0 + nk) of a quantized KV head as floats, [nk][head_dim] into k and v: the same
// values as KvCache::read_rows (codes, FP16 residual, FP16 copies of hot slots), converted a
// vector at a time. head_dim must be a multiple of kKvGroup and at most kMaxQuantHeadDim.
inline constexpr int kMaxQuantHeadDim = 512;
void dequant_kv_block(const KvQuantHeadView& h, int head_dim, int32_t k0, int32_t nk, float* k, float* v);

// Keys handled per step of the online softmax.
inline constexpr int kAttentionKeyBlock = 64;

// Floats of per-thread scratch attention_tile needs for tiles of at most `rows` rows.
size_t attention_scratch_floats(int rows, int head_dim);
// `scratch` holds attention_scratch_floats(rows, head_dim) floats, 64-byte aligned.
void attention_tile(const AttentionTile& t, float* scratch);

// Name of the Highway target these kernels run on.
const char* simd_target();

}  // namespace frugal::cpu
