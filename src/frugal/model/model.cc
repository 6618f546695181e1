#include "frugal/model/model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <unistd.h>

#include "frugal/backend/cpu/repack.h"
#include "frugal/core/greedy_token.h"
#include "frugal/model/architecture.h"

namespace frugal {

int64_t Batch::n_logits() const {
  int64_t n = 0;
  for (uint8_t w : want_logits) n += w;
  return n;
}

// Activation buffers, sized for the largest batch seen; reused so the token loop never allocates.
struct Model::Workspace {
  int64_t n_tokens = 0;
  std::vector<float> x;     // [n][n_embd] residual stream
  std::vector<float> h;     // [n][n_embd] normed input of a sub-block
  std::vector<float> q;     // [n][n_head * head_dim]
  std::vector<float> k;     // [n][n_head_kv * head_dim]
  std::vector<float> v;     // [n][n_head_kv * head_dim]
  std::vector<float> attn;  // [n][n_head * head_dim]
  std::vector<float> o;     // [n][n_embd]
  std::vector<float> gate;  // [n][n_ff]
  std::vector<float> up;    // [n][n_ff]
  std::vector<float> out;   // [n_logits][n_embd] rows that produce logits
  std::vector<float> logits;  // [n_logits][n_vocab] of a greedy step run op by op
};

namespace {

// The largest ring of recent queries per sequence a backend is asked to keep on its device (an
// observer that keeps more, or all, gets them on the host).
constexpr int64_t kMaxQueryRing = 4096;

void draw_progress(uint64_t done, uint64_t total) {
  const int width = 40;
  const double frac = total ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
  const int filled = static_cast<int>(frac * width);
  std::fprintf(stderr, "\rloading [%.*s%*s] %3d%%", filled, "========================================",
               width - filled, "", static_cast<int>(frac * 100));
  if (done >= total) std::fprintf(stderr, "\n");
}

// Repacks, in place, every weight matrix whose CPU kernel prefers another layout; a tied output
// shares its table with the embeddings and is repacked once.
Status repack_for_cpu(GgufFile& file, ModelWeights& w) {
  std::vector<WeightTensor*> all = {&w.token_embd, &w.output};
  for (LayerWeights& l : w.layers) {
    for (WeightTensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) all.push_back(t);
  }
  for (WeightTensor* t : all) {
    const WeightLayout layout = cpu::preferred_layout(*t);
    if (layout == WeightLayout::kRows) continue;
    const void* old = t->data;
    const uint64_t bytes = static_cast<uint64_t>(t->rows) * t->row_stride;
    Status st = file.make_writable(old, bytes);
    if (st.code() == ErrorCode::kNotSupported) return ok_status();  // a file in memory: keep its layout
    FRUGAL_RETURN_IF_ERROR(st);
    w.repacked_bytes += cpu::repack_in_place(*t, const_cast<void*>(old), layout);
    for (WeightTensor* u : all) {
      if (u != t && u->data == old && u->layout == WeightLayout::kRows) u->layout = layout;
    }
  }
  return ok_status();
}

}  // namespace

Model::~Model() = default;

Result<std::unique_ptr<Model>> Model::load(const std::string& path, const ModelLoadOptions& opts) {
  GgufOpenOptions gopts;
  // A progress bar only where someone watches: a terminal, and a file big enough to wait for.
  if (opts.progress && isatty(STDERR_FILENO)) {
    gopts.prefault = true;
    gopts.progress = draw_progress;
  }
  FRUGAL_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::open(path, gopts));
  std::unique_ptr<Model> m(new Model());
  FRUGAL_ASSIGN_OR_RETURN(m->config_.arch, file->get_string("general.architecture"));
  const Architecture* arch = find_architecture(m->config_.arch);
  if (arch == nullptr) {
    std::string known;
    for (const auto& n : architecture_names()) known += (known.empty() ? "" : ", ") + n;
    return error(ErrorCode::kNotSupported, "{}: architecture '{}' is not supported (supported: {})", path,
                 m->config_.arch, known);
  }
  Status st = arch->read_config(*file, m->config_);
  if (st.ok()) st = arch->bind_weights(*file, m->config_, m->weights_);
  if (!st.ok()) return st.with_context(path);
  if (!m->weights_.rope_freqs.empty()) m->config_.rope.freq_factors = m->weights_.rope_freqs.data();
  for (const auto& t : file->tensors()) m->weights_.bytes += t.nbytes;
  if (opts.cpu_layouts) {
    if (Status rs = repack_for_cpu(*file, m->weights_); !rs.ok()) return rs.with_context(path);
  }
  m->file_ = std::move(file);
  m->ws_ = std::make_unique<Workspace>();
  return m;
}

