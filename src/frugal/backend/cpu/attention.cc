// Attention scheduling: consecutive batch tokens of one sequence are grouped into tiles, and each
// (tile, KV head) pair is one work item, so the query heads that share a KV head (GQA) and the
// neighbouring tokens of a prefill read each converted K/V block once.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <vector>

#include "frugal/attention/tilemix/int8_tile.h"
#include "frugal/backend/cpu/cpu_backend.h"
#include "frugal/backend/cpu/simd_ops.h"
#include "frugal/kv/kv_view.h"

namespace frugal::cpu {
namespace {

// Query rows (token x head pairs) per tile: enough to amortize the K/V conversion and fill a few
// vectors, few enough that a prefill still yields many items to balance across threads.
constexpr int kTileRows = 32;

// A mask's key block is the kernel's block of keys.
static_assert(sparse::kSparseBlock == kAttentionKeyBlock);

struct AttentionJob {
  const float* q;
  float* out;
  const KvView* kv;
  int layer;
  const int32_t* seq;
  const int32_t* pos;
  const AttentionParams* p;
  const AttentionItem* items;
  const AlignedBuffer* scratch;  // [thread]
  bool row_invariant;            // one-token tiles, each seeing only the keys up to its position
  const uint8_t* masks;          // sparse prefill's key-block rows (AttentionItem::mask)
  // TileMix (AttentionItem::route, ::mix)
  const uint8_t* routes;
  const TileMixHead* mix_heads;
  const int8_t* codes;
  const float* scales;
  const int32_t* sums;
};

struct TileMixJob {
  const float* q;
  const KvView* kv;
  int layer;
  const AttentionParams* p;
  const int32_t* pos;
  const tilemix::TileRouter* router;
  double fraction;
  TileMixHead* heads;
  float* keys;
  int8_t* codes;
  float* scales;
  int32_t* sums;
  uint8_t* routes;
  const uint8_t* sparse_masks;
  tilemix::RouteScratch* scratch;  // [thread]
};

// Reads one (chunk, KV head)'s keys back as floats, quantizes them to int8 codes and routes its tiles.
void tilemix_route_task(void* ctx, int64_t b, int64_t e, int thread) {
  const TileMixJob& j = *static_cast<const TileMixJob*>(ctx);
  const AttentionParams& p = *j.p;
  const int n_rep = p.n_head / p.n_head_kv;
  const int64_t token_stride = static_cast<int64_t>(p.n_head) * p.head_dim;
  for (int64_t i = b; i < e; ++i) {
    TileMixHead& h = j.heads[i];
    float* k = j.keys + h.key_off;
    j.kv->read_rows(j.layer, h.seq, h.group, k, nullptr);  // every row: n_k of them (checked by the caller)
    tilemix::quantize_keys(k, h.n_k, p.head_dim, j.codes + h.key_off, j.scales + h.scale_off, j.sums + h.scale_off);
    sparse::HeadInput in;
    in.q = j.q + h.t0 * token_stride + static_cast<int64_t>(h.group) * n_rep * p.head_dim;
    in.token_stride = token_stride;
    in.n_rep = n_rep;
    in.n_q = h.nt;
    in.q_pos0 = j.pos[h.t0];
    in.k = k;
    in.n_k = h.n_k;
    in.head_dim = p.head_dim;
    in.scale = p.scale;
    const uint8_t* keep = h.sparse_off >= 0 ? j.sparse_masks + h.sparse_off : nullptr;
    h.int8 = tilemix::route_tiles(*j.router, in, h.shape, keep, j.fraction, j.scratch[thread], j.routes + h.route_off,
                                  &h.tiles);
  }
}

struct SparseSelectJob {
  const float* q;
  const KvView* kv;
  int layer;
  const AttentionParams* p;
  const int32_t* pos;
  const sparse::PrefillSparsity* method;
  SparseHead* heads;
  float* keys;
  uint8_t* masks;
  sparse::Scratch* scratch;  // [thread]
};

// Reads one (chunk, KV head)'s keys back as floats and lets the method choose its blocks.
void sparse_select_task(void* ctx, int64_t b, int64_t e, int thread) {
  const SparseSelectJob& j = *static_cast<const SparseSelectJob*>(ctx);
  const AttentionParams& p = *j.p;
  const int n_rep = p.n_head / p.n_head_kv;
  const int64_t token_stride = static_cast<int64_t>(p.n_head) * p.head_dim;
  for (int64_t i = b; i < e; ++i) {
    SparseHead& h = j.heads[i];
    float* k = j.keys + h.key_off;
    j.kv->read_rows(j.layer, h.seq, h.group, k, nullptr);  // every row: n_k of them (checked by the caller)
    sparse::HeadInput in;
    in.q = j.q + h.t0 * token_stride + static_cast<int64_t>(h.group) * n_rep * p.head_dim;
    in.token_stride = token_stride;
    in.n_rep = n_rep;
    in.n_q = h.nt;
    in.q_pos0 = j.pos[h.t0];
    in.k = k;
    in.n_k = h.n_k;
    in.head_dim = p.head_dim;
    in.scale = p.scale;
    sparse::BlockMask m = h.shape;
    m.bits = j.masks + h.mask_off;
    h.kept = sparse::select_blocks(*j.method, in, j.scratch[thread], m);
  }
}

// A quantized head read block by block: [k0, k0 + nk) is dequantized with SIMD straight from the
// cache's codes into the tile's float block (it stays in L1), which the online softmax then shares
// across the tile's rows, as it does an F16 block. Head sizes the SIMD loader does not take go
// through read_rows, its reference.
struct QuantHead {
  const KvView* kv;
  KvQuantHeadView view;
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
    if (it.mask >= 0) t.key_blocks = j.masks + it.mask;
    if (it.route >= 0) {
      const TileMixHead& h = j.mix_heads[it.mix];
      t.int8_blocks = j.routes + it.route;
      t.k8 = tilemix::KeyCodes{j.codes + h.key_off, j.scales + h.scale_off, j.sums + h.scale_off};
    }
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
      const KvHeadPages hp = j.kv->head_pages(j.layer, s, it.group);
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

// Whether the prefill chunk of sequence s at batch rows [t, e) sees exactly the keys of positions
// [0, last query] in slot order in every KV head (no eviction, no window, min_keys at least): the
// block-numbered methods (sparse prefill, TileMix) need slot j to hold position j.
bool keys_in_position_order(const KvView& kv, int layer, int s, const int32_t* pos, int64_t t, int64_t e,
                            const AttentionParams& p, int64_t min_keys) {
  const KvCacheOptions& ko = kv.options();
  if (p.window != 0 || s < 0 || s >= ko.n_seq || layer < 0 || layer >= ko.n_layer || pos[t] < 0 ||
      pos[e - 1] - pos[t] != e - t - 1) {
    return false;
  }
  for (int g = 0; g < p.n_head_kv; ++g) {
    const int32_t n_k = kv.size(layer, s, g);
    const int32_t* kpos = kv.positions(layer, s, g);
    if (n_k < min_keys || n_k != static_cast<int64_t>(pos[e - 1]) + 1 || kpos[0] != 0 || kpos[n_k - 1] != n_k - 1) {
      return false;
    }
  }
  return true;
}

}  // namespace

Status CpuBackend::set_prefill_sparse(const sparse::PrefillSparseOptions& o) {
  sparse_opts_ = o;
  sparse_ = o.method == sparse::Method::kNone ? nullptr : sparse::make_prefill_sparsity(o);
  return ok_status();
}

Status CpuBackend::set_tilemix(const tilemix::TileMixOptions& o) {
  if (!(o.int8_fraction >= 0 && o.int8_fraction <= 1) || o.min_blocks < 1) {
    return error(ErrorCode::kInvalidArgument, "--tilemix-int8 {}: the INT8 fraction must be in [0, 1]",
                 o.int8_fraction);
  }
  tilemix_opts_ = o;
  tilemix_ = o.enabled() ? tilemix::make_router() : nullptr;
  return ok_status();
}

// TileMix routes the same chunks sparse prefill attends through a mask (its own min_blocks aside):
// at least one block of consecutive tokens of one sequence whose keys are exactly positions
// [0, last query] in slot order, with a head size the INT8 path takes; other chunks of 64 tokens
// or more are counted as float fallbacks. Shorter runs (decode, verification) stay float.
void CpuBackend::route_tilemix(const float* q, const KvView& kv, int layer, const int32_t* seq, const int32_t* pos,
                               int64_t n, const AttentionParams& p) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t min_keys = static_cast<int64_t>(tilemix_opts_.min_blocks) * sparse::kSparseBlock;
  int64_t key_floats = 0, n_scales = 0, route_bytes = 0;
  size_t sh = 0;  // sparse heads in batch order, n_head_kv per chunk
  for (int64_t t = 0; t < n;) {
    int64_t e = t + 1;
    while (e < n && seq[e] == seq[t]) ++e;
    const int32_t nt = static_cast<int32_t>(e - t);
    const int s = seq[t];
    while (sh < sparse_heads_.size() && sparse_heads_[sh].t0 < t) sh += static_cast<size_t>(p.n_head_kv);
    const bool sparse_chunk = sh < sparse_heads_.size() && sparse_heads_[sh].t0 == t;
    if (nt >= sparse::kSparseBlock) {
      if (tilemix::int8_head_dim_ok(p.head_dim) && keys_in_position_order(kv, layer, s, pos, t, e, p, min_keys)) {
        for (int g = 0; g < p.n_head_kv; ++g) {
          TileMixHead h{};
          h.t0 = static_cast<int32_t>(t);
          h.nt = nt;
          h.seq = s;
          h.group = g;
          h.n_k = pos[e - 1] + 1;
          h.key_off = key_floats;
          h.scale_off = n_scales;
          h.route_off = route_bytes;
          h.shape = sparse::mask_shape(pos[t], nt);
          h.sparse_off = sparse_chunk ? sparse_heads_[sh + static_cast<size_t>(g)].mask_off : -1;
          key_floats += static_cast<int64_t>(h.n_k) * p.head_dim;
          n_scales += h.n_k;
          route_bytes += h.shape.bytes();
          tilemix_heads_.push_back(h);
        }
      } else {
        ++tilemix_stats_.float_calls;
      }
    }
    t = e;
  }
  if (tilemix_heads_.empty()) return;
  if (tilemix_keys_.size() < static_cast<size_t>(key_floats)) {
    tilemix_keys_.resize(static_cast<size_t>(key_floats));
    tilemix_codes_.resize(static_cast<size_t>(key_floats));
  }
  if (tilemix_scales_.size() < static_cast<size_t>(n_scales)) {
    tilemix_scales_.resize(static_cast<size_t>(n_scales));
    tilemix_sums_.resize(static_cast<size_t>(n_scales));
  }
  if (tilemix_routes_.size() < static_cast<size_t>(route_bytes)) tilemix_routes_.resize(static_cast<size_t>(route_bytes));
  if (tilemix_scratch_.size() < static_cast<size_t>(pool_.size())) tilemix_scratch_.resize(static_cast<size_t>(pool_.size()));
  TileMixJob j{q,
               &kv,
               layer,
               &p,
               pos,
               tilemix_.get(),
               tilemix_opts_.int8_fraction,
               tilemix_heads_.data(),
               tilemix_keys_.data(),
               tilemix_codes_.data(),
               tilemix_scales_.data(),
               tilemix_sums_.data(),
               tilemix_routes_.data(),
               sparse_masks_.data(),
               tilemix_scratch_.data()};
  pool_.dispatch(tilemix_route_task, &j, static_cast<int64_t>(tilemix_heads_.size()), 1);
  for (const TileMixHead& h : tilemix_heads_) {
    tilemix_stats_.routed_calls += h.group == 0;
    tilemix_stats_.tiles_total += h.tiles;
    tilemix_stats_.tiles_int8 += h.int8;
  }
  tilemix_stats_.route_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// A prefill chunk (at least one block of consecutive tokens of one sequence) is attended sparsely
// when its keys are exactly positions [0, last query] in slot order (no eviction, no window) and
// there are at least min_blocks blocks of them; other chunks of 64 tokens or more are counted as
// dense fallbacks. Shorter runs (decode, verification) are left alone.
void CpuBackend::select_sparse_blocks(const float* q, const KvView& kv, int layer, const int32_t* seq,
                                      const int32_t* pos, int64_t n, const AttentionParams& p) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t min_keys = static_cast<int64_t>(sparse_opts_.min_blocks) * sparse::kSparseBlock;
  int64_t key_floats = 0, mask_bytes = 0;
  for (int64_t t = 0; t < n;) {
    int64_t e = t + 1;
    while (e < n && seq[e] == seq[t]) ++e;
    const int32_t nt = static_cast<int32_t>(e - t);
    const int s = seq[t];
    if (nt >= sparse::kSparseBlock) {
      if (keys_in_position_order(kv, layer, s, pos, t, e, p, min_keys)) {
        for (int g = 0; g < p.n_head_kv; ++g) {
          SparseHead h{};
          h.t0 = static_cast<int32_t>(t);
          h.nt = nt;
          h.seq = s;
          h.group = g;
          h.n_k = pos[e - 1] + 1;
          h.key_off = key_floats;
          h.mask_off = mask_bytes;
          h.shape = sparse::mask_shape(pos[t], nt);
          key_floats += static_cast<int64_t>(h.n_k) * p.head_dim;
          mask_bytes += h.shape.bytes();
          sparse_heads_.push_back(h);
        }
      } else {
        ++sparse_stats_.dense_calls;
      }
    }
    t = e;
  }
  if (sparse_heads_.empty()) return;
  if (sparse_keys_.size() < static_cast<size_t>(key_floats)) {
    sparse_keys_.resize(static_cast<size_t>(key_floats));
  }
  if (sparse_masks_.size() < static_cast<size_t>(mask_bytes)) sparse_masks_.resize(static_cast<size_t>(mask_bytes));
  if (sparse_scratch_.size() < static_cast<size_t>(pool_.size())) sparse_scratch_.resize(static_cast<size_t>(pool_.size()));
  SparseSelectJob j{q, &kv, layer, &p, pos, sparse_.get(), sparse_heads_.data(), sparse_keys_.data(),
                    sparse_masks_.data(), sparse_scratch_.data()};
  pool_.dispatch(sparse_select_task, &j, static_cast<int64_t>(sparse_heads_.size()), 1);
  int64_t calls = 0;
  for (const SparseHead& h : sparse_heads_) {
    calls += h.group == 0;
    sparse_stats_.blocks_kept += h.kept;
    sparse_stats_.blocks_causal += sparse::causal_blocks(h.shape);
  }
  sparse_stats_.sparse_calls += calls;
  for (sparse::Scratch& sc : sparse_scratch_) {
    sparse_stats_.heads_vertical_slash += sc.heads_vertical_slash;
    sparse_stats_.heads_query_aware += sc.heads_query_aware;
    sparse_stats_.route_ms += sc.route_ms;
    sc.heads_vertical_slash = sc.heads_query_aware = 0;
    sc.route_ms = 0;
  }
  sparse_stats_.select_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

void CpuBackend::attention(const float* q, const KvView& kv, int layer, const int32_t* seq,
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

  sparse_heads_.clear();
  if (sparse_ != nullptr && !row_invariant_) select_sparse_blocks(q, kv, layer, seq, pos, n, p);
  tilemix_heads_.clear();
  if (tilemix_ != nullptr && !row_invariant_) route_tilemix(q, kv, layer, seq, pos, n, p);

  items_.clear();
  size_t sh = 0;  // next chunk's heads in sparse_heads_ (in batch order, n_head_kv per chunk)
  size_t th = 0;  // and in tilemix_heads_
  for (int64_t t = 0; t < n;) {
    const SparseHead* sparse_heads = sh < sparse_heads_.size() && sparse_heads_[sh].t0 == t ? &sparse_heads_[sh] : nullptr;
    const TileMixHead* mix_heads =
        th < tilemix_heads_.size() && tilemix_heads_[th].t0 == t ? &tilemix_heads_[th] : nullptr;
    if (sparse_heads != nullptr || mix_heads != nullptr) {
      // A sparse or mixed chunk: tiles stay inside one query block, so one mask row and one route
      // row serve the tile.
      const int64_t end = t + (sparse_heads != nullptr ? sparse_heads[0].nt : mix_heads[0].nt);
      while (t < end) {
        const int32_t qb = pos[t] / sparse::kSparseBlock;
        int64_t e = t + 1;
        while (e < end && e - t < tile_tokens && pos[e] / sparse::kSparseBlock == qb) ++e;
        for (int g = 0; g < p.n_head_kv; ++g) {
          AttentionItem it{static_cast<int32_t>(t), static_cast<int32_t>(e - t), g};
          if (sparse_heads != nullptr) {
            const SparseHead& h = sparse_heads[g];
            it.mask = h.mask_off + static_cast<int64_t>(qb - h.shape.qb0) * h.shape.n_kb;
          }
          if (mix_heads != nullptr) {
            const TileMixHead& h = mix_heads[g];
            it.route = h.route_off + static_cast<int64_t>(qb - h.shape.qb0) * h.shape.n_kb;
            it.mix = static_cast<int32_t>(th) + g;
          }
          items_.push_back(it);
        }
        t = e;
      }
      if (sparse_heads != nullptr) sh += static_cast<size_t>(p.n_head_kv);
      if (mix_heads != nullptr) th += static_cast<size_t>(p.n_head_kv);
      continue;
    }
    int64_t e = t + 1;
    while (e < n && e - t < tile_tokens && seq[e] == seq[t]) ++e;
    for (int g = 0; g < p.n_head_kv; ++g) {
      items_.push_back({static_cast<int32_t>(t), static_cast<int32_t>(e - t), g});
    }
    t = e;
  }

  ensure_thread_scratch(attention_scratch_floats(tile_tokens * n_rep, p.head_dim) * sizeof(float));
  AttentionJob j{q,
                 out,
                 &kv,
                 layer,
                 seq,
                 pos,
                 &p,
                 items_.data(),
                 scratch_.data(),
                 row_invariant_,
                 sparse_masks_.data(),
                 tilemix_routes_.data(),
                 tilemix_heads_.data(),
                 tilemix_codes_.data(),
                 tilemix_scales_.data(),
                 tilemix_sums_.data()};
  pool_.dispatch(attention_task, &j, static_cast<int64_t>(items_.size()), 1);
}

}  // namespace frugal::cpu
