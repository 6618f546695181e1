// Speculative decoding: a cheap drafter proposes the next few tokens of a sequence, the target
// model scores all of them in one multi-token pass, and the acceptance rule (acceptance.h) keeps
// the longest prefix the target agrees with plus one token of the target's own. One drafter per
// file behind this interface (draft_model.h: a small model of the same vocabulary; ngram.h: lookup
// of the sequence's own earlier text); make_drafter() picks one by name. The engine owns the loop
// (engine/engine.cc): drafting, the verify pass, KV rollback of rejected tokens, emission.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "frugal/core/dtype.h"
#include "frugal/core/status.h"
#include "frugal/decode/sampler.h"
#include "frugal/decode/speculative/multi_candidate.h"

namespace frugal {
class Backend;
class Model;
}  // namespace frugal

namespace frugal::speculative {

// Values are frozen (logs and the request record name them).
enum class Method : int {
  kNone = 0,   // plain decoding
  kDraft = 1,  // a draft model (draft_model.h)
  kNgram = 2,  // prompt lookup (ngram.h)
  kLayerSkip = 3,  // the target with layers skipped (layer_skip.h)
  kSwift = 4,      // the target with sublayers skipped, the set searched online (swift.h)
  kConfLayers = 5,  // the target exiting early at a confidence-chosen layer (conf_layers.h)
  kMemSpec = 6,     // a pool of drafts under a memory budget, chosen per sequence (memspec.h)
};
const char* method_name(Method m);  // "none", "draft", "ngram", "layerskip", "swift", "conflayers", "memspec"

// How the memspec drafter picks among its pool (memspec.h).
enum class DraftSelector : int {
  kPredict = 0,  // predicted acceptance per sequence, proactive residency (MemSpec)
  kBandit = 1,   // UCB1 over the drafts, loading its pick on demand (the baseline)
};
const char* draft_selector_name(DraftSelector s);  // "predict", "bandit"
Result<DraftSelector> parse_draft_selector(const std::string& name);
Result<Method> parse_method(const std::string& name);

struct SpeculativeOptions {
  Method method = Method::kNone;
  int32_t k = 6;                 // most draft tokens per verify pass; the draft model adapts below it
  std::string draft_path;        // --draft: the draft model's GGUF (method kDraft)
  Model* draft_model = nullptr;  // that model, loaded by the caller (not owned)
  uint64_t draft_memory = 0;     // bytes the draft may take, weights + its KV cache; 0: only that
                                 // its weights be smaller than the target's
  int32_t ngram_max = 3;         // longest suffix the n-gram drafter looks up
  int32_t skip_layers = 0;       // --spec-skip: layers the layer-skip drafter skips (0: half the middle ones)
  // --spec-candidates: drafts per verify pass, each drawn independently from the draft and verified
  // together (chain_verify.h); 1: one draft, Leviathan / Chen's rule.
  int32_t candidates = 1;
  CandidateRule rule = CandidateRule::kStandard;  // --spec-rule: how the candidates are verified
  // Self-speculation with an online search (swift, conflayers):
  // --spec-confidence: drafting stops before a token whose top probability under the draft (its
  // raw logits, softmax) is below this; conflayers also picks its exit layer by it.
  double confidence = 0.8;
  // --spec-skip-set: the skip set frozen at this value (skip_set.h's text form), no search: the
  // audit's replay of what a search found.
  std::string skip_set;
  uint64_t search_seed = 0;      // --spec-seed: the search's random candidates (memspec: its exploration)
  int32_t search_every = 8;      // --spec-search-every: drafting calls between search steps
  // memspec: --spec-drafts, the pool ("ngram" or draft model paths), held within draft_memory bytes
  // of draft weights + KV caches (0: the largest draft's own footprint), and --spec-selector.
  std::vector<std::string> draft_pool;
  DraftSelector selector = DraftSelector::kPredict;
};
inline constexpr int32_t kMaxCandidates = 8;
// kInvalidArgument naming the field (k outside [1, 32], candidates outside [1, kMaxCandidates] or
// above 1 for a drafter whose proposals are certain, a draft method without a draft model).
Status validate(const SpeculativeOptions& o);

// One sequence to draft for.
struct DraftSequence {
  int slot = 0;                      // the sequence's slot (a drafter's per-sequence state lives there)
  std::span<const TokenId> tokens;   // prompt + generated; the last one is not yet in the target's KV
  int32_t max_tokens = 0;            // propose at most this many
  Sampler* sampler = nullptr;        // the request's sampling transform and a generator of the
                                     // drafter's own (draws here never move the target's stream)
  // Under greedy decoding, the first token is the draft's rank-th most likely one (0: its argmax),
  // so that the chains of one sequence differ; sampling ignores it (every chain is its own draw).
  int32_t rank = 0;
};

struct Draft {
  std::vector<TokenId> tokens;  // the proposed continuation (may be empty: nothing to propose)
  // [tokens.size()][n_vocab]: the distribution each token was drawn from, after the request's
  // sampling transform; empty when every token was proposed with certainty (q one-hot).
  std::vector<float> q;
  std::span<const float> q_row(size_t i, size_t n_vocab) const {
    return q.empty() ? std::span<const float>() : std::span<const float>(q).subspan(i * n_vocab, n_vocab);
  }
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual Method method() const = 0;
  // Proposes a continuation for each sequence (out[i] for seqs[i]); a drafter with a model of its
  // own runs all of them through one pass per draft position. A sequence's state is matched to its
  // tokens on every call, so rejected drafts, preemption and a new sequence in a slot need no
  // separate notice.
  virtual Status propose(std::span<const DraftSequence> seqs, std::span<Draft> out) = 0;
  // Cost of proposing one token relative to one target pass (adaptive draft length).
  virtual double cost_ratio() const = 0;
  // Self-speculation: the skip set now in use (skip_set.h's text form; empty for other drafters)
  // and the milliseconds its online search has taken so far.
  virtual std::string skip_set() const { return {}; }
  virtual double search_ms() const { return 0; }
  // A pool of drafts (memspec): each draft's passes, acceptance, loads and residency, one line.
  virtual std::string pool_report() const { return {}; }
};

// What a drafter is built for: the target, the backend that runs both, and the engine's sequence
// slots (a draft model keeps a KV cache of `capacity` tokens per slot).
struct DrafterContext {
  Model* target = nullptr;  // the layer-skip drafter runs it (on the engine's thread, between its passes)
  Backend* backend = nullptr;
  // A draft model runs on a CPU backend of its own instead of `backend`: a device backend holds
  // one model (the target) on its device, and runs the target's passes only whole.
  bool draft_on_cpu = false;
  int n_slots = 1;
  int32_t capacity = 0;
  DType kv_dtype = DType::kF16;
};

// The drafter of o.method (null for kNone). Refuses a draft model whose vocabulary differs from
// the target's (naming the first differing token id and both strings) or that does not fit its
// memory budget (naming the numbers).
Result<std::unique_ptr<Drafter>> make_drafter(const SpeculativeOptions& o, const DrafterContext& ctx);

}  // namespace frugal::speculative