std::string Model::describe_types() const {
  std::map<std::string, int> counts;
  for (const auto& t : file_->tensors()) counts[std::string(dtype_name(t.type))]++;
  std::string s;
  for (const auto& [name, n] : counts) s += (s.empty() ? "" : ", ") + name + " x" + std::to_string(n);
  return s;
}

KvCacheOptions Model::kv_options(int n_seq, int capacity, DType dtype) const {
  KvCacheOptions o;
  o.n_layer = static_cast<int>(config_.n_layer);
  o.n_head_kv = static_cast<int>(config_.n_head_kv);
  o.head_dim = static_cast<int>(config_.head_dim);
  o.n_seq = n_seq;
  o.capacity = capacity;
  o.dtype = dtype;
  return o;
}

Status Model::check_batch(const Batch& b, const KvCache& kv) const {
  const int64_t n = b.size();
  if (n == 0) return error(ErrorCode::kInvalidArgument, "forward: empty batch");
  if (static_cast<int64_t>(b.pos.size()) != n || static_cast<int64_t>(b.seq.size()) != n ||
      static_cast<int64_t>(b.want_logits.size()) != n) {
    return error(ErrorCode::kInvalidArgument, "forward: batch arrays differ in length");
  }
  const KvCacheOptions& ko = kv.options();
  if (ko.n_layer != config_.n_layer || ko.n_head_kv != config_.n_head_kv || ko.head_dim != config_.head_dim) {
    return error(ErrorCode::kInvalidArgument, "forward: the KV cache was made for another model shape");
  }
  // Per sequence: positions increase and continue the cache, and the cache has room.
  std::map<int32_t, std::pair<int32_t, int32_t>> seen;  // seq -> (last pos, tokens added)
  for (int64_t i = 0; i < n; ++i) {
    const TokenId t = b.tokens[static_cast<size_t>(i)];
    const int32_t s = b.seq[static_cast<size_t>(i)];
    const int32_t p = b.pos[static_cast<size_t>(i)];
    if (t < 0 || t >= config_.n_vocab) {
      return error(ErrorCode::kInvalidArgument, "forward: token id {} outside the vocabulary [0, {})", t, config_.n_vocab);
    }
    if (s < 0 || s >= ko.n_seq) {
      return error(ErrorCode::kInvalidArgument, "forward: sequence {} outside [0, {})", s, ko.n_seq);
    }
    auto it = seen.find(s);
    if (it == seen.end()) it = seen.emplace(s, std::make_pair(kv.max_pos(s), 0)).first;
    if (p <= it->second.first) {
      return error(ErrorCode::kInvalidArgument, "forward: position {} of sequence {} does not follow position {}", p,
                   s, it->second.first);
    }
    it->second = {p, it->second.second + 1};
  }
  for (const auto& [s, st] : seen) {
    for (int h = 0; h < ko.n_head_kv; ++h) {
      // The keep-everything cache grows every head alike; check layer 0 of each head.
      if (kv.size(0, s, h) + st.second > ko.capacity) {
        return error(ErrorCode::kOverBudget, "forward: sequence {} needs {} tokens of context but the cache holds {}",
                     s, kv.size(0, s, h) + st.second, ko.capacity);
      }
    }
  }
  return ok_status();
}

