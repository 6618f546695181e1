// Attention scheduling: consecutive batch tokens of one sequence are grouped into tiles, and each
// (tile, KV head) pair is one work item, so the query heads that share a KV head (GQA) and the
// neighbouring tokens of a prefill read each converted K/V block once.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "frugal/backend/cpu/cpu_backend.h"
#include "frugal/backend/cpu/simd_ops.h"
#include "frugal/kv/kv_cache.h"

namespace frugal::cpu {
namespace {

// Query rows (token x head pairs) per tile: enough to amortize the K/V conversion and fill a few
// vectors, few enough that a prefill still yields many items to balance across threads.
constexpr int kTileRows = 32;

struct AttentionJob {
  const float* q;
  float* out;
  const KvCache* kv;
  int layer;
  const int32_t* seq;
  const int32_t* pos;
  const AttentionParams* p;
  const AttentionItem* items;
  const AlignedBuffer* scratch;  // [thread]
  bool row_invariant;            // one-token tiles, each seeing only the keys up to its position
};

// A quantized head read block by block: [k0, k0 + nk) is dequantized with SIMD straight from the
// cache's codes into the tile's float block (it stays in L1), which the online softmax then shares
// across the tile's rows, as it does an F16 block. Head sizes the SIMD loader does not take go
// through read_rows, its reference.
struct QuantHead {
  const KvCache* kv;
  KvCache::QuantHeadView view;
  int layer, seq, head, head_dim;
};

void load_quant_block(const void* ctx, int32_t k0, int32_t nk, float* k, float* v) {
  const auto& h = *static_cast<const QuantHead*>(ctx);
  if (h.head_dim % kKvGroup == 0 && h.head_dim <= kMaxQuantHeadDim) {
    dequant_kv_block(h.view, h.head_dim, k0, nk, k, v);
  } else {
    h.kv->read_rows(h.layer, h.seq, h.head, k0, k0 + nk, k, v);
  }
}

void attention_task(void* ctx, int64_t b, int64_t e, int thread) {
  const AttentionJob& j = *static_cast<const AttentionJob*>(ctx);
  const AttentionParams& p = *j.p;
  const KvCacheOptions& ko = j.kv->options();
  const int n_rep = p.n_head / p.n_head_kv;
  const int64_t token_stride = static_cast<int64_t>(p.n_head) * p.head_dim;
  for (int64_t i = b; i < e; ++i) {
    const AttentionItem& it = j.items[i];
    const int s = j.seq[it.t0];
    AttentionTile t;
    const int64_t off = it.t0 * token_stride + static_cast<int64_t>(it.group) * n_rep * p.head_dim;
    t.q = j.q + off;
    t.out = j.out + off;
    t.token_stride = token_stride;
    t.n_tokens = it.nt;
    t.n_rep = n_rep;
    t.qpos = j.pos + it.t0;
    t.head_dim = p.head_dim;
    t.scale = p.scale;
    t.window = p.window;
    t.f16 = ko.dtype == DType::kF16;
    if (s >= 0 && s < ko.n_seq && j.layer >= 0 && j.layer < ko.n_layer) {
      t.kpos = j.kv->positions(j.layer, s, it.group);
      t.n_keys = j.kv->size(j.layer, s, it.group);
      if (j.row_invariant) {
        // The keys a one-token pass at this position would find (positions are in time order):
        // how a score is summed depends on where its key falls in the last block.
        t.n_keys = static_cast<int32_t>(std::upper_bound(t.kpos, t.kpos + t.n_keys, t.qpos[0]) - t.kpos);
      }
      if (j.kv->quantized()) {
        const QuantHead qh{j.kv, j.kv->quant_view(j.layer, s, it.group), j.layer, s, it.group, p.head_dim};
        t.load_block = load_quant_block;
        t.load_ctx = &qh;
        attention_tile(t, static_cast<float*>(j.scratch[thread].data()));
        continue;
      }
      const KvCache::HeadPages hp = j.kv->head_pages(j.layer, s, it.group);
      t.k = hp.k;
      t.v = hp.v;
      t.pages = hp.pages;
      t.page_tokens = hp.page_tokens;
      t.row_bytes = hp.row_bytes;
    }
    // With no keys (or an invalid sequence) the tile writes zeros.
    attention_tile(t, static_cast<float*>(j.scratch[thread].data()));
  }
}

}  // namespace

void CpuBackend::attention(const float* q, const KvCache& kv, int layer, const int32_t* seq,
                           const int32_t* pos, int64_t n, const AttentionParams& p, float* out) {
  if (n <= 0 || p.n_head <= 0 || p.n_head_kv <= 0 || p.head_dim <= 0) return;
  if (p.n_head % p.n_head_kv != 0 || kv.options().head_dim != p.head_dim ||
      kv.options().n_head_kv != p.n_head_kv) {
    std::fill(out, out + n * p.n_head * p.head_dim, 0.f);  // shapes disagree with the cache
    return;
  }
  const int n_rep = p.n_head / p.n_head_kv;
  // Row-invariant passes give every token a tile of its own, as a one-token pass does: a tile's
  // rows share its key blocks, and which blocks it visits depends on all of its rows.
  const int tile_tokens = row_invariant_ ? 1 : std::max(1, kTileRows / n_rep);

  items_.clear();
  for (int64_t t = 0; t < n;) {
    int64_t e = t + 1;
    while (e < n && e - t < tile_tokens && seq[e] == seq[t]) ++e;
    for (int g = 0; g < p.n_head_kv; ++g) {
      items_.push_back({static_cast<int32_t>(t), static_cast<int32_t>(e - t), g});
    }
    t = e;
  }

  ensure_thread_scratch(attention_scratch_floats(tile_tokens * n_rep, p.head_dim) * sizeof(float));
  AttentionJob j{q, out, &kv, layer, seq, pos, &p, items_.data(), scratch_.data(), row_invariant_};
  pool_.dispatch(attention_task, &j, static_cast<int64_t>(items_.size()), 1);
}

}  // namespace frugal::cpu
