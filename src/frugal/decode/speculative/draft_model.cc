#include "frugal/decode/speculative/draft_model.h"

#include <algorithm>
#include <cmath>

#include "frugal/decode/speculative/acceptance.h"

namespace frugal::speculative {

namespace {
// A token's text for a one-line message: control bytes escaped ("\n", "\x01").
std::string printable(const std::string& token) {
  std::string out;
  for (const char ch : token) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += ch;
    }
  }
  return out;
}
// The largest softmax probability of a logits row.
double top_probability(const float* logits, size_t n) {
  const float top = *std::max_element(logits, logits + n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i] - top));
  return 1.0 / sum;
}
// The rank-th most likely token by logit other than `best` (rank >= 1; ties to the lower id): an
// alternative first token for a greedy chain. Which alternatives are tried never changes greedy
// output (a candidate is kept only when it is the target's argmax), so raw logits rank them.
TokenId ranked_alternative(const float* logits, size_t n, TokenId best, int32_t rank) {
  std::vector<TokenId> ids;
  ids.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (static_cast<TokenId>(i) != best) ids.push_back(static_cast<TokenId>(i));
  }
  if (ids.empty()) return best;
  const size_t r = std::min(static_cast<size_t>(rank), ids.size()) - 1;
  const auto better = [&](TokenId a, TokenId b) {
    const float la = logits[a], lb = logits[b];
    return la > lb || (la == lb && a < b);
  };
  std::nth_element(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(r), ids.end(), better);
  return ids[r];
}
}  // namespace

Status check_same_vocabulary(const Model& target, const Model& draft) {
  constexpr const char* kKey = "tokenizer.ggml.tokens";
  auto t = target.gguf().get_string_array(kKey);
  if (!t.ok()) return t.status().with_context("target model");
  auto d = draft.gguf().get_string_array(kKey);
  if (!d.ok()) return d.status().with_context("draft model");
  const size_t n = std::min(t->size(), d->size());
  for (size_t i = 0; i < n; ++i) {
    if ((*t)[i] != (*d)[i]) {
      return error(ErrorCode::kInvalidArgument,
                   "draft model: its vocabulary differs from the target's at token id {}: target '{}', draft '{}'", i,
                   printable((*t)[i]), printable((*d)[i]));
    }
  }
  if (t->size() != d->size()) {
    const bool target_longer = t->size() > d->size();
    return error(ErrorCode::kInvalidArgument,
                 "draft model: its vocabulary has {} tokens and the target's {}; they differ from token id {} "
                 "({} '{}', {} none)",
                 d->size(), t->size(), n, target_longer ? "target" : "draft",
                 printable(target_longer ? (*t)[n] : (*d)[n]),
                 target_longer ? "draft" : "target");
  }
  if (target.config().n_vocab != draft.config().n_vocab) {
    return error(ErrorCode::kInvalidArgument, "draft model: {} logits per token, the target {}",
                 draft.config().n_vocab, target.config().n_vocab);
  }
  return ok_status();
}

Result<std::unique_ptr<DraftModelDrafter>> DraftModelDrafter::create(Model& draft, uint64_t memory,
                                                                      const DrafterContext& ctx) {
  if (ctx.target == nullptr || ctx.backend == nullptr) {
    return error(ErrorCode::kInvalidArgument, "draft model: no target model or backend given");
  }
  FRUGAL_RETURN_IF_ERROR(check_same_vocabulary(*ctx.target, draft));
  const uint64_t draft_bytes = draft.weights().bytes;
  const uint64_t target_bytes = ctx.target->weights().bytes;
  const KvCacheOptions ko = draft.kv_options(ctx.n_slots, ctx.capacity, ctx.kv_dtype);
  const uint64_t kv_bytes = kv_reserved_bytes(ko);
  if (memory > 0 && draft_bytes + kv_bytes > memory) {
    return error(ErrorCode::kOverBudget,
                 "draft model: {} bytes of weights + {} bytes of KV cache ({} sequences x {} tokens) = {} bytes exceed "
                 "the draft memory budget of {} bytes",
                 draft_bytes, kv_bytes, ctx.n_slots, ctx.capacity, draft_bytes + kv_bytes, memory);
  }
  if (memory == 0 && draft_bytes >= target_bytes) {
    return error(ErrorCode::kOverBudget,
                 "draft model: its weights take {} bytes, the target's {}: a draft must be smaller than its target "
                 "(--draft-memory sets an explicit budget)",
                 draft_bytes, target_bytes);
  }
  FRUGAL_ASSIGN_OR_RETURN(KvCache kv, KvCache::create(ko));
  const double ratio = target_bytes > 0 ? static_cast<double>(draft_bytes) / static_cast<double>(target_bytes) : 1.0;
  std::unique_ptr<Backend> own = ctx.draft_on_cpu ? make_cpu_backend(CpuBackendOptions{}) : nullptr;
  return std::unique_ptr<DraftModelDrafter>(
      new DraftModelDrafter(draft, *ctx.backend, std::move(kv), ctx.n_slots, ratio, std::move(own)));
}

DraftModelDrafter::DraftModelDrafter(Model& draft, Backend& backend, KvCache kv, int n_slots, double cost_ratio,
                                     std::unique_ptr<Backend> own_backend)
    : own_backend_(std::move(own_backend)),
      draft_(draft),
      backend_(own_backend_ != nullptr ? *own_backend_ : backend),
      kv_(std::move(kv)),
      cached_(static_cast<size_t>(n_slots)),
      cost_ratio_(cost_ratio),
      n_vocab_(static_cast<int32_t>(draft.config().n_vocab)),
      probs_(static_cast<size_t>(n_vocab_)) {}