void Model::ensure_workspace(int64_t n) {
  Workspace& w = *ws_;
  if (n <= w.n_tokens) return;
  const ModelConfig& c = config_;
  const auto sz = [n](int64_t per) { return static_cast<size_t>(n * per); };
  w.x.resize(sz(c.n_embd));
  w.h.resize(sz(c.n_embd));
  w.q.resize(sz(c.n_head * c.head_dim));
  w.k.resize(sz(c.n_head_kv * c.head_dim));
  w.v.resize(sz(c.n_head_kv * c.head_dim));
  w.attn.resize(sz(c.n_head * c.head_dim));
  w.o.resize(sz(c.n_embd));
  w.gate.resize(sz(c.n_ff));
  w.up.resize(sz(c.n_ff));
  w.out.resize(sz(c.n_embd));
  w.n_tokens = n;
}

// One transformer block over n tokens, updating the residual stream ws_->x in place.
void Model::layer_forward(int il, const LayerStep& step) {
  const Batch& batch = step.batch;
  KvCache& kv = step.kv;
  Backend& be = step.be;
  const int64_t n = batch.size();
  const ModelConfig& c = config_;
  const LayerWeights& L = weights_.layers[static_cast<size_t>(il)];
  Workspace& w = *ws_;
  const int64_t kv_dim = c.n_head_kv * c.head_dim;
  const uint8_t skip = batch.skip_layers.empty() ? 0 : batch.skip_layers[static_cast<size_t>(il)];

  // Attention.
  if ((skip & Batch::kSkipAttention) == 0) {
    be.rms_norm(w.x.data(), L.attn_norm.data(), n, c.n_embd, c.rms_eps, w.h.data());
    be.matmul(L.wq, w.h.data(), n, w.q.data(), L.bq.empty() ? nullptr : L.bq.data());
    be.matmul(L.wk, w.h.data(), n, w.k.data(), L.bk.empty() ? nullptr : L.bk.data());
    be.matmul(L.wv, w.h.data(), n, w.v.data(), L.bv.empty() ? nullptr : L.bv.data());
    if (c.qk_norm) {
      be.rms_norm(w.q.data(), L.q_norm.data(), n * c.n_head, c.head_dim, c.rms_eps, w.q.data());
      be.rms_norm(w.k.data(), L.k_norm.data(), n * c.n_head_kv, c.head_dim, c.rms_eps, w.k.data());
    }
    be.rope(w.q.data(), n, c.n_head, c.head_dim, batch.pos.data(), c.rope);
    be.rope(w.k.data(), n, c.n_head_kv, c.head_dim, batch.pos.data(), c.rope);
    for (int64_t t = 0; t < n; ++t) {
      // Capacity was checked and room reserved for the whole batch before the first layer ran.
      (void)kv.append(il, batch.seq[static_cast<size_t>(t)], batch.pos[static_cast<size_t>(t)],
                      w.k.data() + t * kv_dim, w.v.data() + t * kv_dim);
    }
    AttentionParams ap;
    ap.n_head = static_cast<int>(c.n_head);
    ap.n_head_kv = static_cast<int>(c.n_head_kv);
    ap.head_dim = static_cast<int>(c.head_dim);
    ap.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    ap.window = c.sliding_window;
    if (step.observer) step.observer->before_attention(il, batch.seq.data(), batch.pos.data(), n, w.q.data(), ap);
    be.attention(w.q.data(), kv, il, batch.seq.data(), batch.pos.data(), n, ap, w.attn.data());
    if (step.observer) step.observer->after_attention(kv, il, batch.seq.data(), n);
    be.matmul(L.wo, w.attn.data(), n, w.o.data());
    be.add(w.x.data(), w.o.data(), n * c.n_embd);
  }
  if ((skip & Batch::kSkipMlp) != 0) return;

  // Feed-forward (SwiGLU).
  be.rms_norm(w.x.data(), L.ffn_norm.data(), n, c.n_embd, c.rms_eps, w.h.data());
  be.matmul(L.w_gate, w.h.data(), n, w.gate.data());
  be.matmul(L.w_up, w.h.data(), n, w.up.data());
  if (batch.row_invariant) {
    // One call per token, as a one-token pass makes it: where a call splits its elements between
    // vector code and a scalar tail depends on the call's length.
    for (int64_t t = 0; t < n; ++t) {
      be.swiglu(w.gate.data() + t * c.n_ff, w.up.data() + t * c.n_ff, c.n_ff, w.gate.data() + t * c.n_ff);
    }
  } else {
    be.swiglu(w.gate.data(), w.up.data(), n * c.n_ff, w.gate.data());
  }
  be.matmul(L.w_down, w.gate.data(), n, w.o.data());
  be.add(w.x.data(), w.o.data(), n * c.n_embd);
}

