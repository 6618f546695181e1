#include "frugal/decode/speculative/drafter.h"

#include "frugal/decode/speculative/conf_layers.h"
#include "frugal/decode/speculative/draft_model.h"
#include "frugal/decode/speculative/layer_skip.h"
#include "frugal/decode/speculative/memspec.h"
#include "frugal/decode/speculative/ngram.h"
#include "frugal/decode/speculative/swift.h"

namespace frugal::speculative {

const char* method_name(Method m) {
  switch (m) {
    case Method::kNone: return "none";
    case Method::kDraft: return "draft";
    case Method::kNgram: return "ngram";
    case Method::kLayerSkip: return "layerskip";
    case Method::kSwift: return "swift";
    case Method::kConfLayers: return "conflayers";
    case Method::kMemSpec: return "memspec";
  }
  return "none";
}

Result<Method> parse_method(const std::string& name) {
  if (name == "none") return Method::kNone;
  if (name == "draft") return Method::kDraft;
  if (name == "ngram") return Method::kNgram;
  if (name == "layerskip") return Method::kLayerSkip;
  if (name == "swift") return Method::kSwift;
  if (name == "conflayers") return Method::kConfLayers;
  if (name == "memspec") return Method::kMemSpec;
  return error(ErrorCode::kInvalidArgument,
               "speculative method '{}' is not none, draft, ngram, layerskip, swift, conflayers or memspec", name);
}

Status validate(const SpeculativeOptions& o) {
  if (o.k < 1 || o.k > 32) {
    return error(ErrorCode::kInvalidArgument, "speculative: spec-k = {} must be in [1, 32]", o.k);
  }
  if (o.candidates < 1 || o.candidates > kMaxCandidates) {
    return error(ErrorCode::kInvalidArgument, "speculative: spec-candidates = {} must be in [1, {}]", o.candidates,
                 kMaxCandidates);
  }
  if (o.candidates > 1 && o.method == Method::kMemSpec) {
    return error(ErrorCode::kInvalidArgument,
                 "speculative: spec-candidates = {} with memspec: its pool mixes drafts proposed with certainty (ngram) "
                 "and sampled ones; it verifies one draft per pass",
                 o.candidates);
  }
  if (o.method == Method::kMemSpec && o.draft_pool.size() < 2) {
    return error(ErrorCode::kInvalidArgument,
                 "speculative: --spec memspec needs a pool of at least two drafts (--spec-drafts ngram,a.gguf,...)");
  }
  if (o.method != Method::kMemSpec && !o.draft_pool.empty()) {
    return error(ErrorCode::kInvalidArgument, "speculative: --spec-drafts is the pool of --spec memspec, not of {}",
                 method_name(o.method));
  }
  if (o.candidates > 1 && o.method == Method::kNgram) {
    return error(ErrorCode::kInvalidArgument,
                 "speculative: spec-candidates = {} needs a drafter that samples its drafts (draft, layerskip, swift "
                 "or conflayers); "
                 "ngram proposes one continuation with certainty",
                 o.candidates);
  }
  if (o.skip_layers < 0) {
    return error(ErrorCode::kInvalidArgument, "speculative: spec-skip = {} must be >= 1 (0: half the middle layers)",
                 o.skip_layers);
  }
  const bool searches = o.method == Method::kSwift || o.method == Method::kConfLayers;
  if (!o.skip_set.empty() && !searches) {
    return error(ErrorCode::kInvalidArgument,
                 "speculative: spec-skip-set '{}' freezes the skip set of swift or conflayers, not of {}", o.skip_set,
                 method_name(o.method));
  }
  if (!(o.confidence >= 0.0 && o.confidence <= 1.0)) {
    return error(ErrorCode::kInvalidArgument, "speculative: spec-confidence = {} must be in [0, 1]", o.confidence);
  }
  if (o.search_every < 1) {
    return error(ErrorCode::kInvalidArgument, "speculative: spec-search-every = {} must be at least 1",
                 o.search_every);
  }
  if (o.ngram_max < 1 || o.ngram_max > 16) {
    return error(ErrorCode::kInvalidArgument, "speculative: ngram_max = {} must be in [1, 16]", o.ngram_max);
  }
  if (o.method == Method::kDraft && o.draft_model == nullptr && o.draft_path.empty()) {
    return error(ErrorCode::kInvalidArgument, "speculative: --spec draft needs a draft model (--draft MODEL.gguf)");
  }
  return ok_status();
}

Result<std::unique_ptr<Drafter>> make_drafter(const SpeculativeOptions& o, const DrafterContext& ctx) {
  FRUGAL_RETURN_IF_ERROR(validate(o));
  switch (o.method) {
    case Method::kNone: return std::unique_ptr<Drafter>();
    case Method::kNgram: return std::unique_ptr<Drafter>(std::make_unique<NgramDrafter>(o.ngram_max));
    case Method::kLayerSkip: {
      if (ctx.target == nullptr) return error(ErrorCode::kInvalidArgument, "speculative: no target model given");
      // Its passes run on the engine's thread between the engine's own, one at a time as a Model
      // requires.
      FRUGAL_ASSIGN_OR_RETURN(std::unique_ptr<LayerSkipDrafter> d,
                              LayerSkipDrafter::create(*ctx.target, o.skip_layers, o.draft_memory, ctx));
      return std::unique_ptr<Drafter>(std::move(d));
    }
    case Method::kSwift: {
      if (ctx.target == nullptr) return error(ErrorCode::kInvalidArgument, "speculative: no target model given");
      FRUGAL_ASSIGN_OR_RETURN(std::unique_ptr<SwiftDrafter> d, SwiftDrafter::create(*ctx.target, o, ctx));
      return std::unique_ptr<Drafter>(std::move(d));
    }
    case Method::kConfLayers: {
      if (ctx.target == nullptr) return error(ErrorCode::kInvalidArgument, "speculative: no target model given");
      FRUGAL_ASSIGN_OR_RETURN(std::unique_ptr<ConfLayersDrafter> d, ConfLayersDrafter::create(*ctx.target, o, ctx));
      return std::unique_ptr<Drafter>(std::move(d));
    }
    case Method::kMemSpec: {
      FRUGAL_ASSIGN_OR_RETURN(std::unique_ptr<MemSpecDrafter> d, MemSpecDrafter::create(o, ctx));
      return std::unique_ptr<Drafter>(std::move(d));
    }
    case Method::kDraft: {
      if (o.draft_model == nullptr) {
        return error(ErrorCode::kInvalidArgument, "speculative: the draft model {} was not loaded", o.draft_path);
      }
      FRUGAL_ASSIGN_OR_RETURN(std::unique_ptr<DraftModelDrafter> d,
                              DraftModelDrafter::create(*o.draft_model, o.draft_memory, ctx));
      return std::unique_ptr<Drafter>(std::move(d));
    }
  }
  return error(ErrorCode::kInvalidArgument, "speculative: unknown method {}", static_cast<int>(o.method));
}

}  // namespace frugal::speculative
