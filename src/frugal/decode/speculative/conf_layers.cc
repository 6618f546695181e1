#include "frugal/decode/speculative/conf_layers.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "frugal/decode/speculative/skip_set.h"

namespace frugal::speculative {

namespace {
double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Result<std::unique_ptr<ConfLayersDrafter>> ConfLayersDrafter::create(Model& target, const SpeculativeOptions& o,
                                                                      const DrafterContext& ctx) {
  if (ctx.backend == nullptr) return error(ErrorCode::kInvalidArgument, "conflayers drafter: no backend given");
  const auto n_layer = static_cast<int32_t>(target.config().n_layer);
  if (o.skip_layers != 0) {
    return error(ErrorCode::kInvalidArgument,
                 "speculative: spec-skip = {} does not apply to conflayers, which picks its exit layer by confidence "
                 "(--spec-confidence) or takes a frozen --spec-skip-set",
                 o.skip_layers);
  }
  if (!o.skip_set.empty()) {
    FRUGAL_ASSIGN_OR_RETURN(const std::vector<uint8_t> frozen, parse_skip_set(o.skip_set, n_layer));
    (void)frozen;
  }
  if (n_layer < 3) {
    return error(ErrorCode::kInvalidArgument,
                 "conflayers drafting needs at least 3 layers (an exit before the last); the model has {}", n_layer);
  }
  const KvCacheOptions ko = target.kv_options(ctx.n_slots, ctx.capacity, ctx.kv_dtype);
  const uint64_t kv_bytes = kv_reserved_bytes(ko);
  if (o.draft_memory > 0 && kv_bytes > o.draft_memory) {
    return error(ErrorCode::kOverBudget,
                 "conflayers drafter: its KV cache takes {} bytes ({} sequences x {} tokens), over the draft memory "
                 "budget of {} bytes",
                 kv_bytes, ctx.n_slots, ctx.capacity, o.draft_memory);
  }
  FRUGAL_ASSIGN_OR_RETURN(KvCache kv, KvCache::create(ko));
  return std::unique_ptr<ConfLayersDrafter>(new ConfLayersDrafter(target, *ctx.backend, std::move(kv), ctx.n_slots, o));
}

ConfLayersDrafter::ConfLayersDrafter(Model& target, Backend& backend, KvCache kv, int n_slots,
                                     const SpeculativeOptions& o)
    : DraftModelDrafter(target, backend, std::move(kv), n_slots, 1.0),
      threshold_(o.confidence),
      search_every_(std::max<int32_t>(1, o.search_every)),
      frozen_(!o.skip_set.empty()) {
  set_stop_below(o.confidence);
  if (frozen_) {
    in_use_ = *parse_skip_set(o.skip_set, static_cast<int32_t>(target.config().n_layer));
    set_skip_layers(in_use_);
    const double total = 2.0 * static_cast<double>(in_use_.size());
    set_cost_ratio((total - skipped_sublayers(in_use_)) / total);
  }
}

std::string ConfLayersDrafter::skip_set() const { return format_skip_set(in_use_); }

std::vector<uint8_t> ConfLayersDrafter::exit_set(int32_t n_layer, int32_t exit) {
  std::vector<uint8_t> skip(static_cast<size_t>(n_layer), 0);
  for (int32_t l = exit; l < n_layer; ++l) skip[static_cast<size_t>(l)] = Batch::kSkipLayer;
  return skip;
}

Status ConfLayersDrafter::choose_exit(std::span<const TokenId> tokens) {
  const double t0 = now_ms();
  Model& m = draft_model();
  const auto n_layer = static_cast<int32_t>(m.config().n_layer);
  const auto nv = static_cast<size_t>(m.config().n_vocab);
  const size_t n = std::min<size_t>(tokens.size(), kWindow);
  const std::span<const TokenId> window = tokens.subspan(tokens.size() - n);
  if (!scratch_) {
    FRUGAL_ASSIGN_OR_RETURN(KvCache kv, KvCache::create(m.kv_options(1, kWindow)));
    scratch_.emplace(std::move(kv));
  }
  window_logits_.resize(n * nv);
  confidences_.assign(static_cast<size_t>(n_layer - 2), std::numeric_limits<double>::quiet_NaN());
  int32_t exit = n_layer - 1;  // layers run: n_layer - 1 at most (all is the target itself)
  for (int32_t e = 1; e <= n_layer - 2; ++e) {
    // e + 1 layers run: 0..e.
    scratch_->clear(0);
    Batch b;
    b.skip_layers = exit_set(n_layer, e + 1);
    for (size_t p = 0; p < n; ++p) b.add(window[p], static_cast<int32_t>(p), 0, true);
    FRUGAL_RETURN_IF_ERROR(m.forward(b, *scratch_, backend(), window_logits_.data()));
    double sum = 0;
    for (size_t p = 0; p < n; ++p) {
      const float* row = window_logits_.data() + p * nv;
      const float top = *std::max_element(row, row + nv);
      double z = 0;
      for (size_t i = 0; i < nv; ++i) z += std::exp(static_cast<double>(row[i] - top));
      sum += 1.0 / z;
    }
    confidences_[static_cast<size_t>(e - 1)] = sum / static_cast<double>(n);
    if (sum / static_cast<double>(n) >= threshold_) {
      exit = e + 1;
      break;
    }
  }
  if (exit != exit_) {
    exit_ = exit;
    in_use_ = exit_set(n_layer, exit);
    set_skip_layers(in_use_);
    set_cost_ratio(static_cast<double>(exit) / static_cast<double>(n_layer));
  }
  search_ms_ += now_ms() - t0;
  return ok_status();
}

Status ConfLayersDrafter::propose(std::span<const DraftSequence> seqs, std::span<Draft> out) {
  ++calls_;
  if (!frozen_ && (calls_ == 1 || calls_ % search_every_ == 0)) {
    for (const DraftSequence& s : seqs) {
      if (s.max_tokens <= 0 || s.tokens.size() < 8) continue;
      FRUGAL_RETURN_IF_ERROR(choose_exit(s.tokens));
      break;
    }
  }
  if (in_use_.empty()) {  // nothing measured yet: the deepest exit
    const auto n_layer = static_cast<int32_t>(draft_model().config().n_layer);
    exit_ = n_layer - 1;
    in_use_ = exit_set(n_layer, exit_);
    set_skip_layers(in_use_);
    set_cost_ratio(static_cast<double>(exit_) / static_cast<double>(n_layer));
  }
  return DraftModelDrafter::propose(seqs, out);
}

}  // namespace frugal::speculative