Status Model::forward(const Batch& batch, KvCache& kv, Backend& be, float* logits, AttentionObserver* observer) {
  return run_forward(batch, kv, be, logits, nullptr, observer);
}

Status Model::forward_greedy(const Batch& batch, KvCache& kv, Backend& be, int32_t* tokens,
                             AttentionObserver* observer) {
  return run_forward(batch, kv, be, nullptr, tokens, observer);
}

// On a backend that runs the pass whole, the observer cannot be called between a layer's rope and
// its attention: the backend copies the post-RoPE queries of each sequence's newest rows (as many
// as the observer keeps) off the device, or keeps them in rings there (Backend::keeps_queries),
// and the observer sees them (or their positions) after the pass, layer by layer, in the order the
// op-by-op path calls it. What the observers of eviction do with them (record
// queries for the next round between steps) does not depend on when within the step they come.
Result<bool> Model::forward_whole_observed(const Batch& batch, KvCache& kv, Backend& be, float* logits,
                                           int32_t* greedy, AttentionObserver& observer) {
  const int64_t n = batch.size();
  const int64_t keep = std::max<int32_t>(observer.recent_queries(), 0);
  std::vector<int32_t> rows, seq, pos;
  for (int64_t t = 0; t < n;) {
    int64_t e = t + 1;
    while (e < n && batch.seq[static_cast<size_t>(e)] == batch.seq[static_cast<size_t>(t)]) ++e;
    for (int64_t i = std::max(t, e - keep); i < e; ++i) {
      rows.push_back(static_cast<int32_t>(i));
      seq.push_back(batch.seq[static_cast<size_t>(i)]);
      pos.push_back(batch.pos[static_cast<size_t>(i)]);
    }
    t = e;
  }
  const ModelConfig& c = config_;
  const int64_t m = static_cast<int64_t>(rows.size());
  const size_t row = static_cast<size_t>(c.n_head * c.head_dim);
  QueryCapture cap;
  cap.rows = rows.data();
  cap.m = m;
  // Where the backend can keep them, the queries stay in rings beside its KV rows, and the
  // observer gets their positions only.
  const bool on_device = keep <= kMaxQueryRing && be.keeps_queries(static_cast<int>(c.n_head),
                                                                   static_cast<int>(c.n_head_kv), static_cast<int32_t>(keep));
  if (on_device) {
    cap.ring_rows = static_cast<int32_t>(keep);
    cap.seq = seq.data();
    cap.pos = pos.data();
  } else {
    captured_q_.resize(static_cast<size_t>(c.n_layer * m) * row);
    cap.out = captured_q_.data();
  }
  FRUGAL_ASSIGN_OR_RETURN(const bool done, be.forward_model(*this, batch, kv, logits, greedy, m > 0 ? &cap : nullptr));
  if (!done || m == 0) return done;
  AttentionParams ap;
  ap.n_head = static_cast<int>(c.n_head);
  ap.n_head_kv = static_cast<int>(c.n_head_kv);
  ap.head_dim = static_cast<int>(c.head_dim);
  ap.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  ap.window = c.sliding_window;
  for (int il = 0; il < c.n_layer; ++il) {
    observer.before_attention(il, seq.data(), pos.data(), m,
                              on_device ? nullptr : captured_q_.data() + static_cast<size_t>(il * m) * row, ap);
    observer.after_attention(kv, il, seq.data(), m);
  }
  return true;
}

