// One sequence through the engine (engine.h) as a batch of one: the same loop, stop rules, KV
// state and timings as a request to `frugal serve`, with the options `frugal run` and `frugal eval`
// name. Also the home of those options' names (set_generate_option), which the CLI's engine flags
// and `eval --set/--sweep` share.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "frugal/backend/backend.h"
#include "frugal/decode/sampler.h"
#include "frugal/decode/speculative/drafter.h"
#include "frugal/engine/request.h"
#include "frugal/kv/eviction.h"
#include "frugal/model/model.h"
#include "frugal/tokenize/tokenizer.h"

namespace frugal {

struct GenerateOptions {
  int32_t n_predict = 128;     // tokens to generate at most; -1: until EOS or the context is full
  int32_t n_ctx = 0;           // context (prompt + generated); 0: the model's training context
  int32_t n_batch = 512;       // prompt tokens per forward call during prefill
  bool ignore_eos = false;     // keep going past end-of-generation tokens (benchmarks)
  std::vector<std::string> stop;  // stop strings (not included in the text)
  SamplingParams sampling;
  DType kv_dtype = DType::kF16;
  KvPolicyOptions kv_policy;   // eviction between decode steps (default `full`: none), KV
                               // quantization (kv_policy.quant) and memory budget (kv_policy.memory)
  // Speculative decoding (method none: plain). A draft method needs spec.draft_model loaded by the
  // caller (spec.draft_path only names it); any method makes speculation required, so an option
  // it cannot run with (eviction, KV quantization) is refused, not silently decoded plainly.
  speculative::SpeculativeOptions spec;
  // Sparse prefill attention (method none: dense); handed to the backend by the engine.
  sparse::PrefillSparseOptions prefill_sparse;
  // TileMix mixed-precision prefill attention (fraction 0: float); handed to the backend by the engine.
  tilemix::TileMixOptions tilemix;
};

struct GenerateResult {
  std::string text;
  std::vector<TokenId> prompt_tokens;
  std::vector<TokenId> tokens;        // generated, including a final EOS if one was sampled
  std::string stop_reason;            // finish_reason_name(): "eos", "stop", "length", "context", "cancelled"
  Timings timings;
  uint64_t kv_bytes = 0;              // KV cache reserved for this generation
  KvEvictionStats kv_eviction;        // rounds, their time, peak live KV bytes
  SpeculativeStats speculative;       // verify passes, drafted and accepted tokens
};

// Called with each newly completed piece of text (never part of a stop string); return false to
// stop early ("cancelled").
using TextCallback = std::function<bool(const std::string&)>;

Result<GenerateResult> generate(Model& model, const Tokenizer& tok, Backend& backend,
                                const std::vector<TokenId>& prompt, const GenerateOptions& opts,
                                const TextCallback& on_text = nullptr);

}  // namespace frugal

namespace frugal {

// Sets one generation option by its CLI name ("kv-type", "temp", "top-k", "top-p", "min-p",
// "seed", "n-batch", "ctx-size", "n-predict", "kv-policy", "kv-budget", "kv-buffer",
// "kv-budget-of", "kv-protect-prompt", "kv-seed", "kv-quant", "kv-memory", "spec", "spec-k",
// "spec-skip", "spec-candidates", "spec-rule", "draft", "draft-memory"), so `eval --sweep NAME=v1,v2` and reference
// configurations can name any of them, and the CLI's engine flags parse their values here too.
// kInvalidArgument names the option and the bad value; `label` is how messages name the option
// (empty: "option NAME"; the CLI passes "--NAME").
Status set_generate_option(GenerateOptions& opts, const std::string& name, const std::string& value,
                           const std::string& label = "");
// The names set_generate_option accepts.
std::vector<std::string> generate_option_names();
// "kv-type=f16 temp=0 ..." for reports.
std::string describe_generate_options(const GenerateOptions& opts);

}  // namespace frugal