void DraftModelDrafter::set_skip_layers(std::vector<uint8_t> skip) {
  batch_.skip_layers = std::move(skip);
  for (size_t slot = 0; slot < cached_.size(); ++slot) {
    kv_.clear(static_cast<int>(slot));
    cached_[slot].clear();
  }
}

Status DraftModelDrafter::catch_up(std::span<const DraftSequence> seqs) {
  batch_.clear();
  for (const DraftSequence& s : seqs) {
    if (s.slot < 0 || static_cast<size_t>(s.slot) >= cached_.size() || s.tokens.empty()) {
      return error(ErrorCode::kInvalidArgument, "draft model: sequence slot {} with {} tokens", s.slot,
                   s.tokens.size());
    }
    std::vector<TokenId>& cached = cached_[static_cast<size_t>(s.slot)];
    // Keep the rows of the longest shared prefix; the last token is always fed (its logits).
    size_t keep = 0;
    const size_t limit = std::min(cached.size(), s.tokens.size() - 1);
    while (keep < limit && cached[keep] == s.tokens[keep]) ++keep;
    kv_.truncate(s.slot, static_cast<int32_t>(keep));
    cached.resize(keep);
    // A long prompt goes through in chunks of its own first; the last piece joins the batch.
    while (s.tokens.size() - cached.size() > static_cast<size_t>(kChunk)) {
      Batch chunk;
      chunk.skip_layers = batch_.skip_layers;
      for (int32_t i = 0; i < kChunk; ++i) {
        const auto p = static_cast<int32_t>(cached.size()) + i;
        chunk.add(s.tokens[static_cast<size_t>(p)], p, s.slot, false);
      }
      FRUGAL_RETURN_IF_ERROR(draft_.forward(chunk, kv_, backend_, nullptr));
      cached.insert(cached.end(), s.tokens.begin() + static_cast<ptrdiff_t>(cached.size()),
                    s.tokens.begin() + static_cast<ptrdiff_t>(cached.size()) + kChunk);
    }
    for (size_t p = cached.size(); p < s.tokens.size(); ++p) {
      batch_.add(s.tokens[p], static_cast<int32_t>(p), s.slot, p + 1 == s.tokens.size());
    }
    cached.assign(s.tokens.begin(), s.tokens.end());
  }
  logits_.resize(seqs.size() * static_cast<size_t>(n_vocab_));
  return draft_.forward(batch_, kv_, backend_, logits_.data());
}

Status DraftModelDrafter::propose(std::span<const DraftSequence> seqs, std::span<Draft> out) {
  if (out.size() != seqs.size()) {
    return error(ErrorCode::kInvalidArgument, "draft model: {} outputs for {} sequences", out.size(), seqs.size());
  }
  for (Draft& d : out) {
    d.tokens.clear();
    d.q.clear();
  }
  std::vector<size_t> live;  // sequences still drafting, in batch order (their logits rows)
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (seqs[i].max_tokens > 0 && seqs[i].sampler != nullptr) live.push_back(i);
  }
  if (live.empty()) return ok_status();
  std::vector<DraftSequence> active;
  for (size_t i : live) active.push_back(seqs[i]);
  FRUGAL_RETURN_IF_ERROR(catch_up(active));
  history_.resize(seqs.size());
  for (size_t i : live) history_[i].assign(seqs[i].tokens.begin(), seqs[i].tokens.end());
  const auto nv = static_cast<size_t>(n_vocab_);
  std::vector<uint8_t> stopped(seqs.size(), 0);  // drafting ended on low confidence
  for (;;) {
    // Draw the next token of every live sequence from its logits row.
    for (size_t r = 0; r < live.size(); ++r) {
      const size_t i = live[r];
      Sampler& s = *seqs[i].sampler;
      const float* row = logits_.data() + r * nv;
      if (stop_below_ > 0 && top_probability(row, nv) < stop_below_) {
        stopped[i] = 1;
        continue;
      }
      TokenId x;
      if (!(s.params().temperature > 0.0f)) {
        x = s.sample(row, history_[i]);  // greedy: the argmax after penalties, no draw
        if (seqs[i].rank > 0 && out[i].tokens.empty()) x = ranked_alternative(row, nv, x, seqs[i].rank);
      } else {
        s.distribution(row, history_[i], probs_.data());
        x = sample_distribution(probs_, s.uniform());
        out[i].q.insert(out[i].q.end(), probs_.begin(), probs_.end());
      }
      out[i].tokens.push_back(x);
      history_[i].push_back(x);
    }
    // Feed the new tokens of those that want more; the last draft is never fed (its row would
    // only matter if every draft is kept, and then the target's bonus token replaces it).
    std::vector<size_t> next;
    batch_.clear();
    for (size_t i : live) {
      if (stopped[i] || static_cast<int32_t>(out[i].tokens.size()) >= seqs[i].max_tokens) continue;
      std::vector<TokenId>& cached = cached_[static_cast<size_t>(seqs[i].slot)];
      batch_.add(out[i].tokens.back(), static_cast<int32_t>(cached.size()), seqs[i].slot, true);
      cached.push_back(out[i].tokens.back());
      next.push_back(i);
    }
    if (next.empty()) return ok_status();
    live.swap(next);
    FRUGAL_RETURN_IF_ERROR(draft_.forward(batch_, kv_, backend_, logits_.data()));
  }
}

}  // namespace frugal::speculative
