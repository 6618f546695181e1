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
};

float dot(const float* a, const float* b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // independent lanes, so the loop vectorizes
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Online-softmax attention of one tile over a quantized head: each block of kAttentionKeyBlock keys
// is dequantized into a small per-thread buffer (it stays in L1) and used at once by every row of
// the tile, so full-precision K/V never exist beyond one block.
void quantized_tile(const AttentionTile& t, const KvCache& kv, int layer, int seq, int head) {
  const int hd = t.head_dim, rows = t.n_tokens * t.n_rep;
  const size_t blk = static_cast<size_t>(kAttentionKeyBlock) * hd;
  thread_local std::vector<float> buf;
  if (buf.size() < 2 * blk + static_cast<size_t>(rows) * (hd + 2 + kAttentionKeyBlock)) {
    buf.resize(2 * blk + static_cast<size_t>(rows) * (hd + 2 + kAttentionKeyBlock));
  }
  float* kb = buf.data();
  float* vb = kb + blk;
  float* acc = vb + blk;                                   // [rows][hd]
  float* m = acc + static_cast<size_t>(rows) * hd;         // [rows] running max
  float* l = m + rows;                                     // [rows] running sum
  float* sc = l + rows;                                    // [rows][block] scores
  std::fill(acc, acc + static_cast<size_t>(rows) * hd, 0.f);
  std::fill(m, m + rows, -std::numeric_limits<float>::infinity());
  std::fill(l, l + rows, 0.f);
  for (int32_t b = 0; b < t.n_keys; b += kAttentionKeyBlock) {
    const int32_t e = std::min(t.n_keys, b + kAttentionKeyBlock);
    kv.read_rows(layer, seq, head, b, e, kb, vb);
    for (int r = 0; r < rows; ++r) {
      const int ti = r / t.n_rep;
      const float* q = t.q + ti * t.token_stride + static_cast<int64_t>(r % t.n_rep) * hd;
      const int32_t qp = t.qpos[ti];
      float* s = sc + static_cast<size_t>(r) * kAttentionKeyBlock;
      float mb = -std::numeric_limits<float>::infinity();
      for (int32_t j = b; j < e; ++j) {
        const int32_t kp = t.kpos[j];
        const bool seen = kp <= qp && !(t.window > 0 && kp <= qp - t.window);
        s[j - b] = seen ? dot(q, kb + static_cast<size_t>(j - b) * hd, hd) * t.scale
                        : -std::numeric_limits<float>::infinity();
        mb = std::max(mb, s[j - b]);
      }
      if (mb == -std::numeric_limits<float>::infinity()) continue;
      const float mn = std::max(m[r], mb);
      const float corr = std::exp(m[r] - mn);
      float* a = acc + static_cast<size_t>(r) * hd;
      if (corr != 1.f) {
        for (int c = 0; c < hd; ++c) a[c] *= corr;
      }
      l[r] *= corr;
      m[r] = mn;
      for (int32_t j = b; j < e; ++j) {
        if (s[j - b] == -std::numeric_limits<float>::infinity()) continue;
        const float w = std::exp(s[j - b] - mn);
        l[r] += w;
        const float* v = vb + static_cast<size_t>(j - b) * hd;
        for (int c = 0; c < hd; ++c) a[c] += w * v[c];
      }
    }
  }
  for (int r = 0; r < rows; ++r) {
    float* o = t.out + (r / t.n_rep) * t.token_stride + static_cast<int64_t>(r % t.n_rep) * hd;
    const float inv = l[r] > 0 ? 1.f / l[r] : 0.f;  // nothing visible: zeros
    for (int c = 0; c < hd; ++c) o[c] = acc[static_cast<size_t>(r) * hd + c] * inv;
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
      if (j.kv->quantized()) {
        quantized_tile(t, *j.kv, j.layer, s, it.group);
        continue;
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
