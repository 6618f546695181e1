#include "frugal/engine/generate.h"

#include "frugal/core/parse_size.h"
#include "frugal/engine/engine.h"

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace frugal {

Result<GenerateResult> generate(Model& model, const Tokenizer& tok, Backend& backend,
                                const std::vector<TokenId>& prompt, const GenerateOptions& opts,
                                const TextCallback& on_text) {
  const int32_t n_ctx = opts.n_ctx > 0 ? opts.n_ctx : static_cast<int32_t>(model.config().n_ctx_train);
  if (prompt.empty()) return error(ErrorCode::kInvalidArgument, "the prompt is empty (no tokens)");
  if (static_cast<int64_t>(prompt.size()) >= n_ctx) {
    return error(ErrorCode::kInvalidArgument, "the prompt has {} tokens but the context holds {} (raise -c)",
                 prompt.size(), n_ctx);
  }
  if (opts.n_batch <= 0) return error(ErrorCode::kInvalidArgument, "n_batch must be positive");
  GenerateResult res;
  res.prompt_tokens = prompt;
  res.stop_reason = "length";
  if (opts.n_predict == 0) return res;  // nothing asked for: the prompt is not run

  // A batch of one: one slot of exactly the context, prefill chunks of n_batch, no prefix cache
  // (nothing runs before it), and a queue that never times it out.
  EngineOptions eo;
  eo.n_parallel = 1;
  eo.n_ctx = n_ctx;
  eo.kv_dtype = opts.kv_dtype;
  eo.max_step_tokens = opts.n_batch;
  eo.max_waiting = 1;
  eo.queue_timeout_s = std::numeric_limits<double>::infinity();
  eo.prefix_cache = false;
  eo.kv = opts.kv_policy;
  eo.spec = opts.spec;
  eo.prefill_sparse = opts.prefill_sparse;
  eo.tilemix = opts.tilemix;
  FRUGAL_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::create(model, tok, backend, eo));
  RequestOptions req;
  req.prompt = prompt;
  req.sampling = opts.sampling;
  req.max_tokens = opts.n_predict > 0 ? opts.n_predict : -1;
  req.stop = opts.stop;
  req.ignore_eos = opts.ignore_eos;
  if (opts.spec.method != speculative::Method::kNone) req.speculative = true;
  const sparse::PrefillSparseStats sparse_before = backend.prefill_sparse_stats();
  const tilemix::TileMixStats mix_before = backend.tilemix_stats();
  FRUGAL_ASSIGN_OR_RETURN(std::shared_ptr<RequestHandle> handle, engine->submit(std::move(req)));

  RequestUpdate u;
  for (;;) {
    if (!handle->wait(u, std::chrono::milliseconds(100))) continue;
    for (const TokenOutput& t : u.tokens) res.tokens.push_back(t.id);
    if (!u.text.empty()) {
      res.text += u.text;
      if (on_text && !on_text(u.text)) handle->cancel();
    }
    if (u.done) break;
  }
  const FinishedRequest& f = u.finished;
  if (f.reason == FinishReason::kError) return f.error;
  res.stop_reason = finish_reason_name(f.reason);
  res.timings = f.timings;
  // The backend's counters over this request alone (it is the only one the engine runs).
  const sparse::PrefillSparseStats sparse_after = backend.prefill_sparse_stats();
  sparse::PrefillSparseStats& ps = res.timings.prefill_sparse;
  ps.sparse_calls = sparse_after.sparse_calls - sparse_before.sparse_calls;
  ps.dense_calls = sparse_after.dense_calls - sparse_before.dense_calls;
  ps.blocks_kept = sparse_after.blocks_kept - sparse_before.blocks_kept;
  ps.blocks_causal = sparse_after.blocks_causal - sparse_before.blocks_causal;
  ps.select_ms = sparse_after.select_ms - sparse_before.select_ms;
  ps.heads_vertical_slash = sparse_after.heads_vertical_slash - sparse_before.heads_vertical_slash;
  ps.heads_query_aware = sparse_after.heads_query_aware - sparse_before.heads_query_aware;
  ps.route_ms = sparse_after.route_ms - sparse_before.route_ms;
  res.timings.prefill_sparse_method = sparse::method_name(opts.prefill_sparse.method);
  res.timings.prefill_sparse_short_prompt =
      static_cast<int64_t>(prompt.size()) < static_cast<int64_t>(opts.prefill_sparse.min_blocks) * sparse::kSparseBlock;
  if (opts.tilemix.enabled()) {
    const tilemix::TileMixStats mix_after = backend.tilemix_stats();
    tilemix::TileMixStats& tm = res.timings.tilemix;
    tm.routed_calls = mix_after.routed_calls - mix_before.routed_calls;
    tm.float_calls = mix_after.float_calls - mix_before.float_calls;
    tm.tiles_int8 = mix_after.tiles_int8 - mix_before.tiles_int8;
    tm.tiles_total = mix_after.tiles_total - mix_before.tiles_total;
    tm.route_ms = mix_after.route_ms - mix_before.route_ms;
    res.timings.tilemix_int8 = opts.tilemix.int8_fraction;
    res.timings.tilemix_short_prompt =
        static_cast<int64_t>(prompt.size()) < static_cast<int64_t>(opts.tilemix.min_blocks) * sparse::kSparseBlock;
  }
  res.kv_bytes = f.kv_bytes;
  res.kv_eviction = f.kv;
  res.speculative = f.speculative;
  return res;
}

}  // namespace frugal

