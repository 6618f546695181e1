#include "frugal/kv/eviction.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "frugal/core/half.h"
#include "frugal/kv/attention_probs.h"
#include "frugal/kv/kth_largest.h"
#include "frugal/kv/round_stats.h"

namespace frugal {
namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

uint64_t mix(uint64_t h, uint64_t v) {
  uint64_t z = h ^ (v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

Status validate(const KvPolicyOptions& o) {
  FRUGAL_ASSIGN_OR_RETURN(std::unique_ptr<KvPolicy> p, make_kv_policy(o.policy));
  if (!p->needs().evicts) return ok_status();
  if (o.buffer < 1) return error(ErrorCode::kInvalidArgument, "kv-buffer must be at least 1 (got {})", o.buffer);
  if (o.memory > 0 && o.budget == 0) return ok_status();  // the budget comes from the memory
  if (!(o.budget > 0) || (o.budget >= 1 && o.budget != std::floor(o.budget))) {
    return error(ErrorCode::kInvalidArgument,
                 "kv-budget for policy '{}' must be a token count (>= 1) or a fraction in (0, 1) (got {})", o.policy,
                 o.budget);
  }
  if (o.budget >= 1 && o.budget <= o.buffer) {
    return error(ErrorCode::kInvalidArgument, "kv-budget ({} tokens) must exceed kv-buffer ({})", o.budget, o.buffer);
  }
  return ok_status();
}

Result<KvBudgetBase> parse_kv_budget_base(const std::string& name) {
  if (name == "trace") return KvBudgetBase::kTrace;
  if (name == "generated") return KvBudgetBase::kGenerated;
  return error(ErrorCode::kInvalidArgument, "'{}' is not trace or generated", name);
}

const char* kv_budget_base_name(KvBudgetBase b) { return b == KvBudgetBase::kGenerated ? "generated" : "trace"; }

Result<std::unique_ptr<KvEvictor>> KvEvictor::create(const KvPolicyOptions& o, int32_t trace_len,
                                                     int32_t prompt_len) {
  FRUGAL_RETURN_IF_ERROR(validate(o));
  std::unique_ptr<KvEvictor> ev(new KvEvictor());
  ev->opts_ = o;
  FRUGAL_ASSIGN_OR_RETURN(ev->policy_, make_kv_policy(o.policy));
  ev->needs_ = ev->policy_->needs();
  ev->trace_len_ = trace_len;
  if (ev->needs_.evicts && o.budget > 0) {
    double b = o.budget;
    if (o.budget < 1) {
      const int32_t prompt = std::clamp(prompt_len, 0, std::max(trace_len, 0));
      b = o.budget_base == KvBudgetBase::kGenerated
              ? prompt + std::ceil(o.budget * std::max(trace_len - prompt, 1))
              : std::ceil(o.budget * std::max(trace_len, 1));
    }
    ev->stats_.budget = static_cast<int32_t>(std::min<double>(b, std::numeric_limits<int32_t>::max()));
    if (ev->stats_.budget <= o.buffer) {
      return error(ErrorCode::kInvalidArgument,
                   "kv-budget {} of the {} ({}-token trace, {}-token prompt) is {} tokens, which does not exceed "
                   "kv-buffer {} (lower the buffer or raise the budget)",
                   o.budget, kv_budget_base_name(o.budget_base), trace_len, prompt_len, ev->stats_.budget, o.buffer);
    }
  }
  return ev;
}

KvEvictor::~KvEvictor() = default;

int32_t KvEvictor::capacity(int32_t prompt_len, int32_t n_ctx) const {
  if (!evicts()) return n_ctx;
  const int64_t need = std::max<int64_t>(prompt_len, static_cast<int64_t>(stats_.budget) + opts_.buffer);
  return static_cast<int32_t>(std::min<int64_t>(need, n_ctx));
}

Result<int32_t> KvEvictor::fit_memory(const KvCacheOptions& shape, int32_t prompt_len, int32_t trace_len) {
  KvCacheOptions o = shape;
  o.quant = opts_.quant;
  FRUGAL_ASSIGN_OR_RETURN(int32_t tokens, kv_tokens_for_memory(o, opts_.memory));
  stats_.memory_tokens = tokens;
  if (!evicts()) {
    if (tokens < trace_len) {
      return error(ErrorCode::kOverBudget,
                   "kv-memory {} bytes holds {} tokens per (layer, KV head) with kv-quant {}, but policy '{}' keeps the "
                   "whole {}-token trace: raise kv-memory or choose an evicting kv-policy",
                   opts_.memory, tokens, kv_quant_name(opts_.quant), policy_->name(), trace_len);
    }
    return trace_len;
  }
  if (tokens < prompt_len || tokens - opts_.buffer <= opts_.buffer) {
    return error(ErrorCode::kOverBudget,
                 "kv-memory {} bytes holds {} tokens per (layer, KV head) with kv-quant {}; it must hold the {}-token "
                 "prompt and a budget above kv-buffer {} plus the buffer",
                 opts_.memory, tokens, kv_quant_name(opts_.quant), prompt_len, opts_.buffer);
  }
  const int32_t b = tokens - opts_.buffer;
  if (stats_.budget == 0 || b < stats_.budget) stats_.budget = b;
  return capacity(prompt_len, trace_len);
}

void KvEvictor::begin(KvCache& kv, int seq, int32_t prompt_len, int64_t stream) {
  cache_ = &kv;
  deferred_ = ok_status();
  if ((opts_.memory > 0 || kv.options().quant != opts_.quant) && kv.options().n_seq == 1 && kv.size(0, 0, 0) == 0) {
    KvCacheOptions o = kv.options();
    o.quant = opts_.quant;
    if (opts_.memory > 0) {
      Result<int32_t> cap = fit_memory(o, prompt_len, std::max(trace_len_, prompt_len));
      if (!cap.ok()) {
        deferred_ = cap.status();
      } else {
        o.capacity = *cap;
      }
    }
    if (deferred_.ok() && (o.capacity != kv.options().capacity || o.quant != kv.options().quant)) {
      Result<KvCache> fresh = KvCache::create(o);
      if (fresh.ok()) {
        kv = std::move(*fresh);
      } else {
        deferred_ = fresh.status();
      }
    }
  }
  begin_sequence(kv, seq, prompt_len, stream);
}

void KvEvictor::begin(KvTokenStore& kv, int seq, int32_t prompt_len, int64_t stream) {
  cache_ = nullptr;
  deferred_ = ok_status();
  begin_sequence(kv, seq, prompt_len, stream);
}

void KvEvictor::begin_sequence(KvTokenStore& kv, int seq, int32_t prompt_len, int64_t stream) {
  const KvStoreShape ko = kv.store_shape();
  if (n_seq_ != ko.n_seq || rings_.size() != static_cast<size_t>(ko.n_layer) * ko.n_seq) {
    n_seq_ = ko.n_seq;
    prompt_len_.assign(static_cast<size_t>(n_seq_), 0);
    stream_.assign(static_cast<size_t>(n_seq_), 0);
    round_no_.assign(static_cast<size_t>(n_seq_), 0);
    acc_pos_.assign(static_cast<size_t>(ko.n_layer) * n_seq_, -1);
    rings_.assign(static_cast<size_t>(ko.n_layer) * n_seq_, Ring{});
    ring_bytes_ = 0;
  }
  prompt_len_[static_cast<size_t>(seq)] = prompt_len;
  stream_[static_cast<size_t>(seq)] = static_cast<uint64_t>(stream >= 0 ? stream : seq);
  round_no_[static_cast<size_t>(seq)] = 0;
  for (int l = 0; l < ko.n_layer; ++l) {
    acc_pos_[static_cast<size_t>(l) * n_seq_ + seq] = -1;
    ring(l, seq).count = 0;
  }
  if (needs_.accumulated && !kv.enable_token_stats() && deferred_.ok()) {
    deferred_ = error(ErrorCode::kNotSupported,
                      "kv policy '{}' accumulates attention per token, which this cache (rows on the device) does not "
                      "keep",
                      policy_->name());
  }
}

namespace {
// v.assign(n, fill), keeping `bytes` (a running total of such vectors' capacities) up to date.
template <typename V>
void assign_counted(V& v, size_t n, typename V::value_type fill, uint64_t& bytes) {
  using T = typename V::value_type;
  bytes -= v.capacity() * sizeof(T);
  v.assign(n, fill);
  bytes += v.capacity() * sizeof(T);
}
}  // namespace

uint64_t KvEvictor::state_bytes() const {
  uint64_t b = ring_bytes_;
  for (const std::vector<float>* v : {&qmean_, &keys_, &probs_, &scores_, &sel_, &probs_scratch_, &attn_sum_,
                                      &attn_last_, &attn_fresh_, &sim_}) {
    b += v->capacity() * sizeof(float);
  }
  b += qrows_.capacity() * sizeof(const float*) + qrow_pos_.capacity() * sizeof(int32_t) +
       keep_.capacity() * sizeof(int32_t) + sel_keys_.capacity() * sizeof(uint32_t);
  return b;
}

uint64_t KvEvictor::ring_bytes_per_sequence(int n_layer, int n_head, int head_dim) {
  if (attention_observer() == nullptr || n_layer <= 0 || n_head <= 0 || head_dim <= 0) return 0;
  const uint64_t row = static_cast<uint64_t>(n_head) * static_cast<uint64_t>(head_dim) * sizeof(float);
  return static_cast<uint64_t>(n_layer) * static_cast<uint64_t>(opts_.buffer) * (row + sizeof(int32_t));
}

void KvEvictor::release_state() {
  for (Ring& rg : rings_) {
    decltype(rg.q)().swap(rg.q);
    std::vector<int32_t>().swap(rg.pos);
    rg.count = 0;
  }
  ring_bytes_ = 0;
  for (std::vector<float>* v : {&qmean_, &keys_, &probs_, &scores_, &sel_, &probs_scratch_, &attn_sum_, &attn_last_,
                                &attn_fresh_, &sim_}) {
    std::vector<float>().swap(*v);
  }
  std::vector<const float*>().swap(qrows_);
  std::vector<int32_t>().swap(qrow_pos_);
  std::vector<int32_t>().swap(keep_);
  std::vector<uint32_t>().swap(sel_keys_);
}

AttentionObserver* KvEvictor::attention_observer() {
  if ((!evicts() || !needs_.attention) && opts_.quant != KvQuant::kHyQuant) return nullptr;
  return this;
}

void KvEvictor::before_attention(int layer, const int32_t* seq, const int32_t* pos, int64_t n, const float* q,
                                 const AttentionParams& p) {
  attn_ = p;
  const size_t row = static_cast<size_t>(p.n_head) * p.head_dim;
  const int cap = opts_.buffer;
  for (int64_t t = 0; t < n; ++t) {
    const int s = seq[t];
    if (s < 0 || s >= n_seq_ || layer < 0 || static_cast<size_t>(layer) * n_seq_ >= rings_.size()) continue;
    Ring& rg = ring(layer, s);
    if (rg.pos.size() != static_cast<size_t>(cap)) assign_counted(rg.pos, static_cast<size_t>(cap), 0, ring_bytes_);
    const size_t slot = static_cast<size_t>(rg.count % cap);
    // Null: the backend kept the queries beside the rows (the store reads them at the round).
    rg.on_store = q == nullptr;
    if (q != nullptr) {
      if (rg.q.size() != row * cap) assign_counted(rg.q, row * cap, 0.f, ring_bytes_);
      std::memcpy(rg.q.data() + slot * row, q + static_cast<size_t>(t) * row, row * sizeof(float));
    }
    rg.pos[slot] = pos[t];
    ++rg.count;
  }
}

void KvEvictor::after_attention(KvCache& kv, int layer, const int32_t* seq, int64_t n) {
  if (opts_.quant != KvQuant::kHyQuant || cache_ != &kv || n <= 0 || attn_.n_head_kv != kv.options().n_head_kv) return;
  const int hd = attn_.head_dim, n_rep = attn_.n_head / attn_.n_head_kv;
  const size_t row = static_cast<size_t>(attn_.n_head) * hd;
  for (int64_t t = 0; t < n; ++t) {
    const int s = seq[t];
    if ((t > 0 && seq[t - 1] == s) || s < 0 || s >= n_seq_) continue;
    const Ring& rg = ring(layer, s);
    const int nq = static_cast<int>(std::min<int64_t>(rg.count, opts_.buffer));
    if (nq == 0 || rg.on_store) continue;
    // Mean over the group's heads and the recent queries: its dot product with a key is the mean
    // attention logit the key receives (HyQuant's vertical-line score).
    qmean_.assign(static_cast<size_t>(attn_.n_head_kv) * hd, 0.f);
    for (int j = 0; j < nq; ++j) {
      const float* q = rg.q.data() + static_cast<size_t>((rg.count - 1 - j) % opts_.buffer) * row;
      for (int h = 0; h < attn_.n_head; ++h) {
        float* m = qmean_.data() + static_cast<size_t>(h / n_rep) * hd;
        for (int c = 0; c < hd; ++c) m[c] += q[static_cast<size_t>(h) * hd + c];
      }
    }
    const float inv = 1.f / static_cast<float>(nq * n_rep);
    for (float& x : qmean_) x *= inv;
    kv.flush(layer, s, qmean_.data());
  }
}

Status KvEvictor::step(KvTokenStore& kv, int seq) {
  FRUGAL_RETURN_IF_ERROR(deferred_);
  stats_.peak_used_bytes = std::max(stats_.peak_used_bytes, kv.used_bytes(seq));
  if (!evicts()) return ok_status();
  if (kv.size(0, seq, 0) < stats_.budget + opts_.buffer) return ok_status();
  return round(kv, seq);
}

Status KvEvictor::round(KvTokenStore& kv, int seq) {
  const KvStoreShape ko = kv.store_shape();
  if (seq < 0 || seq >= n_seq_) {
    return error(ErrorCode::kInvalidArgument, "kv eviction: sequence {} was not begun (begin() before rounds)", seq);
  }
  FRUGAL_RETURN_IF_ERROR(deferred_);
  if (!evicts()) return ok_status();
  const auto t0 = Clock::now();
  // A store whose rows are on a device computes the statistics of every layer there, in one go.
  on_store_ = false;
  if (needs_.attention || needs_.similarity) {
    const auto ts = Clock::now();
    requests_.resize(static_cast<size_t>(ko.n_layer));
    for (int l = 0; l < ko.n_layer; ++l) {
      FRUGAL_RETURN_IF_ERROR(check_queries(ko, l, seq));
      requests_[static_cast<size_t>(l)] = stats_request(kv, l, seq);
    }
    FRUGAL_ASSIGN_OR_RETURN(on_store_, kv.round_stats(seq, requests_, layer_stats_));
    for (int l = 0; l < ko.n_layer && !on_store_ && needs_.attention; ++l) {
      if (requests_[static_cast<size_t>(l)].queries == nullptr) {
        return error(ErrorCode::kNotSupported,
                     "kv eviction: layer {}'s recorded queries stayed on the device, and the store could not "
                     "compute the round's statistics there",
                     l);
      }
    }
    if (on_store_ && layer_stats_.size() != static_cast<size_t>(ko.n_layer)) {
      return error(ErrorCode::kInvalidArgument, "kv eviction: the store gave statistics for {} layers, not {}",
                   layer_stats_.size(), ko.n_layer);
    }
    stats_.stats_ms += ms_since(ts);
  }
  for (int l = 0; l < ko.n_layer; ++l) FRUGAL_RETURN_IF_ERROR(round_layer(kv, l, seq));
  ++round_no_[static_cast<size_t>(seq)];
  ++stats_.rounds;
  stats_.round_ms += ms_since(t0);
  return ok_status();
}

Status KvEvictor::check_queries(const KvStoreShape& ko, int layer, int seq) {
  if (!needs_.attention) return ok_status();
  if (ring(layer, seq).count == 0) {
    return error(ErrorCode::kInvalidArgument,
                 "kv policy '{}' reads attention but no queries were recorded for layer {} (pass "
                 "KvEvictor::attention_observer() to Model::forward)",
                 policy_->name(), layer);
  }
  if (attn_.head_dim != ko.head_dim || attn_.n_head_kv != ko.n_head_kv || attn_.n_head % ko.n_head_kv != 0) {
    return error(ErrorCode::kInvalidArgument, "kv eviction: recorded queries do not match the cache shape");
  }
  return ok_status();
}

// The layer's recorded queries as they sit in its ring (oldest first from rg.count - nq).
RoundStatsRequest KvEvictor::stats_request(const KvTokenStore& kv, int layer, int seq) {
  const Ring& rg = ring(layer, seq);
  const int32_t buffer = opts_.buffer;
  // tova reads the newest query's attention only: the others are not computed.
  const int nq = static_cast<int>(std::min<int64_t>(rg.count, needs_.newest_query_only ? 1 : buffer));
  RoundStatsRequest rq;
  rq.queries = rg.on_store || rg.q.empty() ? nullptr : rg.q.data();
  rq.query_pos = rg.pos.data();
  rq.nq = nq;
  rq.ring_rows = buffer;
  rq.first = static_cast<int>((rg.count - nq) % buffer);
  rq.n_head = attn_.n_head;
  rq.head_dim = attn_.head_dim;
  rq.scale = attn_.scale;
  rq.window = attn_.window;
  rq.fresh_after = acc_pos_[static_cast<size_t>(layer) * n_seq_ + seq];
  rq.attention = needs_.attention;
  rq.similarity_candidates = needs_.similarity ? std::max(0, kv.size(layer, seq, 0) - buffer) : 0;
  return rq;
}

// probs_[r][j][slot]: softmax of each recorded query (oldest first) of the group's query
// heads over the slots it could see when it ran; eviction only happens at rounds, so those are
// exactly the weights the model used (slots evicted since are gone from both).
void KvEvictor::attention_probs(const KvTokenStore& kv, const RoundStatsRequest& rq, int layer, int seq, int head,
                                int32_t n) {
  const int nq = rq.nq;
  const int hd = attn_.head_dim;
  const int n_rep = attn_.n_head / attn_.n_head_kv;
  qrows_.resize(static_cast<size_t>(n_rep) * nq);
  qrow_pos_.resize(qrows_.size());
  for (int r = 0; r < n_rep; ++r) {
    const int qh = head * n_rep + r;
    for (int j = 0; j < nq; ++j) {
      const size_t row = static_cast<size_t>(r) * nq + j;
      qrows_[row] = request_query(rq, j) + static_cast<size_t>(qh) * hd;
      qrow_pos_[row] = request_pos(rq, j);
    }
  }
  probs_.resize(qrows_.size() * static_cast<size_t>(n));
  const ProbsQueries q{qrows_.data(), qrow_pos_.data(), static_cast<int>(qrows_.size())};
  frugal::attention_probs(q, keys_.data(), kv.positions(layer, seq, head), n, hd, attn_.scale, attn_.window,
                          probs_.data(), probs_scratch_);
}

Status KvEvictor::round_layer(KvTokenStore& kv, int layer, int seq) {
  const KvStoreShape ko = kv.store_shape();
  // The queries this round computes (round() built the layer's request when the policy reads
  // attention).
  const int nq = needs_.attention ? requests_[static_cast<size_t>(layer)].nq : 0;
  const int32_t buffer = opts_.buffer;
  const int32_t n_keep = stats_.budget - buffer;
  const int32_t prompt_len = prompt_len_[static_cast<size_t>(seq)];
  const int64_t round = round_no_[static_cast<size_t>(seq)];
  int32_t& acc_pos = acc_pos_[static_cast<size_t>(layer) * n_seq_ + seq];
  int32_t newest_q = acc_pos;
  // needs.accumulated implies needs.attention: round() built this layer's request.
  for (int j = 0; j < nq && needs_.accumulated; ++j) {
    newest_q = std::max(newest_q, request_pos(requests_[static_cast<size_t>(layer)], j));
  }
  const bool on_store = on_store_;
  std::vector<HeadRoundStats>* head_stats = on_store ? &layer_stats_[static_cast<size_t>(layer)] : nullptr;
  if (head_stats != nullptr && head_stats->size() != static_cast<size_t>(ko.n_head_kv)) {
    return error(ErrorCode::kInvalidArgument, "kv eviction: the store gave statistics for {} heads of layer {}, not {}",
                 head_stats->size(), layer, ko.n_head_kv);
  }
  for (int h = 0; h < ko.n_head_kv; ++h) {
    const int32_t n = kv.size(layer, seq, h);
    KvHeadView v;
    v.layer = layer;
    v.seq = seq;
    v.head = h;
    v.n = n;
    v.n_cand = std::max(0, n - buffer);
    v.n_keep = n_keep;
    v.positions = kv.positions(layer, seq, h);
    v.head_dim = ko.head_dim;
    v.seed = mix(mix(mix(mix(opts_.seed, stream_[static_cast<size_t>(seq)]), static_cast<uint64_t>(round)),
                     static_cast<uint64_t>(layer)),
                 static_cast<uint64_t>(h));
    // H2O must see every query once, even in a round that leaves this head alone.
    const bool cut = v.n_cand > n_keep;
    if (!cut && !needs_.accumulated) continue;
    HeadRoundStats* hs = on_store ? &(*head_stats)[static_cast<size_t>(h)] : nullptr;
    if (hs != nullptr && ((needs_.attention && hs->attention.size() != static_cast<size_t>(n)) ||
                          (needs_.similarity && hs->similarity.size() < static_cast<size_t>(v.n_cand)))) {
      return error(ErrorCode::kInvalidArgument, "kv eviction: the store's statistics of layer {} head {} do not cover its {} tokens",
                   layer, h, n);
    }
    if (needs_.keys || (hs == nullptr && (needs_.attention || needs_.similarity))) {
      keys_.resize(static_cast<size_t>(n) * ko.head_dim);
      kv.read_rows(layer, seq, h, keys_.data(), nullptr);
      if (needs_.keys) v.keys = keys_.data();
    }
    const auto ts = Clock::now();
    if (needs_.attention) {
      v.n_rep = attn_.n_head / attn_.n_head_kv;
      v.n_queries = nq;
      const float* fresh = nullptr;
      if (hs != nullptr) {
        v.attention = hs->attention.data();
        v.attention_last = hs->last.data();
        fresh = hs->fresh.data();
      } else {
        attention_probs(kv, requests_[static_cast<size_t>(layer)], layer, seq, h, n);
        attn_sum_.resize(static_cast<size_t>(n));
        attn_last_.resize(attn_sum_.size());
        attn_fresh_.resize(attn_sum_.size());
        reduce_attention(probs_.data(), v.n_rep, nq, n, qrow_pos_.data(), acc_pos, attn_sum_.data(), attn_last_.data(),
                         attn_fresh_.data());
        v.attention = attn_sum_.data();
        v.attention_last = attn_last_.data();
        fresh = attn_fresh_.data();
      }
      if (needs_.accumulated) {
        float* acc = kv.token_stats(layer, seq, h);
        for (int32_t i = 0; i < n; ++i) acc[i] += fresh[i];
        v.accumulated = acc;
      }
    }
    if (needs_.similarity) {
      if (hs != nullptr) {
        v.similarity = hs->similarity.data();
      } else {
        sim_.resize(static_cast<size_t>(v.n_cand));
        key_similarity(keys_.data(), v.n_cand, ko.head_dim, sim_.data());
        v.similarity = sim_.data();
      }
    }
    stats_.stats_ms += ms_since(ts);
    if (!cut) continue;
    int32_t pinned = 0;
    if (opts_.protect_prompt) {
      while (pinned < v.n_cand && v.positions[pinned] < prompt_len) ++pinned;
      pinned = std::min(pinned, n_keep - 1);  // as the authors: one slot at least stays contested
    }
    FRUGAL_RETURN_IF_ERROR(kv.keep_tokens(layer, seq, h, select(v, pinned)));
  }
  acc_pos = newest_q;
  return ok_status();
}

// The n_keep best candidates (pinned first, then by score, ties to the older slot, NaN below
// every number), in time order, followed by the buffer. O(n): the n_keep-th best score is found
// by radix selection on the scores' bits (kv/kth_largest.h), then one pass in slot order takes
// every candidate above it and, oldest first, as many equal to it as are still needed, so the
// result needs no sort (a round of an 8B-shaped model selects in 256 heads; a comparator-driven
// nth_element plus a sort there cost ~20 us a head; with nth_element alone a window round took
// 8.3 us a head at 592 tokens, with the radix selection 4.3: bench/eviction_round_bench).
const std::vector<int32_t>& KvEvictor::select(const KvHeadView& v, int32_t pinned) {
  scores_.resize(static_cast<size_t>(v.n_cand));
  policy_->score(v, scores_.data());
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (int32_t i = 0; i < pinned; ++i) scores_[static_cast<size_t>(i)] = kInf;
  keep_.clear();
  const int32_t k = std::clamp(v.n_keep, 0, v.n_cand);
  int32_t numbers = 0;
  sel_.clear();  // the scores that are numbers, for the selection
  for (int32_t i = 0; i < v.n_cand; ++i) {
    const float x = scores_[static_cast<size_t>(i)];
    if (!std::isnan(x)) {
      sel_.push_back(x);
      ++numbers;
    }
  }
  if (k > 0 && numbers >= k) {
    // The k-th largest number: everything above it is kept, then ties in slot order.
    const float t = kth_largest(sel_, k, sel_keys_);
    int32_t above = 0;
    for (float x : sel_) above += x > t ? 1 : 0;
    int32_t ties = k - above;
    for (int32_t i = 0; i < v.n_cand; ++i) {
      const float x = scores_[static_cast<size_t>(i)];
      if (x > t || (x == t && ties-- > 0)) keep_.push_back(i);
    }
  } else if (k > 0) {
    // Fewer numbers than places: all of them, then the oldest NaNs.
    int32_t nans = k - numbers;
    for (int32_t i = 0; i < v.n_cand; ++i) {
      if (!std::isnan(scores_[static_cast<size_t>(i)]) || nans-- > 0) keep_.push_back(i);
    }
  }
  for (int32_t i = v.n_cand; i < v.n; ++i) keep_.push_back(i);
  return keep_;
}

}  // namespace frugal
