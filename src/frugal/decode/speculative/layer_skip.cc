#include "frugal/decode/speculative/layer_skip.h"

#include <algorithm>
#include <random>

namespace frugal::speculative {

std::vector<std::vector<uint8_t>> layer_skip_candidates(int32_t n_layer, int32_t n_skip, int max_candidates) {
  const int32_t middle = n_layer - 2;
  std::vector<std::vector<uint8_t>> out;
  if (middle < 1 || n_skip < 1 || n_skip > middle) return out;
  // C(middle, n_skip), capped so the count never overflows.
  double count = 1;
  for (int32_t i = 0; i < n_skip; ++i) count = count * (middle - i) / (i + 1);
  if (count <= max_candidates) {
    std::vector<int32_t> pick(static_cast<size_t>(n_skip));
    for (int32_t i = 0; i < n_skip; ++i) pick[static_cast<size_t>(i)] = i;
    for (;;) {
      std::vector<uint8_t> mask(static_cast<size_t>(n_layer), 0);
      for (int32_t p : pick) mask[static_cast<size_t>(p + 1)] = Batch::kSkipLayer;
      out.push_back(std::move(mask));
      int32_t i = n_skip - 1;
      while (i >= 0 && pick[static_cast<size_t>(i)] == middle - n_skip + i) --i;
      if (i < 0) break;
      ++pick[static_cast<size_t>(i)];
      for (int32_t j = i + 1; j < n_skip; ++j) pick[static_cast<size_t>(j)] = pick[static_cast<size_t>(j - 1)] + 1;
    }
    return out;
  }
  std::mt19937_64 rng(0x5eed5eedull);
  std::vector<int32_t> layers(static_cast<size_t>(middle));
  for (int32_t i = 0; i < middle; ++i) layers[static_cast<size_t>(i)] = i + 1;
  while (static_cast<int>(out.size()) < max_candidates) {
    std::shuffle(layers.begin(), layers.end(), rng);
    std::vector<uint8_t> mask(static_cast<size_t>(n_layer), 0);
    for (int32_t i = 0; i < n_skip; ++i) mask[static_cast<size_t>(layers[static_cast<size_t>(i)])] = Batch::kSkipLayer;
    if (std::find(out.begin(), out.end(), mask) == out.end()) out.push_back(std::move(mask));
  }
  return out;
}

Result<std::unique_ptr<LayerSkipDrafter>> LayerSkipDrafter::create(Model& target, int32_t n_skip, uint64_t memory,
                                                                    const DrafterContext& ctx) {
  if (ctx.backend == nullptr) return error(ErrorCode::kInvalidArgument, "layer-skip drafter: no backend given");
  const auto n_layer = static_cast<int32_t>(target.config().n_layer);
  if (n_layer < 3) {
    return error(ErrorCode::kInvalidArgument,
                 "layer-skip drafting needs at least 3 layers (the first and last always run); the model has {}",
                 n_layer);
  }
  if (n_skip == 0) n_skip = std::max<int32_t>(1, (n_layer - 2) / 2);
  if (n_skip < 1 || n_skip > n_layer - 2) {
    return error(ErrorCode::kInvalidArgument, "speculative: spec-skip = {} must be in [1, {}] (the middle layers)",
                 n_skip, n_layer - 2);
  }
  const KvCacheOptions ko = target.kv_options(ctx.n_slots, ctx.capacity, ctx.kv_dtype);
  const uint64_t kv_bytes = kv_reserved_bytes(ko);
  if (memory > 0 && kv_bytes > memory) {
    return error(ErrorCode::kOverBudget,
                 "layer-skip drafter: its KV cache takes {} bytes ({} sequences x {} tokens), over the draft memory "
                 "budget of {} bytes",
                 kv_bytes, ctx.n_slots, ctx.capacity, memory);
  }
  FRUGAL_ASSIGN_OR_RETURN(KvCache kv, KvCache::create(ko));
  return std::unique_ptr<LayerSkipDrafter>(
      new LayerSkipDrafter(target, *ctx.backend, std::move(kv), ctx.n_slots, n_skip));
}

LayerSkipDrafter::LayerSkipDrafter(Model& target, Backend& backend, KvCache kv, int n_slots, int32_t n_skip)
    : DraftModelDrafter(target, backend, std::move(kv), n_slots,
                        // A draft token runs the layers left: that share of a target pass.
                        static_cast<double>(target.config().n_layer - n_skip) /
                            static_cast<double>(target.config().n_layer)),
      n_skip_(n_skip) {}

Status LayerSkipDrafter::choose(std::span<const TokenId> tokens) {
  Model& m = draft_model();
  const auto n_layer = static_cast<int32_t>(m.config().n_layer);
  const auto n_vocab = static_cast<size_t>(m.config().n_vocab);
  const auto n = static_cast<int32_t>(std::min<size_t>(tokens.size(), kScoreTokens));
  std::vector<std::vector<uint8_t>> candidates = layer_skip_candidates(n_layer, n_skip_, kMaxCandidates);
  if (candidates.empty()) return error(ErrorCode::kInvalidArgument, "layer-skip drafter: no candidate skip set");
  if (n < 2) {  // nothing to score on: the first candidate
    set_skip_layers(candidates.front());
    return ok_status();
  }
  FRUGAL_ASSIGN_OR_RETURN(KvCache scratch, KvCache::create(m.kv_options(1, n)));
  std::vector<float> logits(static_cast<size_t>(n) * n_vocab);
  const auto argmaxes = [&](const std::vector<uint8_t>& skip) -> Result<std::vector<TokenId>> {
    scratch.clear(0);
    Batch b;
    b.skip_layers = skip;
    for (int32_t p = 0; p < n; ++p) b.add(tokens[static_cast<size_t>(p)], p, 0, true);
    FRUGAL_RETURN_IF_ERROR(m.forward(b, scratch, backend(), logits.data()));
    std::vector<TokenId> out(static_cast<size_t>(n));
    for (int32_t p = 0; p < n; ++p) {
      const float* row = logits.data() + static_cast<size_t>(p) * n_vocab;
      out[static_cast<size_t>(p)] = static_cast<TokenId>(std::max_element(row, row + n_vocab) - row);
    }
    return out;
  };
  FRUGAL_ASSIGN_OR_RETURN(const std::vector<TokenId> full, argmaxes({}));
  size_t best = 0;
  int32_t best_matches = -1;
  for (size_t c = 0; c < candidates.size(); ++c) {
    FRUGAL_ASSIGN_OR_RETURN(const std::vector<TokenId> got, argmaxes(candidates[c]));
    int32_t matches = 0;
    for (int32_t p = 0; p < n; ++p) matches += got[static_cast<size_t>(p)] == full[static_cast<size_t>(p)] ? 1 : 0;
    if (matches > best_matches) {
      best = c;
      best_matches = matches;
    }
  }
  matchness_ = static_cast<double>(best_matches) / n;
  set_skip_layers(candidates[best]);
  return ok_status();
}

Status LayerSkipDrafter::propose(std::span<const DraftSequence> seqs, std::span<Draft> out) {
  if (!chosen_) {
    for (const DraftSequence& s : seqs) {
      if (s.max_tokens <= 0 || s.tokens.empty()) continue;
      FRUGAL_RETURN_IF_ERROR(choose(s.tokens));
      chosen_ = true;
      break;
    }
  }
  return DraftModelDrafter::propose(seqs, out);
}

}  // namespace frugal::speculative
