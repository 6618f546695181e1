#include "frugal/kv/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "frugal/core/half.h"
#include "frugal/kv/page_pool.h"
#include "frugal/kv/token_table.h"

namespace frugal {

// The tables are declared after the pool so they are destroyed first (they give their pages back).
struct KvCache::Paged {
  std::unique_ptr<PagePool> pool;
  std::vector<TokenTable> tables;  // [seq]
  std::vector<PageCopy> copies;    // scratch of reserve()
  std::vector<RowMove> moves;      // scratch of keep_tokens()
  std::vector<PageId> lent;        // lend_pages(), newest last
};

KvCache::KvCache() = default;
KvCache::~KvCache() = default;
KvCache::KvCache(KvCache&&) noexcept = default;
KvCache& KvCache::operator=(KvCache&&) noexcept = default;

int32_t KvCache::size(int layer, int seq, int head) const {
  if (quantized()) return len_[static_cast<size_t>(index(layer, seq, head))];
  return paged_ ? paged_->tables[static_cast<size_t>(seq)].size(layer, head) : 0;
}

const int32_t* KvCache::positions(int layer, int seq, int head) const {
  if (quantized()) return pos_.data() + static_cast<size_t>(index(layer, seq, head)) * opts_.capacity;
  return paged_ ? paged_->tables[static_cast<size_t>(seq)].positions(layer, head).data() : nullptr;
}

int64_t KvCache::total_pages() const { return paged_ ? paged_->pool->total_pages() : 0; }
int64_t KvCache::free_pages() const { return paged_ ? paged_->pool->free_pages() : 0; }
int64_t KvCache::lent_pages() const { return paged_ ? static_cast<int64_t>(paged_->lent.size()) : 0; }

Status KvCache::lend_pages(int64_t n) {
  if (n <= 0) return ok_status();
  if (!paged_ || n > paged_->pool->free_pages()) {
    return error(ErrorCode::kOverBudget, "kv pages: {} pages to lend, {} free", n, free_pages());
  }
  const size_t page = static_cast<size_t>(opts_.page_tokens) * row_bytes_;
  for (int64_t i = 0; i < n; ++i) {
    const std::optional<PageId> p = paged_->pool->allocate();
    paged_->lent.push_back(*p);  // free_pages() >= n: allocate() cannot refuse
    // Its rows are not needed any more: the memory goes back to the system while lent.
    discard_resident(k_.data() + static_cast<size_t>(*p) * page, page);
    discard_resident(v_.data() + static_cast<size_t>(*p) * page, page);
  }
  return ok_status();
}

void KvCache::return_pages(int64_t n) {
  if (!paged_) return;
  for (; n > 0 && !paged_->lent.empty(); --n) {
    paged_->pool->release(paged_->lent.back());
    paged_->lent.pop_back();
  }
}

namespace {
struct QuantLayout {
  int bits = 0, cb = 0, vg = 0, res = 0, hot = 0, groups = 0;
  int hbq_words = 0;  // hbq: params of one row; its keys take no per-group params
};
QuantLayout quant_layout(const KvCacheOptions& o) {
  QuantLayout l;
  l.bits = kv_quant_bits(o.quant);
  l.cb = kv_code_bytes(o.head_dim, l.bits);
  l.vg = (o.head_dim + kKvGroup - 1) / kKvGroup;
  l.res = o.residual > 0 ? std::max(o.residual, 2 * kKvGroup)
                         : (o.quant == KvQuant::kHyQuant ? 2 * kKvGroup + 512 : 2 * kKvGroup);
  l.hot = o.quant == KvQuant::kHyQuant
              ? static_cast<int>(std::ceil(static_cast<double>(o.hot_ratio) * std::max(o.capacity, 0) - 1e-6))
              : 0;
  l.groups = (o.capacity + kKvGroup - 1) / kKvGroup;
  if (o.quant == KvQuant::kHbq) l.hbq_words = kv_hbq_param_words(o.head_dim);
  return l;
}
}  // namespace

int64_t kv_pool_pages(const KvCacheOptions& o) {
  if (o.n_pages > 0) return o.n_pages;
  const int64_t heads = static_cast<int64_t>(o.n_layer) * o.n_seq * o.n_head_kv;
  const int64_t p = std::max<int32_t>(o.page_tokens, 1);
  return heads * ((std::max(o.capacity, 0) + p - 1) / p);
}

uint64_t kv_page_bytes(const KvCacheOptions& o) {
  return static_cast<uint64_t>(std::max<int32_t>(o.page_tokens, 0)) * static_cast<uint64_t>(std::max(o.head_dim, 0)) *
         (o.dtype == DType::kF32 ? 4 : 2) * 2;
}

uint64_t kv_reserved_bytes(const KvCacheOptions& o) {
  const uint64_t heads = static_cast<uint64_t>(o.n_layer) * o.n_seq * o.n_head_kv;
  const uint64_t hd = static_cast<uint64_t>(o.head_dim), cap = static_cast<uint64_t>(std::max(o.capacity, 0));
  if (o.quant == KvQuant::kNone) return static_cast<uint64_t>(kv_pool_pages(o)) * kv_page_bytes(o);
  const QuantLayout l = quant_layout(o);
  if (o.quant == KvQuant::kHbq) {
    return heads * (cap * (static_cast<uint64_t>(l.cb) + static_cast<uint64_t>(l.hbq_words) * 2) * 2 +
                    static_cast<uint64_t>(l.res) * hd * 4);
  }
  const uint64_t per_head = cap * static_cast<uint64_t>(l.cb) * 2 + static_cast<uint64_t>(l.groups) * hd * 4 +
                            cap * static_cast<uint64_t>(l.vg) * 4 + static_cast<uint64_t>(l.res) * hd * 4 +
                            static_cast<uint64_t>(l.hot) * (hd * 4 + 8);
  return heads * per_head;
}

Result<int32_t> kv_tokens_for_memory(const KvCacheOptions& o, uint64_t bytes, int32_t min_tokens) {
  KvCacheOptions t = o;
  const auto fits = [&](int64_t c) {
    t.capacity = static_cast<int>(c);
    return kv_reserved_bytes(t) <= bytes;
  };
  int64_t lo = 0, hi = 1;
  while (hi < (int64_t{1} << 30) && fits(hi)) hi *= 2;  // reservation grows with capacity
  if (fits(hi)) lo = hi;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  if (lo < min_tokens) {
    t.capacity = std::max(min_tokens, 1);
    return error(ErrorCode::kOverBudget,
                 "kv-memory {} bytes holds {} tokens per (layer, KV head) with kv-quant {} for this model ({} layers x {} "
                 "KV heads x head size {}, x {} sequences): {} tokens need {} bytes",
                 bytes, lo, kv_quant_name(o.quant), o.n_layer, o.n_head_kv, o.head_dim, o.n_seq, t.capacity,
                 kv_reserved_bytes(t));
  }
  return static_cast<int32_t>(lo);
}

Result<KvCache> KvCache::create(const KvCacheOptions& opts) {
  if (opts.n_layer <= 0 || opts.n_head_kv <= 0 || opts.head_dim <= 0 || opts.n_seq <= 0 || opts.capacity <= 0) {
    return error(ErrorCode::kInvalidArgument,
                 "kv cache: every size must be positive (layers {}, kv heads {}, head dim {}, sequences {}, capacity {})",
                 opts.n_layer, opts.n_head_kv, opts.head_dim, opts.n_seq, opts.capacity);
  }
  if (opts.dtype != DType::kF16 && opts.dtype != DType::kF32) {
    return error(ErrorCode::kNotSupported, "kv cache: element type {} is not supported (f16 or f32)",
                 dtype_name(opts.dtype));
  }
  if (opts.quant != KvQuant::kNone && opts.head_dim % 2 != 0) {
    return error(ErrorCode::kNotSupported, "kv cache: kv-quant {} needs an even head size (got {})",
                 kv_quant_name(opts.quant), opts.head_dim);
  }
  if (opts.quant != KvQuant::kNone && opts.head_dim > 512) {
    return error(ErrorCode::kNotSupported, "kv cache: kv-quant supports head sizes up to 512 (got {})", opts.head_dim);
  }
  if (opts.quant == KvQuant::kHbq && kv_hbq_block(opts.head_dim) == 0) {
    return error(ErrorCode::kNotSupported,
                 "kv cache: kv-quant hbq needs a head size that is a multiple of 8, and of 64 above 128 (got {})",
                 opts.head_dim);
  }
  if (opts.quant == KvQuant::kNone && (opts.page_tokens <= 0 || opts.n_pages < 0 ||
                                       kv_pool_pages(opts) > std::numeric_limits<int32_t>::max())) {
    return error(ErrorCode::kInvalidArgument, "kv cache: {} pages of {} tokens is not a pool (1 to 2^31-1 pages)",
                 kv_pool_pages(opts), opts.page_tokens);
  }
  if (!(opts.hot_ratio >= 0 && opts.hot_ratio <= 1)) {
    return error(ErrorCode::kInvalidArgument, "kv cache: hot_ratio {} is not in [0, 1]", opts.hot_ratio);
  }
  KvCache c;
  c.opts_ = opts;
  const size_t heads = static_cast<size_t>(opts.n_layer) * opts.n_seq * opts.n_head_kv;
  const size_t hd = static_cast<size_t>(opts.head_dim), cap = static_cast<size_t>(opts.capacity);
  if (opts.quant == KvQuant::kNone) {
    const int64_t pages = kv_pool_pages(opts);
    c.row_bytes_ = hd * (opts.dtype == DType::kF16 ? 2 : 4);
    c.k_.resize(static_cast<size_t>(pages) * opts.page_tokens * c.row_bytes_);
    c.v_.resize(static_cast<size_t>(pages) * opts.page_tokens * c.row_bytes_);
    c.paged_ = std::make_unique<Paged>();
    c.paged_->pool = std::make_unique<PagePool>(static_cast<int32_t>(pages));
    TokenTableShape shape;
    shape.n_layer = opts.n_layer;
    shape.n_head_kv = opts.n_head_kv;
    shape.page_tokens = opts.page_tokens;
    shape.salt = static_cast<uint64_t>(opts.dtype);
    c.paged_->tables.reserve(static_cast<size_t>(opts.n_seq));
    for (int s = 0; s < opts.n_seq; ++s) c.paged_->tables.emplace_back(*c.paged_->pool, shape);
    return c;
  }
  c.pos_.assign(heads * cap, -1);
  c.len_.assign(heads, 0);
  const QuantLayout l = quant_layout(opts);
  c.bits_ = l.bits;
  c.cb_ = l.cb;
  c.vg_ = l.vg;
  c.res_cap_ = l.res;
  c.hot_cap_ = l.hot;
  c.kq_.resize(heads * cap * static_cast<size_t>(l.cb));
  c.vq_.resize(heads * cap * static_cast<size_t>(l.cb));
  c.hbq_words_ = l.hbq_words;
  if (l.hbq_words > 0) {
    c.kp_.resize(heads * cap * static_cast<size_t>(l.hbq_words));
    c.vp_.resize(heads * cap * static_cast<size_t>(l.hbq_words));
  } else {
    c.kp_.resize(heads * static_cast<size_t>(l.groups) * hd * 2);
    c.vp_.resize(heads * cap * static_cast<size_t>(l.vg) * 2);
  }
  c.rk_.resize(heads * static_cast<size_t>(l.res) * hd);
  c.rv_.resize(heads * static_cast<size_t>(l.res) * hd);
  c.hk_.resize(heads * static_cast<size_t>(l.hot) * hd);
  c.hv_.resize(heads * static_cast<size_t>(l.hot) * hd);
  c.hot_slot_.resize(heads * static_cast<size_t>(l.hot));
  c.hot_score_.resize(heads * static_cast<size_t>(l.hot));
  c.hot_n_.assign(heads, 0);
  c.cold_.assign(heads, 0);
  return c;
}

uint64_t KvCache::reserved_bytes() const { return kv_reserved_bytes(opts_); }

uint64_t KvCache::used_bytes() const {
  uint64_t b = 0;
  for (int s = 0; s < opts_.n_seq; ++s) b += used_bytes(s);
  return b;
}

uint64_t KvCache::used_bytes(int seq) const {
  if (seq < 0 || seq >= opts_.n_seq) return 0;
  if (!quantized()) {
    if (!paged_) return 0;
    const TokenTable& t = paged_->tables[static_cast<size_t>(seq)];
    uint64_t n = 0;
    for (int l = 0; l < opts_.n_layer; ++l) {
      for (int h = 0; h < opts_.n_head_kv; ++h) n += static_cast<uint64_t>(t.size(l, h));
    }
    return n * row_bytes_ * 2;
  }
  const uint64_t hd = static_cast<uint64_t>(opts_.head_dim);
  uint64_t b = 0;
  for (int l = 0; l < opts_.n_layer; ++l) {
    for (int h = 0; h < opts_.n_head_kv; ++h) {
      const size_t i = static_cast<size_t>(index(l, seq, h));
      const uint64_t cold = static_cast<uint64_t>(cold_[i]), res = static_cast<uint64_t>(len_[i] - cold_[i]);
      if (hbq_words_ > 0) {
        b += cold * 2 * (static_cast<uint64_t>(cb_) + static_cast<uint64_t>(hbq_words_) * 2) + res * hd * 4;
        continue;
      }
      b += cold * (2 * static_cast<uint64_t>(cb_) + static_cast<uint64_t>(vg_) * 4) + (cold / kKvGroup) * hd * 4 +
           (res + static_cast<uint64_t>(hot_n_[i])) * hd * 4;
    }
  }
  return b;
}

uint64_t KvCache::held_bytes() const {
  if (!quantized()) return paged_ ? static_cast<uint64_t>(paged_->pool->used_pages()) * page_bytes() : 0;
  return reserved_bytes();
}

KvHeadPages KvCache::head_pages(int layer, int seq, int head) const {
  KvHeadPages hp;
  if (quantized() || !paged_ || seq < 0 || seq >= opts_.n_seq) return hp;
  const TokenTable& t = paged_->tables[static_cast<size_t>(seq)];
  hp.k = k_.data();
  hp.v = v_.data();
  hp.pages = t.pages(layer, head).data();
  hp.page_tokens = opts_.page_tokens;
  hp.row_bytes = row_bytes_;
  hp.size = t.size(layer, head);
  return hp;
}

const void* KvCache::key_row(int layer, int seq, int head, int32_t slot) const {
  const KvHeadPages hp = head_pages(layer, seq, head);
  return hp.k == nullptr || slot < 0 || slot >= hp.size ? nullptr : hp.k + hp.row_offset(slot);
}

const void* KvCache::value_row(int layer, int seq, int head, int32_t slot) const {
  const KvHeadPages hp = head_pages(layer, seq, head);
  return hp.v == nullptr || slot < 0 || slot >= hp.size ? nullptr : hp.v + hp.row_offset(slot);
}

int64_t KvCache::pages_needed(int seq, int32_t n) const {
  if (quantized() || !paged_ || seq < 0 || seq >= opts_.n_seq) return 0;
  return paged_->tables[static_cast<size_t>(seq)].pages_needed(n);
}

int64_t KvCache::pages_held(int seq) const {
  if (quantized() || !paged_ || seq < 0 || seq >= opts_.n_seq) return 0;
  return paged_->tables[static_cast<size_t>(seq)].pages_held();
}

int64_t KvCache::pages_to_grow(int from, bool adopted, int32_t kept, int32_t rows) const {
  if (quantized() || !paged_ || from < 0 || from >= opts_.n_seq) return 0;
  return paged_->tables[static_cast<size_t>(from)].pages_to_grow(kept, rows, adopted);
}

int64_t KvCache::pages_held(const std::vector<int>& seqs) const {
  if (quantized() || !paged_) return 0;
  std::vector<uint8_t> seen(static_cast<size_t>(paged_->pool->total_pages()), 0);
  int64_t n = 0;
  for (int seq : seqs) {
    if (seq < 0 || seq >= opts_.n_seq) continue;
    const TokenTable& t = paged_->tables[static_cast<size_t>(seq)];
    for (int l = 0; l < opts_.n_layer; ++l) {
      for (int h = 0; h < opts_.n_head_kv; ++h) {
        for (PageId p : t.pages(l, h)) {
          if (!seen[static_cast<size_t>(p)]) {
            seen[static_cast<size_t>(p)] = 1;
            ++n;
          }
        }
      }
    }
  }
  return n;
}

int64_t KvCache::shared_pages() const {
  if (quantized() || !paged_) return 0;
  int64_t held = 0;
  for (const TokenTable& t : paged_->tables) held += t.pages_held();
  return held - paged_->pool->used_pages();
}

Status KvCache::share_prefix(int src, int dst, int32_t n) {
  if (quantized() || !paged_) return error(ErrorCode::kNotSupported, "kv cache: only an unquantized cache shares pages");
  if (src < 0 || src >= opts_.n_seq || dst < 0 || dst >= opts_.n_seq || src == dst) {
    return error(ErrorCode::kInvalidArgument, "kv cache: cannot share sequence {} into {} ({} sequences)", src, dst,
                 opts_.n_seq);
  }
  // Checked before `dst` lets go of anything, so a refusal changes nothing. Positions increase, so
  // n rows ending at position n - 1 are positions 0..n-1.
  for (int l = 0; l < opts_.n_layer && n > 0; ++l) {
    for (int h = 0; h < opts_.n_head_kv; ++h) {
      if (size(l, src, h) < n || positions(l, src, h)[n - 1] != n - 1) {
        return error(ErrorCode::kInvalidArgument, "kv share: sequence {} does not hold positions [0, {}) in order",
                     src, n);
      }
    }
  }
  release(dst);
  if (n <= 0) return ok_status();
  if (!paged_->tables[static_cast<size_t>(dst)].share_prefix(paged_->tables[static_cast<size_t>(src)], n)) {
    return error(ErrorCode::kCorrupt, "kv share: the token table of sequence {} refused positions [0, {})", src, n);
  }
  if (!stats_.empty()) {
    // A shared row starts its statistics at 0, as an appended one does.
    for (int l = 0; l < opts_.n_layer; ++l) {
      for (int h = 0; h < opts_.n_head_kv; ++h) stats_[static_cast<size_t>(index(l, dst, h))].assign(static_cast<size_t>(n), 0.f);
    }
  }
  return ok_status();
}

Status KvCache::audit_pages() const {
  if (quantized() || !paged_) return ok_status();
  const PagePool& pool = *paged_->pool;
  FRUGAL_RETURN_IF_ERROR(pool.audit());
  std::vector<int32_t> holders(static_cast<size_t>(pool.total_pages()), 0);
  for (PageId p : paged_->lent) ++holders[static_cast<size_t>(p)];
  for (const TokenTable& t : paged_->tables) {
    for (int l = 0; l < opts_.n_layer; ++l) {
      for (int h = 0; h < opts_.n_head_kv; ++h) {
        for (PageId p : t.pages(l, h)) ++holders[static_cast<size_t>(p)];
      }
    }
  }
  int64_t used = 0;
  for (PageId p = 0; p < pool.total_pages(); ++p) {
    if (holders[static_cast<size_t>(p)] != pool.ref_count(p)) {
      return error(ErrorCode::kCorrupt, "kv pages: page {} has {} holders but reference count {}", p,
                   holders[static_cast<size_t>(p)], pool.ref_count(p));
    }
    used += holders[static_cast<size_t>(p)] > 0 ? 1 : 0;
  }
  if (used != pool.used_pages()) {
    return error(ErrorCode::kCorrupt, "kv pages: {} pages have holders but the pool counts {} used", used,
                 pool.used_pages());
  }
  return ok_status();
}

void KvCache::apply_copies() {
  const size_t page = static_cast<size_t>(opts_.page_tokens) * row_bytes_;
  for (const PageCopy& c : paged_->copies) {
    const size_t n = static_cast<size_t>(c.rows) * row_bytes_;
    std::memcpy(k_.data() + static_cast<size_t>(c.to) * page, k_.data() + static_cast<size_t>(c.from) * page, n);
    std::memcpy(v_.data() + static_cast<size_t>(c.to) * page, v_.data() + static_cast<size_t>(c.from) * page, n);
  }
}

Status KvCache::reserve(int seq, int32_t n) {
  if (!quantized() && !paged_) return error(ErrorCode::kInvalidArgument, "kv cache: used before create()");
  if (seq < 0 || seq >= opts_.n_seq) {
    return error(ErrorCode::kInvalidArgument, "kv cache: sequence {} out of range [0, {})", seq, opts_.n_seq);
  }
  if (n <= 0) return ok_status();
  for (int l = 0; l < opts_.n_layer; ++l) {
    for (int h = 0; h < opts_.n_head_kv; ++h) {
      if (size(l, seq, h) + static_cast<int64_t>(n) > opts_.capacity) {
        return error(ErrorCode::kOverBudget, "kv cache: sequence {} is full ({} tokens per head)", seq,
                     opts_.capacity);
      }
    }
  }
  if (quantized()) return ok_status();
  paged_->copies.clear();
  if (paged_->tables[static_cast<size_t>(seq)].reserve(n, &paged_->copies) == Room::kNoFreePage) {
    return error(ErrorCode::kOverBudget, "kv cache: no free page for {} more tokens of sequence {} ({} of {} pages free)",
                 n, seq, paged_->pool->free_pages(), paged_->pool->total_pages());
  }
  apply_copies();
  return ok_status();
}

void KvCache::release(int seq) {
  if (seq < 0 || seq >= opts_.n_seq || (!quantized() && !paged_)) return;
  if (!quantized()) {
    paged_->tables[static_cast<size_t>(seq)].release_all();
    if (!stats_.empty()) {
      for (int l = 0; l < opts_.n_layer; ++l) {
        for (int h = 0; h < opts_.n_head_kv; ++h) stats_[static_cast<size_t>(index(l, seq, h))].clear();
      }
    }
    return;
  }
  truncate(seq, 0);
}

namespace {
void store_row(const float* src, void* dst, int n, DType dtype) {
  if (dtype == DType::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
  } else {
    auto* d = static_cast<uint16_t*>(dst);
    for (int i = 0; i < n; ++i) d[i] = f32_to_fp16(src[i]);
  }
}
}  // namespace

Status KvCache::append(int layer, int seq, int32_t pos, const float* k, const float* v) {
  if (!quantized() && !paged_) return error(ErrorCode::kInvalidArgument, "kv cache: used before create()");
  if (seq < 0 || seq >= opts_.n_seq) {
    return error(ErrorCode::kInvalidArgument, "kv cache: sequence {} out of range [0, {})", seq, opts_.n_seq);
  }
  if (layer < 0 || layer >= opts_.n_layer) {
    return error(ErrorCode::kInvalidArgument, "kv cache: layer {} out of range [0, {})", layer, opts_.n_layer);
  }
  if (!quantized()) {
    TokenTable& t = paged_->tables[static_cast<size_t>(seq)];
    // Room is taken for every layer at once; a caller that did not reserve gets it here, and so
    // does one whose next row would land in a page shared with another sequence (copy on write).
    if (!t.can_append(layer)) FRUGAL_RETURN_IF_ERROR(reserve(seq, 1));
    for (int h = 0; h < opts_.n_head_kv; ++h) {
      if (t.size(layer, h) >= opts_.capacity) {
        return error(ErrorCode::kOverBudget, "kv cache: sequence {} is full ({} tokens per head)", seq, opts_.capacity);
      }
    }
    t.append(layer, pos);
    for (int h = 0; h < opts_.n_head_kv; ++h) {
      const PageRow r = t.row(layer, h, t.size(layer, h) - 1);
      const size_t off = (static_cast<size_t>(r.page) * opts_.page_tokens + r.row) * row_bytes_;
      store_row(k + static_cast<size_t>(h) * opts_.head_dim, k_.data() + off, opts_.head_dim, opts_.dtype);
      store_row(v + static_cast<size_t>(h) * opts_.head_dim, v_.data() + off, opts_.head_dim, opts_.dtype);
      if (!stats_.empty()) stats_[static_cast<size_t>(index(layer, seq, h))].push_back(0.f);
    }
    return ok_status();
  }
  for (int h = 0; h < opts_.n_head_kv; ++h) {
    const int idx = index(layer, seq, h);
    int32_t& n = len_[idx];
    if (n >= opts_.capacity) {
      return error(ErrorCode::kOverBudget, "kv cache: sequence {} is full ({} tokens per head)", seq, opts_.capacity);
    }
    pos_[static_cast<size_t>(idx) * opts_.capacity + n] = pos;
    if (!stats_.empty()) stats_[static_cast<size_t>(idx)].push_back(0.f);
    q_append(idx, k + static_cast<size_t>(h) * opts_.head_dim, v + static_cast<size_t>(h) * opts_.head_dim);
  }
  return ok_status();
}

int32_t KvCache::max_pos(int seq) const {
  int32_t m = -1;
  for (int l = 0; l < opts_.n_layer; ++l) {
    for (int h = 0; h < opts_.n_head_kv; ++h) {
      const int32_t n = size(l, seq, h);
      if (n > 0) m = std::max(m, positions(l, seq, h)[n - 1]);
    }
  }
  return m;
}

void KvCache::truncate(int seq, int32_t pos) {
  if (seq < 0 || seq >= opts_.n_seq || (!quantized() && !paged_)) return;
  if (!quantized()) {
    paged_->tables[static_cast<size_t>(seq)].truncate(pos);
    if (!stats_.empty()) {
      for (int l = 0; l < opts_.n_layer; ++l) {
        for (int h = 0; h < opts_.n_head_kv; ++h) {
          stats_[static_cast<size_t>(index(l, seq, h))].resize(static_cast<size_t>(size(l, seq, h)));
        }
      }
    }
    return;
  }
  for (int l = 0; l < opts_.n_layer; ++l) {
    for (int h = 0; h < opts_.n_head_kv; ++h) {
      const int idx = index(l, seq, h);
      const int32_t* p = positions(l, seq, h);
      int32_t n = len_[idx];
      // Tokens are in time order, so the ones to drop are a suffix.
      while (n > 0 && p[n - 1] >= pos) --n;
      if (quantized() && n < cold_[static_cast<size_t>(idx)]) {
        std::vector<int32_t> slots(static_cast<size_t>(n));
        std::iota(slots.begin(), slots.end(), 0);
        (void)keep_tokens(l, seq, h, slots);  // quantized: compaction never needs a page
        continue;
      }
      len_[idx] = n;
      if (!stats_.empty()) stats_[static_cast<size_t>(idx)].resize(static_cast<size_t>(n));
    }
  }
}

Status KvCache::keep_tokens(int layer, int seq, int head, const std::vector<int32_t>& slots) {
  const int idx = index(layer, seq, head);
  const auto keep_stats = [&] {
    if (stats_.empty()) return;
    std::vector<float>& st = stats_[static_cast<size_t>(idx)];
    for (size_t j = 0; j < slots.size(); ++j) st[j] = st[static_cast<size_t>(slots[j])];
    st.resize(slots.size());
  };
  if (quantized()) {
    keep_stats();
    q_keep(idx, slots);
    return ok_status();
  }
  std::vector<RowMove>& moves = paged_->moves;
  moves.clear();
  if (paged_->tables[static_cast<size_t>(seq)].keep(layer, head, slots, &moves) == Room::kNoFreePage) {
    return error(ErrorCode::kOverBudget, "kv cache: no free page to compact a head of sequence {} shared with another",
                 seq);
  }
  keep_stats();
  const size_t p = static_cast<size_t>(opts_.page_tokens);
  for (const RowMove& m : moves) {
    const size_t from = (static_cast<size_t>(m.from.page) * p + m.from.row) * row_bytes_;
    const size_t to = (static_cast<size_t>(m.to.page) * p + m.to.row) * row_bytes_;
    std::memmove(k_.data() + to, k_.data() + from, row_bytes_);
    std::memmove(v_.data() + to, v_.data() + from, row_bytes_);
  }
  return ok_status();
}

bool KvCache::enable_token_stats() {
  if (!stats_.empty()) return true;
  stats_.resize(static_cast<size_t>(opts_.n_layer) * opts_.n_seq * opts_.n_head_kv);
  for (int l = 0; l < opts_.n_layer; ++l) {
    for (int s = 0; s < opts_.n_seq; ++s) {
      for (int h = 0; h < opts_.n_head_kv; ++h) stats_[static_cast<size_t>(index(l, s, h))].assign(size(l, s, h), 0.f);
    }
  }
  return true;
}

}  // namespace frugal

