#include "frugal/kv/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "frugal/core/half.h"

namespace frugal {

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
  KvCache c;
  c.opts_ = opts;
  c.row_bytes_ = static_cast<size_t>(opts.head_dim) * (opts.dtype == DType::kF16 ? 2 : 4);
  const size_t heads = static_cast<size_t>(opts.n_layer) * opts.n_seq * opts.n_head_kv;
  const size_t bytes = heads * opts.capacity * c.row_bytes_;
  c.k_.resize(bytes);
  c.v_.resize(bytes);
  c.pos_.assign(heads * opts.capacity, -1);
  c.len_.assign(heads, 0);
  return c;
}

uint64_t KvCache::reserved_bytes() const { return k_.size() + v_.size(); }

uint64_t KvCache::used_bytes() const {
  uint64_t n = 0;
  for (int32_t l : len_) n += static_cast<uint64_t>(l);
  return n * row_bytes_ * 2;
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
  if (seq < 0 || seq >= opts_.n_seq) {
    return error(ErrorCode::kInvalidArgument, "kv cache: sequence {} out of range [0, {})", seq, opts_.n_seq);
  }
  for (int h = 0; h < opts_.n_head_kv; ++h) {
    const int idx = index(layer, seq, h);
    int32_t& n = len_[idx];
    if (n >= opts_.capacity) {
      return error(ErrorCode::kOverBudget, "kv cache: sequence {} is full ({} tokens per head)", seq, opts_.capacity);
    }
    const size_t off = row_offset(layer, seq, h) + static_cast<size_t>(n) * row_bytes_;
    store_row(k + static_cast<size_t>(h) * opts_.head_dim, k_.data() + off, opts_.head_dim, opts_.dtype);
    store_row(v + static_cast<size_t>(h) * opts_.head_dim, v_.data() + off, opts_.head_dim, opts_.dtype);
    pos_[static_cast<size_t>(idx) * opts_.capacity + n] = pos;
    if (!stats_.empty()) stats_[static_cast<size_t>(idx) * opts_.capacity + n] = 0.f;
    ++n;
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
  for (int l = 0; l < opts_.n_layer; ++l) {
    for (int h = 0; h < opts_.n_head_kv; ++h) {
      const int idx = index(l, seq, h);
      const int32_t* p = positions(l, seq, h);
      int32_t n = len_[idx];
      // Tokens are in time order, so the ones to drop are a suffix.
      while (n > 0 && p[n - 1] >= pos) --n;
      len_[idx] = n;
    }
  }
}

void KvCache::keep_tokens(int layer, int seq, int head, const std::vector<int32_t>& slots) {
  const int idx = index(layer, seq, head);
  int32_t* p = pos_.data() + static_cast<size_t>(idx) * opts_.capacity;
  uint8_t* kb = k_.data() + row_offset(layer, seq, head);
  uint8_t* vb = v_.data() + row_offset(layer, seq, head);
  float* st = stats_.empty() ? nullptr : stats_.data() + static_cast<size_t>(idx) * opts_.capacity;
  int32_t out = 0;
  for (int32_t s : slots) {
    if (s != out) {
      std::memmove(kb + static_cast<size_t>(out) * row_bytes_, kb + static_cast<size_t>(s) * row_bytes_, row_bytes_);
      std::memmove(vb + static_cast<size_t>(out) * row_bytes_, vb + static_cast<size_t>(s) * row_bytes_, row_bytes_);
      p[out] = p[s];
      if (st != nullptr) st[out] = st[s];
    }
    ++out;
  }
  len_[idx] = out;
}

void KvCache::enable_token_stats() {
  if (stats_.empty()) stats_.assign(pos_.size(), 0.f);
}

}  // namespace frugal
