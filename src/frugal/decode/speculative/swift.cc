#include "frugal/decode/speculative/swift.h"

#include <algorithm>
#include <chrono>

#include "frugal/decode/speculative/skip_set.h"

namespace frugal::speculative {

namespace {
double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
// The middle layers' sublayers, numbered 2 (layer - 1) for attention and 2 (layer - 1) + 1 for the
// MLP of layers 1..n_layer - 2 (the first and the last layer always run).
int32_t middle_sublayers(int32_t n_layer) { return 2 * (n_layer - 2); }
}  // namespace

Result<std::unique_ptr<SwiftDrafter>> SwiftDrafter::create(Model& target, const SpeculativeOptions& o,
                                                            const DrafterContext& ctx) {
  if (ctx.backend == nullptr) return error(ErrorCode::kInvalidArgument, "swift drafter: no backend given");
  const auto n_layer = static_cast<int32_t>(target.config().n_layer);
  if (!o.skip_set.empty()) {
    FRUGAL_ASSIGN_OR_RETURN(const std::vector<uint8_t> frozen, parse_skip_set(o.skip_set, n_layer));
    (void)frozen;
  }
  if (n_layer < 3) {
    return error(ErrorCode::kInvalidArgument,
                 "swift drafting needs at least 3 layers (the first and last always run); the model has {}", n_layer);
  }
  int32_t n_skip = o.skip_layers == 0 ? std::max<int32_t>(1, middle_sublayers(n_layer) / 2) : o.skip_layers;
  if (n_skip < 1 || n_skip > middle_sublayers(n_layer)) {
    return error(ErrorCode::kInvalidArgument,
                 "speculative: spec-skip = {} must be in [1, {}] for swift (the middle layers' attention and MLP "
                 "sublayers)",
                 n_skip, middle_sublayers(n_layer));
  }
  const KvCacheOptions ko = target.kv_options(ctx.n_slots, ctx.capacity, ctx.kv_dtype);
  const uint64_t kv_bytes = kv_reserved_bytes(ko);
  if (o.draft_memory > 0 && kv_bytes > o.draft_memory) {
    return error(ErrorCode::kOverBudget,
                 "swift drafter: its KV cache takes {} bytes ({} sequences x {} tokens), over the draft memory budget "
                 "of {} bytes",
                 kv_bytes, ctx.n_slots, ctx.capacity, o.draft_memory);
  }
  FRUGAL_ASSIGN_OR_RETURN(KvCache kv, KvCache::create(ko));
  return std::unique_ptr<SwiftDrafter>(new SwiftDrafter(target, *ctx.backend, std::move(kv), ctx.n_slots, o, n_skip));
}

SwiftDrafter::SwiftDrafter(Model& target, Backend& backend, KvCache kv, int n_slots, const SpeculativeOptions& o,
                           int32_t n_skip)
    : DraftModelDrafter(target, backend, std::move(kv), n_slots, 1.0),
      n_skip_(n_skip),
      search_every_(std::max<int32_t>(1, o.search_every)),
      frozen_(!o.skip_set.empty()),
      rng_(o.search_seed ^ 0x5317f7ull),
      // Sets a sublayer apart are alike, four apart mostly not; matchness measured on ever new
      // windows is noisy, hence a noise of a third of the scores' variance.
      gp_(2.0, 0.3) {
  set_stop_below(o.confidence);
  if (frozen_) use(*parse_skip_set(o.skip_set, static_cast<int32_t>(target.config().n_layer)));
}

std::string SwiftDrafter::skip_set() const { return format_skip_set(in_use_); }

void SwiftDrafter::use(const std::vector<uint8_t>& skip) {
  in_use_ = skip;
  set_skip_layers(skip);
  // A draft token runs the sublayers left: about that share of a target pass.
  const double total = 2.0 * static_cast<double>(skip.size());
  set_cost_ratio((total - skipped_sublayers(skip)) / total);
}

std::vector<uint8_t> SwiftDrafter::random_set() {
  const auto n_layer = static_cast<int32_t>(draft_model().config().n_layer);
  std::vector<int32_t> units(static_cast<size_t>(middle_sublayers(n_layer)));
  for (size_t u = 0; u < units.size(); ++u) units[u] = static_cast<int32_t>(u);
  std::shuffle(units.begin(), units.end(), rng_);
  std::vector<uint8_t> skip(static_cast<size_t>(n_layer), 0);
  for (int32_t i = 0; i < n_skip_; ++i) {
    const int32_t u = units[static_cast<size_t>(i)];
    skip[static_cast<size_t>(1 + u / 2)] |= u % 2 == 0 ? Batch::kSkipAttention : Batch::kSkipMlp;
  }
  return skip;
}

std::vector<uint8_t> SwiftDrafter::bayes_pick() {
  double best = -1;
  for (const auto& m : measured_) best = std::max(best, gp_.predict(m).mean);
  std::vector<uint8_t> pick;
  double pick_ei = -1;
  for (int i = 0; i < kBayesPool; ++i) {
    std::vector<uint8_t> c = random_set();
    if (std::find(measured_.begin(), measured_.end(), c) != measured_.end()) continue;
    const double ei = gp_.expected_improvement(c, best);
    if (ei > pick_ei) {
      pick_ei = ei;
      pick = std::move(c);
    }
  }
  return pick.empty() ? random_set() : pick;  // every set drawn was measured already
}

Result<std::vector<TokenId>> SwiftDrafter::argmaxes(const std::vector<uint8_t>& skip,
                                                     std::span<const TokenId> window) {
  Model& m = draft_model();
  const auto nv = static_cast<size_t>(m.config().n_vocab);
  const auto n = static_cast<int32_t>(window.size());
  if (!scratch_) {
    FRUGAL_ASSIGN_OR_RETURN(KvCache kv, KvCache::create(m.kv_options(1, kWindow)));
    scratch_.emplace(std::move(kv));
  }
  scratch_->clear(0);
  Batch b;
  b.skip_layers = skip;
  for (int32_t p = 0; p < n; ++p) b.add(window[static_cast<size_t>(p)], p, 0, true);
  window_logits_.resize(static_cast<size_t>(n) * nv);
  FRUGAL_RETURN_IF_ERROR(m.forward(b, *scratch_, backend(), window_logits_.data()));
  std::vector<TokenId> out(static_cast<size_t>(n));
  for (int32_t p = 0; p < n; ++p) {
    const float* row = window_logits_.data() + static_cast<size_t>(p) * nv;
    out[static_cast<size_t>(p)] = static_cast<TokenId>(std::max_element(row, row + nv) - row);
  }
  return out;
}

Status SwiftDrafter::search_step(std::span<const TokenId> tokens) {
  const double t0 = now_ms();
  const size_t n = std::min<size_t>(tokens.size(), kWindow);
  const std::span<const TokenId> window = tokens.subspan(tokens.size() - n);
  std::vector<uint8_t> candidate;
  if (measured_.empty()) {
    candidate = in_use_.empty() ? random_set() : in_use_;
  } else if (steps_ % kBayesEvery == kBayesEvery - 1) {
    candidate = bayes_pick();
  } else {
    // A set not measured yet when one turns up within a few draws (small models have few sets).
    for (int i = 0; i < 16; ++i) {
      candidate = random_set();
      if (std::find(measured_.begin(), measured_.end(), candidate) == measured_.end()) break;
    }
  }
  FRUGAL_ASSIGN_OR_RETURN(const std::vector<TokenId> full, argmaxes({}, window));
  FRUGAL_ASSIGN_OR_RETURN(const std::vector<TokenId> got, argmaxes(candidate, window));
  int32_t matches = 0;
  for (size_t p = 0; p < n; ++p) matches += got[p] == full[p] ? 1 : 0;
  gp_.add(candidate, static_cast<double>(matches) / static_cast<double>(n));
  if (std::find(measured_.begin(), measured_.end(), candidate) == measured_.end()) measured_.push_back(candidate);
  ++steps_;
  // The measured set the posterior rates best.
  const std::vector<uint8_t>* best = &measured_.front();
  double best_mean = gp_.predict(*best).mean;
  for (const auto& m : measured_) {
    const double mean = gp_.predict(m).mean;
    if (mean > best_mean) {
      best = &m;
      best_mean = mean;
    }
  }
  if (in_use_.empty()) {
    use(*best);
  } else if (*best != in_use_ && best_mean > gp_.predict(in_use_).mean + kSwitchMargin) {
    use(*best);
    ++switches_;
  }
  search_ms_ += now_ms() - t0;
  return ok_status();
}

Status SwiftDrafter::propose(std::span<const DraftSequence> seqs, std::span<Draft> out) {
  ++calls_;
  if (!frozen_ && steps_ < kSearchSteps && (calls_ == 1 || calls_ % search_every_ == 0)) {
    for (const DraftSequence& s : seqs) {
      // The context must hold something to measure on.
      if (s.max_tokens <= 0 || s.tokens.size() < 8) continue;
      FRUGAL_RETURN_IF_ERROR(search_step(s.tokens));
      break;
    }
  }
  if (in_use_.empty()) use(random_set());
  return DraftModelDrafter::propose(seqs, out);
}

}  // namespace frugal::speculative
