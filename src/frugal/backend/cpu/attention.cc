// Attention scheduling: consecutive batch tokens of one sequence are grouped into tiles, and each
// (tile, KV head) pair is one work item, so the query heads that share a KV head (GQA) and the
// neighbouring tokens of a prefill read each converted K/V block once.
#include <algorithm>
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
};

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
      if (j.kv->quantized()) {
        // Dequantized inside the work item, into this thread's scratch: the cache itself never
        // exists in full precision, and a KV head is decoded once for all its query heads.
        thread_local std::vector<float> kv_rows;
        const size_t cnt = static_cast<size_t>(t.n_keys) * p.head_dim;
        if (kv_rows.size() < 2 * cnt) kv_rows.resize(2 * cnt);
        j.kv->read_rows(j.layer, s, it.group, kv_rows.data(), kv_rows.data() + cnt);
        t.k = kv_rows.data();
        t.v = kv_rows.data() + cnt;
        t.f16 = false;
      } else {
        t.k = j.kv->keys(j.layer, s, it.group);
        t.v = j.kv->values(j.layer, s, it.group);
      }
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
  const int tile_tokens = std::max(1, kTileRows / n_rep);

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
  AttentionJob j{q, out, &kv, layer, seq, pos, &p, items_.data(), scratch_.data()};
  pool_.dispatch(attention_task, &j, static_cast<int64_t>(items_.size()), 1);
}

}  // namespace frugal::cpu