Status Model::run_forward(const Batch& batch, KvCache& kv, Backend& be, float* logits, int32_t* greedy,
                          AttentionObserver* observer) {
  if (in_forward_.exchange(true, std::memory_order_acquire)) {
    return error(ErrorCode::kInvalidArgument,
                 "model: forward called from a second thread while one is running (a Model runs one batch at a "
                 "time; load it once per concurrent loop)");
  }
  struct Release {
    std::atomic<bool>& flag;
    ~Release() { flag.store(false, std::memory_order_release); }
  } release{in_forward_};
  FRUGAL_RETURN_IF_ERROR(check_batch(batch, kv));
  if (!batch.skip_layers.empty() && static_cast<int64_t>(batch.skip_layers.size()) != config_.n_layer) {
    return error(ErrorCode::kInvalidArgument, "forward: skip_layers has {} entries for {} layers",
                 batch.skip_layers.size(), config_.n_layer);
  }
  for (size_t il = 0; il < batch.skip_layers.size(); ++il) {
    if (batch.skip_layers[il] > Batch::kSkipLayer) {
      return error(ErrorCode::kInvalidArgument,
                   "forward: skip_layers[{}] = {} is not a sum of kSkipAttention and kSkipMlp", il,
                   batch.skip_layers[il]);
    }
  }
  // A backend that runs the pass whole (forward_model) runs every layer.
  if (observer == nullptr && batch.skip_layers.empty()) {
    FRUGAL_ASSIGN_OR_RETURN(const bool done, be.forward_model(*this, batch, kv, logits, greedy, nullptr));
    if (done) return ok_status();
  } else if (batch.skip_layers.empty()) {
    FRUGAL_ASSIGN_OR_RETURN(const bool done, forward_whole_observed(batch, kv, be, logits, greedy, *observer));
    if (done) return ok_status();
  }
  const int64_t n = batch.size();
  // Pages for every token of the step before any layer runs, so a full pool fails the step as a
  // whole (the engine reserves first and preempts; this covers other callers).
  {
    std::map<int32_t, int32_t> added;  // seq -> tokens of this step
    for (int64_t t = 0; t < n; ++t) ++added[batch.seq[static_cast<size_t>(t)]];
    for (const auto& [s, k] : added) FRUGAL_RETURN_IF_ERROR(kv.reserve(s, k));
  }
  ensure_workspace(n);
  Workspace& w = *ws_;
  // Back to batched kernels however this pass ends.
  struct RowInvariance {
    Backend& be;
    RowInvariance(Backend& b, bool on) : be(b) { be.set_row_invariant(on); }
    ~RowInvariance() { be.set_row_invariant(false); }
  } row_invariance(be, batch.row_invariant);
  const ModelConfig& c = config_;
  be.get_rows(weights_.token_embd, batch.tokens.data(), n, w.x.data());
  const LayerStep step{batch, kv, be, observer};
  for (int il = 0; il < c.n_layer; ++il) {
    if (batch.skip_layers.empty() || batch.skip_layers[static_cast<size_t>(il)] != Batch::kSkipLayer) {
      layer_forward(il, step);
    }
  }

  // Only the rows that asked for logits go through the final norm and the (large) output matrix.
  int64_t n_out = 0;
  for (int64_t t = 0; t < n; ++t) {
    if (!batch.want_logits[static_cast<size_t>(t)]) continue;
    std::copy_n(w.x.data() + t * c.n_embd, c.n_embd, w.out.data() + n_out * c.n_embd);
    ++n_out;
  }
  if (n_out == 0) return ok_status();
  be.rms_norm(w.out.data(), weights_.output_norm.data(), n_out, c.n_embd, c.rms_eps, w.out.data());
  if (greedy == nullptr) {
    be.matmul(weights_.output, w.out.data(), n_out, logits);
    return ok_status();
  }
  w.logits.resize(static_cast<size_t>(n_out * c.n_vocab));
  be.matmul(weights_.output, w.out.data(), n_out, w.logits.data());
  for (int64_t r = 0; r < n_out; ++r) {
    greedy[r] = greedy_token(std::span<const float>(w.logits.data() + r * c.n_vocab, static_cast<size_t>(c.n_vocab)));
  }
  return ok_status();
}

}  // namespace frugal
