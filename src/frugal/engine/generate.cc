#include "frugal/engine/generate.h"

#include "frugal/core/parse_size.h"
#include "frugal/engine/sequence_kv.h"

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>

namespace frugal {
namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Longest suffix of `text` that is a proper prefix of some stop string: held back while
// streaming because the next token may complete the stop string.
size_t held_back(const std::string& text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const auto& s : stops) {
    for (size_t len = std::min(s.size() - 1, text.size()); len > hold; --len) {
      if (text.compare(text.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  return hold;
}
}  // namespace

Result<GenerateResult> generate(Model& model, const Tokenizer& tok, Backend& backend,
                                const std::vector<TokenId>& prompt, const GenerateOptions& opts,
                                const TextCallback& on_text) {
  const ModelConfig& cfg = model.config();
  const int32_t n_ctx = opts.n_ctx > 0 ? opts.n_ctx : static_cast<int32_t>(cfg.n_ctx_train);
  if (prompt.empty()) return error(ErrorCode::kInvalidArgument, "the prompt is empty (no tokens)");
  if (static_cast<int64_t>(prompt.size()) >= n_ctx) {
    return error(ErrorCode::kInvalidArgument, "the prompt has {} tokens but the context holds {} (raise -c)",
                 prompt.size(), n_ctx);
  }
  if (opts.n_batch <= 0) return error(ErrorCode::kInvalidArgument, "n_batch must be positive");
  for (const auto& s : opts.stop) {
    if (s.empty()) return error(ErrorCode::kInvalidArgument, "a stop string is empty");
  }
  FRUGAL_ASSIGN_OR_RETURN(Sampler sampler, Sampler::create(opts.sampling, static_cast<int32_t>(cfg.n_vocab)));
  const int32_t prompt_len = static_cast<int32_t>(prompt.size());
  const int32_t trace_len = opts.n_predict >= 0 ? std::min(n_ctx, prompt_len + opts.n_predict) : n_ctx;
  SequenceKvShape shape;
  shape.prompt_len = prompt_len;
  shape.trace_len = trace_len;
  shape.n_ctx = n_ctx;
  shape.n_batch = opts.n_batch;
  shape.dtype = opts.kv_dtype;
  FRUGAL_ASSIGN_OR_RETURN(std::unique_ptr<SequenceKv> state, make_sequence_kv(model, opts.kv_policy, shape));
  KvCache& kv = state->cache;
  KvEvictor* evictor = state->evictor.get();
  AttentionObserver* observer = state->observer();

  GenerateResult res;
  res.prompt_tokens = prompt;
  res.kv_bytes = kv.reserved_bytes();
  std::vector<float> logits(static_cast<size_t>(cfg.n_vocab));
  std::vector<TokenId> history = prompt;
  history.reserve(static_cast<size_t>(n_ctx));
  Batch batch;

  // Prefill in chunks; only the last prompt token needs logits.
  const auto t_prefill = Clock::now();
  for (size_t i = 0; i < prompt.size(); i += static_cast<size_t>(opts.n_batch)) {
    const size_t end = std::min(prompt.size(), i + static_cast<size_t>(opts.n_batch));
    batch.clear();
    for (size_t j = i; j < end; ++j) batch.add(prompt[j], static_cast<int32_t>(j), 0, j + 1 == prompt.size());
    FRUGAL_RETURN_IF_ERROR(model.forward(batch, kv, backend, logits.data(), observer));
  }
  res.timings.prefill_ms = ms_since(t_prefill);
  res.timings.prefill_tokens = static_cast<int64_t>(prompt.size());

  Detokenizer detok(tok, /*render_special=*/false, /*strip_space_prefix=*/false);
  std::string pending;  // text not yet delivered (may hold a partial stop string)
  bool stopped_by_client = false;
  const auto emit = [&](bool final) {
    const size_t hold = final ? 0 : held_back(pending, opts.stop);
    if (pending.size() > hold) {
      std::string out = pending.substr(0, pending.size() - hold);
      pending.erase(0, pending.size() - hold);
      res.text += out;
      if (on_text && !on_text(out)) stopped_by_client = true;
    }
  };

  const auto t_decode = Clock::now();
  int32_t pos = static_cast<int32_t>(prompt.size());
  res.stop_reason = "length";
  for (int32_t n = 0; opts.n_predict < 0 || n < opts.n_predict; ++n) {
    const TokenId id = sampler.sample(logits.data(), history);
    res.tokens.push_back(id);
    history.push_back(id);
    if (tok.is_eog(id) && !opts.ignore_eos) {
      res.stop_reason = "eos";
      break;
    }
    pending += detok.push(id);
    bool hit_stop = false;
    for (const auto& s : opts.stop) {
      const size_t at = pending.find(s);
      if (at != std::string::npos) {
        pending.resize(at);
        hit_stop = true;
        break;
      }
    }
    if (hit_stop) {
      res.stop_reason = "stop";
      break;
    }
    emit(false);
    if (stopped_by_client) {
      res.stop_reason = "cancelled";
      break;
    }
    if (opts.n_predict >= 0 && n + 1 >= opts.n_predict) break;
    if (pos >= n_ctx) {
      res.stop_reason = "context";
      break;
    }
    FRUGAL_RETURN_IF_ERROR(evictor->step(kv, 0));
    batch.clear();
    batch.add(id, pos++, 0, true);
    FRUGAL_RETURN_IF_ERROR(model.forward(batch, kv, backend, logits.data(), observer));
    ++res.timings.decode_tokens;
  }
  res.timings.decode_ms = ms_since(t_decode);
  FRUGAL_RETURN_IF_ERROR(evictor->step(kv, 0));  // counts the last token in the peak
  res.kv_eviction = evictor->stats();
  if (res.stop_reason != "stop") pending += detok.finish();
  emit(true);
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
  return {"kv-type",   "temp",      "top-k",     "top-p",   "min-p", "seed", "n-batch", "ctx-size", "n-predict",
          "kv-policy", "kv-budget", "kv-budget-of", "kv-buffer", "kv-protect-prompt", "kv-seed", "kv-quant",
          "kv-memory"};
}

Status set_generate_option(GenerateOptions& o, const std::string& name, const std::string& value,
                           const std::string& label_or_empty) {
  const std::string label = label_or_empty.empty() ? "option " + name : label_or_empty;
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
  return fmt::format("kv-type={} temp={} top-k={} top-p={} min-p={} seed={} n-batch={} ctx-size={}{}",
                     dtype_name(o.kv_dtype), o.sampling.temperature, o.sampling.top_k, o.sampling.top_p,
                     o.sampling.min_p, o.sampling.seed, o.n_batch, o.n_ctx, kv);
}

}  // namespace frugal