// ---- quantized layout ----

namespace frugal {
namespace {
void fp16_row(const float* src, int n, uint16_t* dst) {
  for (int i = 0; i < n; ++i) dst[i] = f32_to_fp16(src[i]);
}
void f32_row(const uint16_t* src, int n, float* dst) {
  for (int i = 0; i < n; ++i) dst[i] = fp16_to_f32(src[i]);
}
}  // namespace

// Appends one token's K and V to head `idx` (its position is already written): FP16 into the
// residual, then a key group is quantized when the residual holds one (hyquant waits for flush()).
void KvCache::q_append(int idx, const float* k, const float* v) {
  const size_t i = static_cast<size_t>(idx), hd = static_cast<size_t>(opts_.head_dim);
  if (len_[i] - cold_[i] >= res_cap_) q_flush_group(idx, nullptr);  // hyquant run without flush()
  const size_t r = static_cast<size_t>(len_[i] - cold_[i]);
  fp16_row(k, opts_.head_dim, rk_.data() + (i * res_cap_ + r) * hd);
  fp16_row(v, opts_.head_dim, rv_.data() + (i * res_cap_ + r) * hd);
  ++len_[i];
  if (opts_.quant != KvQuant::kHyQuant && len_[i] - cold_[i] >= kKvGroup) q_flush_group(idx, nullptr);
}

// Quantizes the oldest kKvGroup residual rows of head `idx` as the next key group; with `qmean`
// ([head_dim]), the flushed tokens whose logit against it beats the weakest FP16 copy replace it.
void KvCache::q_flush_group(int idx, const float* qmean) {
  const size_t i = static_cast<size_t>(idx), hd = static_cast<size_t>(opts_.head_dim);
  const size_t cap = static_cast<size_t>(opts_.capacity);
  const int cold = cold_[i];
  std::vector<float> kf(kKvGroup * hd), vf(kKvGroup * hd);
  const uint16_t* rk = rk_.data() + i * res_cap_ * hd;
  const uint16_t* rv = rv_.data() + i * res_cap_ * hd;
  f32_row(rk, kKvGroup * opts_.head_dim, kf.data());
  f32_row(rv, kKvGroup * opts_.head_dim, vf.data());
  const size_t groups = (cap + kKvGroup - 1) / kKvGroup;
  if (hbq_words_ > 0) {
    // Each row alone; rows still leave the FP16 residual a group at a time, as int4's do.
    const size_t w = static_cast<size_t>(hbq_words_);
    for (int t = 0; t < kKvGroup; ++t) {
      const size_t slot = i * cap + static_cast<size_t>(cold + t);
      kv_hbq_quantize_row(kf.data() + t * hd, opts_.head_dim, kq_.data() + slot * cb_, kp_.data() + slot * w);
      kv_hbq_quantize_row(vf.data() + t * hd, opts_.head_dim, vq_.data() + slot * cb_, vp_.data() + slot * w);
    }
  } else {
    kv_quantize_key_group(kf.data(), static_cast<int64_t>(hd), kKvGroup, opts_.head_dim, bits_,
                          kq_.data() + (i * cap + static_cast<size_t>(cold)) * cb_, cb_,
                          kp_.data() + (i * groups + static_cast<size_t>(cold / kKvGroup)) * hd * 2);
    for (int t = 0; t < kKvGroup; ++t) {
      const size_t slot = i * cap + static_cast<size_t>(cold + t);
      kv_quantize_value_row(vf.data() + t * hd, opts_.head_dim, bits_, vq_.data() + slot * cb_,
                            vp_.data() + slot * static_cast<size_t>(vg_) * 2);
    }
  }
  if (qmean != nullptr && hot_cap_ > 0) {
    const int limit = std::min<int>(
        hot_cap_, static_cast<int>(std::ceil(static_cast<double>(opts_.hot_ratio) * (cold + kKvGroup) - 1e-6)));
    const size_t hb = i * static_cast<size_t>(hot_cap_);
    int32_t& hn = hot_n_[i];
    for (int t = 0; t < kKvGroup; ++t) {
      float score = 0;
      for (size_t c = 0; c < hd; ++c) score += qmean[c] * kf[t * hd + c];
      int row = -1;
      if (hn < limit) {
        row = hn++;
      } else if (hn > 0) {
        const float* sc = hot_score_.data() + hb;
        const int weakest = static_cast<int>(std::min_element(sc, sc + hn) - sc);
        if (score > sc[weakest]) row = weakest;
      }
      if (row < 0) continue;
      hot_slot_[hb + row] = cold + t;
      hot_score_[hb + row] = score;
      std::memcpy(hk_.data() + (hb + row) * hd, rk + t * hd, hd * 2);
      std::memcpy(hv_.data() + (hb + row) * hd, rv + t * hd, hd * 2);
    }
  }
  const size_t rest = static_cast<size_t>(len_[i] - cold - kKvGroup);
  std::memmove(rk_.data() + i * res_cap_ * hd, rk + kKvGroup * hd, rest * hd * 2);
  std::memmove(rv_.data() + i * res_cap_ * hd, rv + kKvGroup * hd, rest * hd * 2);
  cold_[i] = cold + kKvGroup;
}

void KvCache::flush(int layer, int seq, const float* qmean) {
  if (opts_.quant != KvQuant::kHyQuant || seq < 0 || seq >= opts_.n_seq) return;
  for (int h = 0; h < opts_.n_head_kv; ++h) {
    const int idx = index(layer, seq, h);
    const float* qm = qmean != nullptr ? qmean + static_cast<size_t>(h) * opts_.head_dim : nullptr;
    while (len_[static_cast<size_t>(idx)] - cold_[static_cast<size_t>(idx)] >= 2 * kKvGroup) q_flush_group(idx, qm);
  }
}

int32_t KvCache::fp16_tokens(int layer, int seq, int head) const {
  if (!quantized()) return 0;
  const size_t i = static_cast<size_t>(index(layer, seq, head));
  return len_[i] - cold_[i] + hot_n_[i];
}

void KvCache::read_rows(int layer, int seq, int head, float* k, float* v) const {
  const size_t hd = static_cast<size_t>(opts_.head_dim);
  const int32_t n = size(layer, seq, head);
  if (!quantized()) {
    const KvHeadPages hp = head_pages(layer, seq, head);
    for (int which = 0; which < 2; ++which) {
      float* out = which == 0 ? k : v;
      if (out == nullptr) continue;
      const uint8_t* base = which == 0 ? hp.k : hp.v;
      // A page's rows are contiguous: convert a page's run at a time.
      for (int32_t s = 0; s < n;) {
        const int32_t run = std::min(n - s, hp.page_tokens - s % hp.page_tokens);
        const void* src = base + hp.row_offset(s);
        const size_t cnt = static_cast<size_t>(run) * hd;
        if (opts_.dtype == DType::kF32) {
          std::memcpy(out + static_cast<size_t>(s) * hd, src, cnt * sizeof(float));
        } else {
          f32_row(static_cast<const uint16_t*>(src), static_cast<int>(cnt), out + static_cast<size_t>(s) * hd);
        }
        s += run;
      }
    }
    return;
  }
  read_rows(layer, seq, head, 0, n, k, v);
}

KvQuantHeadView KvCache::quant_view(int layer, int seq, int head) const {
  KvQuantHeadView h;
  if (!quantized()) return h;
  const size_t i = static_cast<size_t>(index(layer, seq, head)), hd = static_cast<size_t>(opts_.head_dim);
  const size_t cap = static_cast<size_t>(opts_.capacity), groups = (cap + kKvGroup - 1) / kKvGroup;
  h.bits = bits_;
  h.code_bytes = cb_;
  h.size = len_[i];
  h.cold = cold_[i];
  h.k_codes = kq_.data() + i * cap * static_cast<size_t>(cb_);
  h.k_params = kp_.data() + i * groups * hd * 2;
  h.v_codes = vq_.data() + i * cap * static_cast<size_t>(cb_);
  h.v_params = vp_.data() + i * cap * static_cast<size_t>(vg_) * 2;
  if (hbq_words_ > 0) {
    h.hbq_words = hbq_words_;
    h.k_params = kp_.data() + i * cap * static_cast<size_t>(hbq_words_);
    h.v_params = vp_.data() + i * cap * static_cast<size_t>(hbq_words_);
  }
  h.k_residual = rk_.data() + i * static_cast<size_t>(res_cap_) * hd;
  h.v_residual = rv_.data() + i * static_cast<size_t>(res_cap_) * hd;
  h.hot_n = hot_n_.empty() ? 0 : hot_n_[i];
  if (h.hot_n > 0) {
    const size_t hb = i * static_cast<size_t>(hot_cap_);
    h.hot_slot = hot_slot_.data() + hb;
    h.hot_k = hk_.data() + hb * hd;
    h.hot_v = hv_.data() + hb * hd;
  }
  return h;
}

void KvCache::read_rows(int layer, int seq, int head, int32_t begin, int32_t end, float* k, float* v) const {
  const size_t i = static_cast<size_t>(index(layer, seq, head)), hd = static_cast<size_t>(opts_.head_dim);
  if (!quantized() || begin >= end) return;
  const size_t cap = static_cast<size_t>(opts_.capacity), groups = (cap + kKvGroup - 1) / kKvGroup;
  const int cold = cold_[i];
  const bool b8 = bits_ == 8;
  const int32_t qend = std::min(end, cold);  // quantized rows [begin, qend), FP16 residual after
  float step[512], lo[512];  // head_dim <= 512 per group of params
  if (hbq_words_ > 0) {
    const size_t w = static_cast<size_t>(hbq_words_);
    for (int t = begin; t < qend; ++t) {
      const size_t slot = i * cap + static_cast<size_t>(t), o = static_cast<size_t>(t - begin) * hd;
      if (k != nullptr) kv_hbq_dequantize_row(kq_.data() + slot * cb_, kp_.data() + slot * w, opts_.head_dim, k + o);
      if (v != nullptr) kv_hbq_dequantize_row(vq_.data() + slot * cb_, vp_.data() + slot * w, opts_.head_dim, v + o);
    }
  }
  if (k != nullptr && hbq_words_ > 0) {
    const int32_t r0 = std::max(begin, cold);
    if (end > r0) {
      f32_row(rk_.data() + (i * res_cap_ + static_cast<size_t>(r0 - cold)) * hd, (end - r0) * opts_.head_dim,
              k + static_cast<size_t>(r0 - begin) * hd);
    }
  } else if (k != nullptr) {
    for (int g = begin / kKvGroup; g * kKvGroup < qend; ++g) {
      const uint16_t* p = kp_.data() + (i * groups + static_cast<size_t>(g)) * hd * 2;
      for (size_t c = 0; c < hd; ++c) {
        step[c] = fp16_to_f32(p[2 * c]);
        lo[c] = fp16_to_f32(p[2 * c + 1]);
      }
      for (int t = std::max(begin, g * kKvGroup); t < std::min(qend, (g + 1) * kKvGroup); ++t) {
        const uint8_t* q = kq_.data() + (i * cap + static_cast<size_t>(t)) * cb_;
        float* o = k + static_cast<size_t>(t - begin) * hd;
        if (b8) {
          for (size_t c = 0; c < hd; ++c) o[c] = lo[c] + static_cast<float>(q[c]) * step[c];
        } else {
          for (size_t c = 0; c < hd; c += 2) {
            o[c] = lo[c] + static_cast<float>(q[c / 2] & 0x0f) * step[c];
            o[c + 1] = lo[c + 1] + static_cast<float>(q[c / 2] >> 4) * step[c + 1];
          }
        }
      }
    }
    const int32_t r0 = std::max(begin, cold);
    if (end > r0) {
      f32_row(rk_.data() + (i * res_cap_ + static_cast<size_t>(r0 - cold)) * hd, (end - r0) * opts_.head_dim,
              k + static_cast<size_t>(r0 - begin) * hd);
    }
  }
  if (v != nullptr) {
    for (int t = hbq_words_ > 0 ? qend : begin; t < qend; ++t) {
      const size_t slot = i * cap + static_cast<size_t>(t);
      const uint8_t* q = vq_.data() + slot * cb_;
      const uint16_t* p = vp_.data() + slot * static_cast<size_t>(vg_) * 2;
      float* o = v + static_cast<size_t>(t - begin) * hd;
      for (int g = 0; g < vg_; ++g) {
        const float st = fp16_to_f32(p[2 * g]), mn = fp16_to_f32(p[2 * g + 1]);
        const size_t e = std::min(hd, static_cast<size_t>(g + 1) * kKvGroup);
        if (b8) {
          for (size_t c = static_cast<size_t>(g) * kKvGroup; c < e; ++c) o[c] = mn + static_cast<float>(q[c]) * st;
        } else {
          for (size_t c = static_cast<size_t>(g) * kKvGroup; c < e; c += 2) {
            o[c] = mn + static_cast<float>(q[c / 2] & 0x0f) * st;
            o[c + 1] = mn + static_cast<float>(q[c / 2] >> 4) * st;
          }
        }
      }
    }
    const int32_t r0 = std::max(begin, cold);
    if (end > r0) {
      f32_row(rv_.data() + (i * res_cap_ + static_cast<size_t>(r0 - cold)) * hd, (end - r0) * opts_.head_dim,
              v + static_cast<size_t>(r0 - begin) * hd);
    }
  }
  const size_t hb = i * static_cast<size_t>(hot_cap_);
  for (int r = 0; r < hot_n_[i]; ++r) {
    const int32_t s = hot_slot_[hb + static_cast<size_t>(r)];
    if (s >= qend || s < begin) continue;  // only quantized slots need their FP16 copy
    if (k != nullptr) f32_row(hk_.data() + (hb + r) * hd, opts_.head_dim, k + static_cast<size_t>(s - begin) * hd);
    if (v != nullptr) f32_row(hv_.data() + (hb + r) * hd, opts_.head_dim, v + static_cast<size_t>(s - begin) * hd);
  }
}

// Compaction of a quantized head: the kept rows (FP16 copies where there are) are re-laid out from
// slot 0 and re-quantized in fresh key groups, so groups stay whole. Values are per token, so a
// dequantized row lands back on (nearly) its own grid; keys regrouped with other tokens may move by
// up to half of the new group's step per round (tests bound it).
void KvCache::q_keep(int idx, const std::vector<int32_t>& slots) {
  const size_t i = static_cast<size_t>(idx), hd = static_cast<size_t>(opts_.head_dim);
  const size_t cap = static_cast<size_t>(opts_.capacity);
  const int32_t n = len_[i];
  const int layer = idx / (opts_.n_seq * opts_.n_head_kv);
  const int seq = (idx / opts_.n_head_kv) % opts_.n_seq, head = idx % opts_.n_head_kv;
  std::vector<float> kf(static_cast<size_t>(n) * hd), vf(static_cast<size_t>(n) * hd);
  read_rows(layer, seq, head, kf.data(), vf.data());
  std::vector<int32_t> to(static_cast<size_t>(n), -1);
  for (size_t j = 0; j < slots.size(); ++j) to[static_cast<size_t>(slots[j])] = static_cast<int32_t>(j);
  // FP16 copies of surviving hot tokens move with them.
  const size_t hb = i * static_cast<size_t>(hot_cap_);
  int32_t hn = 0;
  for (int r = 0; r < hot_n_[i]; ++r) {
    const int32_t s = hot_slot_[hb + static_cast<size_t>(r)];
    if (s >= n || to[static_cast<size_t>(s)] < 0) continue;
    if (hn != r) {
      std::memcpy(hk_.data() + (hb + hn) * hd, hk_.data() + (hb + r) * hd, hd * 2);
      std::memcpy(hv_.data() + (hb + hn) * hd, hv_.data() + (hb + r) * hd, hd * 2);
      hot_score_[hb + hn] = hot_score_[hb + r];
    }
    hot_slot_[hb + hn] = to[static_cast<size_t>(s)];
    ++hn;
  }
  hot_n_[i] = hn;
  int32_t* p = pos_.data() + i * cap;
  for (size_t j = 0; j < slots.size(); ++j) p[j] = p[slots[j]];
  len_[i] = 0;
  cold_[i] = 0;
  for (int32_t s : slots) {
    q_append(idx, kf.data() + static_cast<size_t>(s) * hd, vf.data() + static_cast<size_t>(s) * hd);
    if (opts_.quant == KvQuant::kHyQuant && len_[i] - cold_[i] >= 2 * kKvGroup) q_flush_group(idx, nullptr);
  }
}

}  // namespace frugal
