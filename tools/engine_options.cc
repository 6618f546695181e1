#include "engine_options.h"

#include <algorithm>

namespace frugal::cli {
namespace {

// One row per shared flag. `option` is the name set_generate_option knows (empty for threads and
// device, which choose the backend rather than the generation); `type` is what the help calls
// the value; `shown` is the default the help prints (nullptr: none shown, the library default
// applies).
struct FlagRow {
  const char* option;
  const char* names;
  const char* type;
  const char* help;
  const char* shown;
};

constexpr FlagRow kFlags[] = {
    {"", "-t,--threads", "INT", "CPU threads (0: all cores)", "0"},
    {"", "--device", "TEXT", "cpu or cuda", "cpu"},
    {"kv-type", "--kv-type", "TEXT", "KV cache element type: f16 or f32", "f16"},
    {"kv-policy", "--kv-policy", "TEXT", "KV eviction: full, window, random, h2o, tova, snapkv, rkv", "full"},
    {"kv-budget", "--kv-budget", "FLOAT",
     "KV tokens kept per layer and head (N), or a fraction (0..1) of prompt + n-predict (see --kv-budget-of)",
     nullptr},
    {"kv-budget-of", "--kv-budget-of", "TEXT",
     "what a fractional --kv-budget is a fraction of: trace (prompt + n-predict, the default) or generated "
     "(budget = prompt + fraction x n-predict)",
     nullptr},
    {"kv-buffer", "--kv-buffer", "INT", "newest tokens never evicted; rounds every this many steps", "64"},
    {"kv-protect-prompt", "--kv-protect-prompt", "", "never evict prompt tokens (inside the budget)", nullptr},
    {"kv-seed", "--kv-seed", "UINT", "seed of random eviction", "0"},
    {"kv-quant", "--kv-quant", "TEXT", "KV quantization: none, int8, int4, hyquant or hbq (with any policy)", nullptr},
    {"kv-memory", "--kv-memory", "TEXT",
     "KV memory budget, e.g. 256MiB: sets the capacity and an evicting policy's budget for this model and kv-quant",
     nullptr},
    {"spec", "--spec", "TEXT",
     "speculative decoding: none, draft (a draft model, --draft), ngram (prompt lookup), layerskip (the model with "
     "--spec-skip layers skipped), swift (the model with sublayers skipped, the set searched online) or conflayers "
     "(the model exiting early at a confidence-chosen layer) or memspec (a pool of drafts under --draft-memory, "
     "--spec-drafts)",
     "none"},
    {"spec-k", "--spec-k", "INT", "most draft tokens per verify pass (the draft model adapts below it)", "6"},
    {"spec-skip", "--spec-skip", "INT",
     "layers the layerskip drafter skips, sublayers (attention or MLP) the swift drafter skips (0: half of the middle "
     "ones)",
     "0"},
    {"spec-candidates", "--spec-candidates", "INT",
     "drafts per verify pass, each drawn independently from the drafter and verified together (draft, layerskip; "
     "1..8)",
     "1"},
    {"spec-rule", "--spec-rule", "TEXT",
     "how several drafts are verified: standard (recursive rejection) or resispec (residual shaping)", "standard"},
    {"spec-confidence", "--spec-confidence", "FLOAT",
     "swift, conflayers: stop drafting below this top-token probability; conflayers exits at the first layer whose "
     "mean top-token probability reaches it",
     "0.8"},
    {"spec-skip-set", "--spec-skip-set", "TEXT",
     "swift, conflayers: freeze the skip set, one letter per layer: - runs, a attention skipped, m MLP skipped, x both "
     "(e.g. --spec-skip-set=-xa-m-)",
     nullptr},
    {"spec-seed", "--spec-seed", "UINT", "swift: seed of the skip-set search's random candidates (memspec: of its "
     "exploration)", "0"},
    {"spec-drafts", "--spec-drafts", "TEXT",
     "memspec: the pool of drafts, comma-separated: ngram and draft model GGUF files (e.g. ngram,a.gguf,b.gguf)",
     nullptr},
    {"spec-selector", "--spec-selector", "TEXT",
     "memspec: predict (acceptance predicted per sequence, drafts loaded ahead) or bandit (UCB1, loading on demand)",
     "predict"},
    {"spec-search-every", "--spec-search-every", "INT", "swift, conflayers: drafting calls between search steps", "8"},
    {"prefill-sparse", "--prefill-sparse", "TEXT",
     "sparse prefill attention: none (dense), minference (vertical-slash blocks estimated from the last queries), "
     "flexprefill (each head routed by a Jensen-Shannon test to query-aware blocks or vertical-slash, gamma coverage) "
     "or crisp (heads routed by structural mass, budgets cut at the noise floor); cpu backend",
     "none"},
    {"sparse-min-blocks", "--sparse-min-blocks", "INT",
     "sparse prefill: sequences with fewer keys than this many 64-token blocks run dense", "4"},
    {"sparse-last-q", "--sparse-last-q", "INT",
     "minference, flexprefill, crisp: last queries of a chunk whose attention is estimated", "64"},
    {"sparse-vertical", "--sparse-vertical", "INT",
     "minference: key columns kept per query head (0: 1000 per 128k keys, at least 30)", "0"},
    {"sparse-slash", "--sparse-slash", "INT",
     "minference: diagonals kept per query head (0: 6096 per 128k keys, at least 50)", "0"},
    {"flex-gamma", "--flex-gamma", "FLOAT",
     "flexprefill: share of the estimated attention the kept keys, diagonals or blocks cover, in (0, 1]", "0.9"},
    {"flex-tau", "--flex-tau", "FLOAT",
     "flexprefill: a head is query-aware when sqrt(JS divergence) of pooled vs estimated block attention is below "
     "this, in [0, 1]",
     "0.1"},
    {"flex-min-budget", "--flex-min-budget", "INT",
     "flexprefill: fewest tokens of key blocks and of diagonal blocks per query head, rounded up to 64-token "
     "blocks (the reference's min_budget; query-aware heads keep them too); 0: no minimum",
     "0"},
    {"flex-max-budget", "--flex-max-budget", "INT",
     "flexprefill: most tokens of key blocks and of diagonal blocks per vertical-slash head, rounded up to "
     "64-token blocks (the reference's max_budget; wins over the minimum); 0: no cap",
     "0"},
    {"crisp-gamma", "--crisp-gamma", "FLOAT",
     "crisp: most of the non-sink attention mass covered (1: no cap, the noise floor alone stops), in (0, 1]", "1"},
    {"crisp-floor", "--crisp-floor", "FLOAT",
     "crisp: an index or block is kept only at or above this multiple of the uniform background, in [0, 1000000]",
     "4"},
    {"crisp-route", "--crisp-route", "FLOAT",
     "crisp: a head is vertical-slash when this share of its non-sink mass is on peaked keys or diagonals, in [0, 1]",
     "0.5"},
    {"tilemix-int8", "--tilemix-int8", "FLOAT",
     "TileMix: fraction of each prefill chunk's 64x64 score tiles computed in INT8, those with the smallest predicted "
     "error (0: float attention, 1: uniform INT8 scores), in [0, 1]; cpu backend",
     "0"},
    {"tilemix-min-blocks", "--tilemix-min-blocks", "INT",
     "TileMix: sequences with fewer keys than this many 64-token tiles run float", "4"},
    {"draft", "--draft", "TEXT", "draft model GGUF with the target's vocabulary (implies --spec draft)", nullptr},
    {"draft-memory", "--draft-memory", "TEXT",
     "memory budget of the draft model, weights + its KV cache, e.g. 64MiB (default: smaller than the target; "
     "memspec: of all its resident drafts, default the largest one's)",
     nullptr},
};

// "-t,--threads" -> "--threads".
std::string long_name(const char* names) {
  const std::string s(names);
  const size_t at = s.rfind(',');
  return at == std::string::npos ? s : s.substr(at + 1);
}

}  // namespace

void add_engine_flags(CLI::App& app, EngineFlags& flags, const std::vector<FlagHelp>& help,
                      const std::vector<std::string>& only) {
  for (const FlagRow& row : kFlags) {
    const std::string name = long_name(row.names);
    if (!only.empty() && std::find(only.begin(), only.end(), name) == only.end()) continue;
    std::string text = row.help;
    for (const FlagHelp& h : help) {
      if (h.flag == name) text = h.help;
    }
    CLI::Option* opt = nullptr;
    if (name == "--threads") {
      opt = app.add_option(row.names, flags.threads, text);
    } else if (name == "--device") {
      opt = app.add_option(row.names, flags.device, text);
    } else if (name == "--kv-protect-prompt") {
      opt = app.add_flag(row.names, flags.kv_protect_prompt, text);
    } else {
      std::string& value = flags.values[row.option];
      if (row.shown) value = row.shown;
      opt = app.add_option(row.names, value, text);
    }
    if (*row.type) opt->type_name(row.type);
    if (row.shown) opt->capture_default_str();
    if (*row.option) flags.options.emplace_back(row.option, opt);
  }
}

Status apply_engine_flags(const EngineFlags& flags, GenerateOptions& opts) {
  if (flags.threads < 0) {
    return error(ErrorCode::kInvalidArgument, "--threads: {} is negative (0: all cores)", flags.threads);
  }
  for (const auto& [option, opt] : flags.options) {
    if (opt->count() == 0) continue;
    const std::string value = option == "kv-protect-prompt" ? (flags.kv_protect_prompt ? "1" : "0")
                                                            : flags.values.at(option);
    FRUGAL_RETURN_IF_ERROR(set_generate_option(opts, option, value, "--" + option));
  }
  const auto given = [&](const std::string& name) {
    for (const auto& [option, opt] : flags.options) {
      if (option == name) return opt->count() > 0;
    }
    return false;
  };
  // --draft alone asks for draft-model speculation; with --spec it must agree.
  if (given("draft") && !given("spec")) opts.spec.method = speculative::Method::kDraft;
  if (given("draft") && opts.spec.method != speculative::Method::kDraft) {
    return error(ErrorCode::kInvalidArgument, "--draft: a draft model is for --spec draft, not --spec {}",
                 speculative::method_name(opts.spec.method));
  }
  return ok_status();
}

Result<std::unique_ptr<Model>> load_draft_model(GenerateOptions& opts) {
  if (opts.spec.method != speculative::Method::kDraft || opts.spec.draft_model != nullptr) {
    return std::unique_ptr<Model>();
  }
  if (opts.spec.draft_path.empty()) {
    return error(ErrorCode::kInvalidArgument, "--spec draft: name the draft model with --draft MODEL.gguf");
  }
  ModelLoadOptions lo;
  // The draft runs on a CPU backend whatever the target's device (speculative::DrafterContext).
  lo.cpu_layouts = true;
  auto m = Model::load(opts.spec.draft_path, lo);
  if (!m.ok()) return m.status().with_context("--draft");
  opts.spec.draft_model = m->get();
  return std::move(m).value();
}

std::vector<std::string> given_engine_settings(const EngineFlags& flags) {
  std::vector<std::string> out;
  for (const auto& [option, opt] : flags.options) {
    if (opt->count() == 0) continue;
    out.push_back(option + "=" +
                  (option == "kv-protect-prompt" ? (flags.kv_protect_prompt ? "1" : "0") : flags.values.at(option)));
  }
  return out;
}

}  // namespace frugal::cli