namespace frugal {
namespace {

Result<double> parse_number(const std::string& label, const std::string& value) {
  try {
    size_t used = 0;
    const double v = std::stod(value, &used);
    if (used != value.size()) throw std::invalid_argument(value);
    return v;
  } catch (const std::exception&) {
    return error(ErrorCode::kInvalidArgument, "{}: '{}' is not a number", label, value);
  }
}

Result<int32_t> parse_int(const std::string& label, const std::string& value) {
  FRUGAL_ASSIGN_OR_RETURN(double v, parse_number(label, value));
  if (v != static_cast<double>(static_cast<int64_t>(v)) || v < INT32_MIN || v > INT32_MAX) {
    return error(ErrorCode::kInvalidArgument, "{}: '{}' is not a 32-bit integer", label, value);
  }
  return static_cast<int32_t>(v);
}

// Seeds take all 64 bits.
Result<uint64_t> parse_u64(const std::string& label, const std::string& value) {
  try {
    size_t used = 0;
    if (value.empty() || value[0] == '-' || value[0] == '+') throw std::invalid_argument(value);
    const uint64_t v = std::stoull(value, &used, 10);
    if (used != value.size()) throw std::invalid_argument(value);
    return v;
  } catch (const std::exception&) {
    return error(ErrorCode::kInvalidArgument, "{}: '{}' is not an unsigned 64-bit integer", label, value);
  }
}

}  // namespace

std::vector<std::string> generate_option_names() {
  std::vector<std::string> names = {"kv-type",   "temp",      "top-k",     "top-p",   "min-p", "seed", "n-batch", "ctx-size", "n-predict",
          "kv-policy", "kv-budget", "kv-budget-of", "kv-buffer", "kv-protect-prompt", "kv-seed", "kv-quant",
          "kv-memory", "spec", "spec-k", "spec-skip", "spec-candidates", "spec-rule", "spec-confidence",
          "spec-skip-set", "spec-seed", "spec-search-every", "draft", "draft-memory"};
  for (const std::string& n : sparse::option_names()) names.push_back(n);
  for (const std::string& n : tilemix::option_names()) names.push_back(n);
  return names;
}

Status set_generate_option(GenerateOptions& o, const std::string& name, const std::string& value,
                           const std::string& label_or_empty) {
  const std::string label = label_or_empty.empty() ? "option " + name : label_or_empty;
  if (sparse::is_option(name)) return sparse::set_option(o.prefill_sparse, name, value, label);
  if (tilemix::is_option(name)) return tilemix::set_option(o.tilemix, name, value, label);
  if (name == "kv-type") {
    if (value == "f16") o.kv_dtype = DType::kF16;
    else if (value == "f32") o.kv_dtype = DType::kF32;
    else return error(ErrorCode::kInvalidArgument, "{}: '{}' is not f16 or f32", label, value);
    return ok_status();
  }
  if (name == "temp" || name == "top-p" || name == "min-p") {
    FRUGAL_ASSIGN_OR_RETURN(double v, parse_number(label, value));
    (name == "temp" ? o.sampling.temperature : name == "top-p" ? o.sampling.top_p : o.sampling.min_p) =
        static_cast<float>(v);
    return validate(o.sampling);
  }
  if (name == "top-k") {
    FRUGAL_ASSIGN_OR_RETURN(o.sampling.top_k, parse_int(label, value));
    return validate(o.sampling);
  }
  if (name == "seed") {
    FRUGAL_ASSIGN_OR_RETURN(int32_t v, parse_int(label, value));
    o.sampling.seed = static_cast<uint64_t>(v);
    return ok_status();
  }
  if (name == "n-batch" || name == "ctx-size" || name == "n-predict") {
    FRUGAL_ASSIGN_OR_RETURN(int32_t v, parse_int(label, value));
    if (name != "n-predict" && v <= 0) return error(ErrorCode::kInvalidArgument, "{}: must be positive", label);
    (name == "n-batch" ? o.n_batch : name == "ctx-size" ? o.n_ctx : o.n_predict) = v;
    return ok_status();
  }
  if (name == "kv-policy") {
    o.kv_policy.policy = value;
    return make_kv_policy(value).status().with_context(label);
  }
  if (name == "kv-budget") {
    FRUGAL_ASSIGN_OR_RETURN(o.kv_policy.budget, parse_number(label, value));
    return ok_status();
  }
  if (name == "kv-budget-of") {
    auto base = parse_kv_budget_base(value);
    if (!base.ok()) return base.status().with_context(label);
    o.kv_policy.budget_base = *base;
    return ok_status();
  }
  if (name == "kv-buffer") {
    FRUGAL_ASSIGN_OR_RETURN(o.kv_policy.buffer, parse_int(label, value));
    return ok_status();
  }
  if (name == "kv-protect-prompt") {
    if (value != "0" && value != "1" && value != "true" && value != "false") {
      return error(ErrorCode::kInvalidArgument, "{}: '{}' is not 0, 1, true or false", label, value);
    }
    o.kv_policy.protect_prompt = value == "1" || value == "true";
    return ok_status();
  }
  if (name == "kv-quant") {
    auto quant = parse_kv_quant(value);
    if (!quant.ok()) return quant.status().with_context(label);
    o.kv_policy.quant = *quant;
    return ok_status();
  }
  if (name == "kv-memory") {
    auto bytes = parse_size(value);
    if (!bytes.ok()) return bytes.status().with_context(label);
    o.kv_policy.memory = *bytes;
    return ok_status();
  }
  if (name == "spec") {
    auto method = speculative::parse_method(value);
    if (!method.ok()) return method.status().with_context(label);
    o.spec.method = *method;
    return ok_status();
  }
  if (name == "spec-k") {
    FRUGAL_ASSIGN_OR_RETURN(o.spec.k, parse_int(label, value));
    if (o.spec.k < 1 || o.spec.k > 32) {
      return error(ErrorCode::kInvalidArgument, "{}: {} is not in [1, 32]", label, o.spec.k);
    }
    return ok_status();
  }
  if (name == "spec-candidates") {
    FRUGAL_ASSIGN_OR_RETURN(o.spec.candidates, parse_int(label, value));
    if (o.spec.candidates < 1 || o.spec.candidates > speculative::kMaxCandidates) {
      return error(ErrorCode::kInvalidArgument, "{}: {} is not in [1, {}]", label, o.spec.candidates,
                   speculative::kMaxCandidates);
    }
    return ok_status();
  }
  if (name == "spec-rule") {
    auto rule = speculative::parse_candidate_rule(value);
    if (!rule.ok()) return rule.status().with_context(label);
    o.spec.rule = *rule;
    return ok_status();
  }
  if (name == "spec-skip") {
    FRUGAL_ASSIGN_OR_RETURN(o.spec.skip_layers, parse_int(label, value));
    if (o.spec.skip_layers < 0) {
      return error(ErrorCode::kInvalidArgument, "{}: {} is negative", label, o.spec.skip_layers);
    }
    return ok_status();
  }
  if (name == "spec-confidence") {
    FRUGAL_ASSIGN_OR_RETURN(o.spec.confidence, parse_number(label, value));
    if (!(o.spec.confidence >= 0.0 && o.spec.confidence <= 1.0)) {
      return error(ErrorCode::kInvalidArgument, "{}: {} is not a probability in [0, 1]", label, value);
    }
    return ok_status();
  }
  if (name == "spec-skip-set") {
    // Its length and letters are checked against the model when the drafter is made.
    if (value.empty()) return error(ErrorCode::kInvalidArgument, "{}: empty skip set", label);
    o.spec.skip_set = value;
    return ok_status();
  }
  if (name == "spec-drafts") {
    o.spec.draft_pool.clear();
    size_t from = 0;
    while (from <= value.size()) {
      const size_t comma = std::min(value.find(',', from), value.size());
      const std::string item = value.substr(from, comma - from);
      if (item.empty()) return error(ErrorCode::kInvalidArgument, "{}: empty entry in '{}'", label, value);
      o.spec.draft_pool.push_back(item);
      from = comma + 1;
    }
    return ok_status();
  }
  if (name == "spec-selector") {
    auto sel = speculative::parse_draft_selector(value);
    if (!sel.ok()) return sel.status().with_context(label);
    o.spec.selector = *sel;
    return ok_status();
  }
  if (name == "spec-seed") {
    FRUGAL_ASSIGN_OR_RETURN(o.spec.search_seed, parse_u64(label, value));
    return ok_status();
  }
  if (name == "spec-search-every") {
    FRUGAL_ASSIGN_OR_RETURN(o.spec.search_every, parse_int(label, value));
    if (o.spec.search_every < 1) {
      return error(ErrorCode::kInvalidArgument, "{}: {} must be at least 1 (drafting calls between search steps)",
                   label, o.spec.search_every);
    }
    return ok_status();
  }
  if (name == "draft") {
    if (value.empty()) return error(ErrorCode::kInvalidArgument, "{}: empty path", label);
    // The caller loads it (spec.draft_model); a new path drops a model loaded for another one.
    if (value != o.spec.draft_path) o.spec.draft_model = nullptr;
    o.spec.draft_path = value;
    return ok_status();
  }
  if (name == "draft-memory") {
    auto bytes = parse_size(value);
    if (!bytes.ok()) return bytes.status().with_context(label);
    o.spec.draft_memory = *bytes;
    return ok_status();
  }
  if (name == "kv-seed") {
    FRUGAL_ASSIGN_OR_RETURN(o.kv_policy.seed, parse_u64(label, value));
    return ok_status();
  }
  std::string known;
  for (const auto& n : generate_option_names()) known += (known.empty() ? "" : ", ") + n;
  return error(ErrorCode::kInvalidArgument, "unknown option '{}' (known: {})", name, known);
}

std::string describe_generate_options(const GenerateOptions& o) {
  const KvPolicyOptions& k = o.kv_policy;
  std::string kv = k.policy == "full" ? std::string()
                                      : fmt::format(" kv-policy={} kv-budget={} kv-buffer={} kv-protect-prompt={}",
                                                    k.policy, k.budget, k.buffer, k.protect_prompt ? 1 : 0);
  if (k.policy != "full" && k.budget > 0 && k.budget < 1 && k.budget_base != KvBudgetBase::kTrace) {
    kv += fmt::format(" kv-budget-of={}", kv_budget_base_name(k.budget_base));
  }
  if (k.quant != KvQuant::kNone) kv += fmt::format(" kv-quant={}", kv_quant_name(k.quant));
  if (k.memory > 0) kv += fmt::format(" kv-memory={}", k.memory);
  if (o.tilemix.enabled()) kv += fmt::format(" tilemix-int8={}", o.tilemix.int8_fraction);
  if (o.spec.method != speculative::Method::kNone) {
    kv += fmt::format(" spec={} spec-k={}", speculative::method_name(o.spec.method), o.spec.k);
    if (o.spec.method == speculative::Method::kDraft) kv += fmt::format(" draft={}", o.spec.draft_path);
    if (o.spec.method == speculative::Method::kLayerSkip) kv += fmt::format(" spec-skip={}", o.spec.skip_layers);
    if (o.spec.candidates > 1) {
      kv += fmt::format(" spec-candidates={} spec-rule={}", o.spec.candidates, speculative::candidate_rule_name(o.spec.rule));
    }
  }
  return fmt::format("kv-type={} temp={} top-k={} top-p={} min-p={} seed={} n-batch={} ctx-size={}{}",
                     dtype_name(o.kv_dtype), o.sampling.temperature, o.sampling.top_k, o.sampling.top_p,
                     o.sampling.min_p, o.sampling.seed, o.n_batch, o.n_ctx, kv);
}

}  // namespace frugal
