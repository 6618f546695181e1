// frugal conformance: do two INT8 GEMM kernels give the same model? The model's block linears run
// as W8A8 (quantize/w8a8_backend.h) with original per-channel scales and with power-of-two scales
// (weights requantized). For each: every linear layer's outputs from kernel A and kernel B on
// identical int8 operands (bit-identical or how many output spacings apart), greedy generations of
// a set of prompts with each kernel end to end (byte-identical or not), and the perplexity of a
// text, with the paired difference between the two scale rules and its 95 % interval.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "command.h"
#include "common.h"
#include "engine_options.h"
#include "frugal/eval/harness.h"
#include "frugal/eval/task.h"
#include "frugal/kv/kv_cache.h"
#include "frugal/quant/w8a8/fault_injection.h"
#include "frugal/quantize/w8a8_backend.h"

namespace frugal::cli {
namespace {

namespace w8 = quant::w8a8;
using quantize::W8A8Backend;
using quantize::W8A8Options;
using quantize::W8A8Scales;

struct ConformanceArgs {
  std::string model, file, prompts_file, tasks;
  std::string kernel_a = "scale_product", kernel_b = "sequential_fma";
  std::string out_type = "bf16";
  int n_ctx = 128;
  int chunks = -1;
  int n_new = 48;
  int64_t task_length = 256;
  bool per_layer = false;
  bool scales_only = true;
  bool faults = false;
  EngineFlags engine;
};

// Eight short openings; any tokenizer can read them (the default model spells them by character).
const char* const kPrompts[] = {
    "Once upon a time, there was a little girl named Lily.",
    "Tom had a red ball. One day he",
    "The sun was shining and the birds were singing.",
    "Sam and his dog went to the park to",
    "There was a big tree in the garden.",
    "Mia wanted to bake a cake for her mom.",
    "One day, a cat found a box.",
    "The little boat sailed on the sea until",
};

Result<std::vector<std::string>> load_prompts(const ConformanceArgs& a) {
  std::vector<std::string> out;
  if (!a.prompts_file.empty()) {
    FRUGAL_ASSIGN_OR_RETURN(std::string text, read_prompt("", a.prompts_file));
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      std::string p;  // "\n" in a line stands for a newline
      for (size_t i = 0; i < line.size(); ++i) {
        if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == 'n') {
          p += '\n';
          ++i;
        } else {
          p += line[i];
        }
      }
      if (!p.empty()) out.push_back(p);
    }
    if (out.empty()) return error(ErrorCode::kInvalidArgument, "{}: no prompts (one per line)", a.prompts_file);
    return out;
  }
  if (!a.tasks.empty()) {
    std::vector<std::string> fams;
    std::istringstream in(a.tasks);
    for (std::string f; std::getline(in, f, ',');) fams.push_back(f);
    eval::TaskOptions to;
    to.length = a.task_length;
    for (uint64_t i = 0; i < 8; ++i) {
      auto ex = eval::generate_task(fams[i % fams.size()], eval::TaskSplit::kTest, i + 1, to);
      if (!ex.ok()) return error(ErrorCode::kInvalidArgument, "--tasks: {}", ex.status().message());
      out.push_back(ex->prompt);
    }
    return out;
  }
  return std::vector<std::string>(std::begin(kPrompts), std::end(kPrompts));
}

Result<std::vector<TokenId>> greedy(Model& model, Backend& be, const std::vector<TokenId>& prompt, int n_new,
                                    TokenId eos, DType kv_dtype) {
  FRUGAL_ASSIGN_OR_RETURN(KvCache kv,
                          KvCache::create(model.kv_options(1, static_cast<int>(prompt.size()) + n_new, kv_dtype)));
  Batch b;
  for (size_t j = 0; j < prompt.size(); ++j) b.add(prompt[j], static_cast<int32_t>(j), 0, j + 1 == prompt.size());
  std::vector<TokenId> out;
  int32_t tok = 0;
  FRUGAL_RETURN_IF_ERROR(model.forward_greedy(b, kv, be, &tok));
  auto pos = static_cast<int32_t>(prompt.size());
  while (true) {
    out.push_back(tok);
    if (tok == eos || static_cast<int>(out.size()) >= n_new) break;
    b.clear();
    b.add(tok, pos++, 0, true);
    FRUGAL_RETURN_IF_ERROR(model.forward_greedy(b, kv, be, &tok));
  }
  return out;
}

struct LayerSummary {
  int identical = 0;
  int total = 0;
  int64_t max_spacings = 0;
  int64_t differing = 0;
  int64_t outputs = 0;
  int64_t acc_mismatches = 0;
  int64_t max_abs_acc = 0;
};

LayerSummary summarize(const std::vector<quantize::W8A8LayerStats>& st) {
  LayerSummary s;
  for (const auto& l : st) {
    ++s.total;
    if (l.identical()) ++s.identical;
    s.max_spacings = std::max(s.max_spacings, l.max_spacings);
    s.differing += l.differing;
    s.outputs += l.outputs;
    s.acc_mismatches += l.acc_mismatches;
    s.max_abs_acc = std::max(s.max_abs_acc, l.max_abs_acc);
  }
  return s;
}

void print_layers(const char* what, const std::vector<quantize::W8A8LayerStats>& st, bool per_layer) {
  const LayerSummary s = summarize(st);
  std::printf("  layers bit-identical over %s: %d/%d (outputs differing %lld of %lld, at most %lld spacing(s); "
              "int32 accumulators differing %lld; max |acc| %lld)\n",
              what, s.identical, s.total, static_cast<long long>(s.differing), static_cast<long long>(s.outputs),
              static_cast<long long>(s.max_spacings), static_cast<long long>(s.acc_mismatches),
              static_cast<long long>(s.max_abs_acc));
  if (!per_layer) return;
  for (const auto& l : st) {
    std::printf("    %-20s K %5lld  calls %5lld  differing %8lld / %9lld  max spacings %lld%s\n", l.name.c_str(),
                static_cast<long long>(l.k), static_cast<long long>(l.calls), static_cast<long long>(l.differing),
                static_cast<long long>(l.outputs), static_cast<long long>(l.max_spacings),
                l.identical() ? "  identical" : "");
  }
}

// Mean of b - a over windows (each window's mean difference one observation, since positions in a
// window share their context), with a normal 95 % interval.
struct Paired {
  double mean = 0, half = 0;
  int64_t n = 0;
};
Paired paired_by_window(const std::vector<float>& a, const std::vector<float>& b, int64_t windows) {
  Paired p;
  const int64_t per = static_cast<int64_t>(a.size()) / std::max<int64_t>(1, windows);
  std::vector<double> d;
  for (int64_t w = 0; w < windows; ++w) {
    double s = 0;
    for (int64_t i = 0; i < per; ++i) {
      const size_t j = static_cast<size_t>(w * per + i);
      s += static_cast<double>(b[j]) - static_cast<double>(a[j]);
    }
    d.push_back(s / static_cast<double>(per));
  }
  p.n = static_cast<int64_t>(d.size());
  double sum = 0, sum2 = 0;
  for (double v : d) sum += v;
  p.mean = sum / static_cast<double>(p.n);
  for (double v : d) sum2 += (v - p.mean) * (v - p.mean);
  const double var = p.n > 1 ? sum2 / static_cast<double>(p.n - 1) : 0;
  p.half = 1.96 * std::sqrt(var / static_cast<double>(p.n));
  return p;
}

// The fault-injection suite: kernel A (the model's) against each fault kernel
// (quant/w8a8/fault_injection.h) on identical operands from every linear layer over the prompts'
// greedy runs, with the original scales. Per fault: what a one-spacing tolerance test concludes,
// what the bitwise probe concludes, and how many greedy generations the fault changes end to end.
int fault_suite(const ConformanceArgs& a, Model& model, Backend& cpu, const w8::Int8GemmKernel& ka,
                const std::vector<std::vector<TokenId>>& prompts, TokenId eos, DType kv_dtype, w8::OutputType out,
                int threads) {
  const std::string cmd = "conformance";
  W8A8Options o;
  o.out = out;
  o.n_threads = threads;
  o.kernel = &ka;
  auto reference = W8A8Backend::create(model, cpu, o);
  if (!reference.ok()) return fail(cmd, reference.status().message());
  std::vector<std::vector<TokenId>> expected;
  for (const auto& p : prompts) {
    auto g = greedy(model, **reference, p, a.n_new, eos, kv_dtype);
    if (!g.ok()) return fail(cmd, g.status().message());
    expected.push_back(*g);
  }
  std::printf("\nfault injection (kernel A = %s, original scales, output %s; layers over the prompts' greedy runs):\n\n",
              std::string(ka.name()).c_str(), w8::output_type_name(out));
  std::printf("| fault | epilogue | layers differing | outputs differing | max spacings | 1-spacing tolerance test | "
              "bitwise probe | greedy generations unchanged |\n|---|---|---:|---:|---:|---|---|---:|\n");
  for (const std::string& name : w8::fault_names()) {
    const w8::Int8GemmKernel* kf = w8::find_fault_kernel(name);
    o.kernel = &ka;
    o.shadow = kf;
    auto probe = W8A8Backend::create(model, cpu, o);
    if (!probe.ok()) return fail(cmd, probe.status().message());
    for (const auto& p : prompts) {
      auto g = greedy(model, **probe, p, a.n_new, eos, kv_dtype);
      if (!g.ok()) return fail(cmd, g.status().message());
    }
    const LayerSummary s = summarize((*probe)->layer_stats());
    // A tolerance test sees outputs only: it passes when every one is within one spacing.
    const bool tolerance_passes = s.max_spacings <= 1;
    const bool bitwise_catches = s.differing > 0;
    o.kernel = kf;
    o.shadow = nullptr;
    auto faulty = W8A8Backend::create(model, cpu, o);
    if (!faulty.ok()) return fail(cmd, faulty.status().message());
    int unchanged = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto g = greedy(model, **faulty, prompts[i], a.n_new, eos, kv_dtype);
      if (!g.ok()) return fail(cmd, g.status().message());
      unchanged += *g == expected[i] ? 1 : 0;
    }
    std::printf("| %s | `%s` | %d/%d | %lld of %lld | %lld | %s | %s | %d/%zu |\n", name.c_str(),
                std::string(kf->epilogue()).c_str(), s.total - s.identical, s.total, static_cast<long long>(s.differing),
                static_cast<long long>(s.outputs), static_cast<long long>(s.max_spacings),
                tolerance_passes ? (bitwise_catches ? "passes (fault missed)" : "passes") : "fails (fault caught)",
                bitwise_catches ? "fails (fault caught)" : "passes (no difference)", unchanged, prompts.size());
  }
  return 0;
}

int conformance_cmd(const ConformanceArgs& a) {
  const std::string cmd = "conformance";
  GenerateOptions engine_opts;
  if (Status st = apply_engine_flags(a.engine, engine_opts); !st.ok()) return fail(cmd, st.message());
  const w8::Int8GemmKernel* ka = w8::find_int8_kernel(a.kernel_a);
  const w8::Int8GemmKernel* kb = w8::find_int8_kernel(a.kernel_b);
  if (ka == nullptr || kb == nullptr) {
    std::string names;
    for (const auto& n : w8::int8_kernel_names()) names += (names.empty() ? "" : ", ") + n;
    return fail(cmd, "unknown INT8 kernel '" + (ka == nullptr ? a.kernel_a : a.kernel_b) + "' (" + names + ")");
  }
  if (a.out_type != "bf16" && a.out_type != "f32") return fail(cmd, "--out-type: '" + a.out_type + "' is not bf16 or f32");
  const w8::OutputType out = a.out_type == "bf16" ? w8::OutputType::kBF16 : w8::OutputType::kF32;
  auto path = resolve_model_path(a.model);
  if (!path.ok()) return fail(cmd, path.status().message());
  auto lm = load_model(*path, false);
  if (!lm.ok()) return fail(cmd, lm.status().message());
  Model& model = *lm->model;
  const Tokenizer& tok = *lm->tokenizer;
  auto prompts = load_prompts(a);
  if (!prompts.ok()) return fail(cmd, prompts.status().message());
  const int threads = resolve_threads(a.engine.threads);
  CpuBackendOptions bo;
  bo.n_threads = threads;
  auto cpu = make_cpu_backend(bo);
  const DType kv_dtype = engine_opts.kv_dtype;
  const TokenId bos = tok.add_bos() ? tok.bos() : -1;

  std::vector<std::vector<TokenId>> prompt_tokens;
  for (const auto& p : *prompts) {
    TokenizeOptions to;
    to.add_special = true;
    auto t = tok.encode(p, to);
    if (!t.ok()) return fail(cmd, "prompt: " + t.status().message());
    prompt_tokens.push_back(*t);
  }
  std::vector<TokenId> text_tokens;
  if (!a.file.empty()) {
    auto text = read_prompt("", a.file);
    if (!text.ok()) return fail(cmd, text.status().message());
    TokenizeOptions to;
    to.add_special = true;
    auto t = tok.encode(*text, to);
    if (!t.ok()) return fail(cmd, a.file + ": " + t.status().message());
    text_tokens = *t;
    if (a.chunks > 0) text_tokens.resize(std::min(text_tokens.size(), static_cast<size_t>(a.chunks) * a.n_ctx));
  }
  const auto detok = [&](const std::vector<TokenId>& ids) {
    std::string s;
    for (TokenId id : ids) s += tok.piece(id);
    return s;
  };

  std::printf("model %s (%s), kernels A = %s [%s], B = %s [%s], output %s, %d threads\n", path->c_str(),
              model.describe_types().c_str(), std::string(ka->name()).c_str(), std::string(ka->epilogue()).c_str(),
              std::string(kb->name()).c_str(), std::string(kb->epilogue()).c_str(), w8::output_type_name(out),
              threads);

  if (a.faults) return fault_suite(a, model, *cpu, *ka, prompt_tokens, tok.eos(), kv_dtype, out, threads);

  std::vector<W8A8Scales> rules = {W8A8Scales::kOriginal, W8A8Scales::kPow2};
  if (a.scales_only && !text_tokens.empty()) rules.push_back(W8A8Scales::kScalesOnly);
  std::vector<eval::PerplexityResult> ppl(rules.size());
  for (size_t ri = 0; ri < rules.size(); ++ri) {
    const W8A8Scales rule = rules[ri];
    W8A8Options o;
    o.scales = rule;
    o.out = out;
    o.n_threads = threads;
    o.kernel = ka;
    o.shadow = rule == W8A8Scales::kScalesOnly ? nullptr : kb;
    auto be_a = W8A8Backend::create(model, *cpu, o);
    if (!be_a.ok()) return fail(cmd, be_a.status().message());
    std::printf("\nscales %s", quantize::w8a8_scales_name(rule));
    const auto& p2 = (*be_a)->pow2_stats();
    if (rule == W8A8Scales::kPow2) {
      std::printf(" (%lld of %lld channels rescaled, %lld weights clipped at +-127)",
                  static_cast<long long>(p2.rows_rescaled), static_cast<long long>(p2.rows),
                  static_cast<long long>(p2.clipped));
    }
    std::printf(":\n");
    if (rule != W8A8Scales::kScalesOnly) {
      int64_t kmax = 0;
      for (const auto& l : (*be_a)->layer_stats()) kmax = std::max(kmax, l.k);
      std::printf("  accumulator bound: K <= %lld, so |acc| <= %lld < 2^31 (needs K <= %lld): exact\n",
                  static_cast<long long>(kmax), static_cast<long long>(kmax * 127 * 127),
                  static_cast<long long>(w8::kMaxExactK));
      o.shadow = nullptr;
      o.kernel = kb;
      auto be_b = W8A8Backend::create(model, *cpu, o);
      if (!be_b.ok()) return fail(cmd, be_b.status().message());
      int same = 0;
      for (size_t i = 0; i < prompt_tokens.size(); ++i) {
        auto ga = greedy(model, **be_a, prompt_tokens[i], a.n_new, tok.eos(), kv_dtype);
        if (!ga.ok()) return fail(cmd, ga.status().message());
        auto gb = greedy(model, **be_b, prompt_tokens[i], a.n_new, tok.eos(), kv_dtype);
        if (!gb.ok()) return fail(cmd, gb.status().message());
        const std::string ta = detok(*ga), tb = detok(*gb);
        size_t first = 0;
        while (first < ga->size() && first < gb->size() && (*ga)[first] == (*gb)[first]) ++first;
        if (ta == tb && *ga == *gb) {
          ++same;
        } else {
          std::printf("  prompt %zu: generations differ from token %zu\n", i + 1, first);
        }
      }
      print_layers("the prompts' greedy runs", (*be_a)->layer_stats(), a.per_layer);
      std::printf("  greedy generations byte-identical (A vs B, %d new tokens at most): %d/%zu\n", a.n_new, same,
                  prompt_tokens.size());
    }
    if (!text_tokens.empty()) {
      (*be_a)->reset_stats();
      auto r = eval::perplexity(model, **be_a, text_tokens, a.n_ctx, kv_dtype, bos);
      if (!r.ok()) return fail(cmd, r.status().message());
      ppl[ri] = *r;
      if (rule != W8A8Scales::kScalesOnly) print_layers("the text", (*be_a)->layer_stats(), a.per_layer);
      std::printf("  perplexity (kernel A) %.4f ± %.4f over %lld tokens (%lld windows of %d)\n", r->ppl, r->ppl_stderr,
                  static_cast<long long>(r->scored_tokens), static_cast<long long>(r->windows), a.n_ctx);
    }
  }
  if (!text_tokens.empty()) {
    auto base = eval::perplexity(model, *cpu, text_tokens, a.n_ctx, kv_dtype, bos);
    if (!base.ok()) return fail(cmd, base.status().message());
    std::printf("\nperplexity, unquantized model: %.4f ± %.4f\n", base->ppl, base->ppl_stderr);
    const auto report = [&](const char* what, const eval::PerplexityResult& from, const eval::PerplexityResult& to) {
      const Paired p = paired_by_window(from.nll, to.nll, from.windows);
      std::printf("%s: mean NLL %+.5f [%+.5f, %+.5f] nats, perplexity %+.3f %% [%+.3f, %+.3f] "
                  "(paired, 95 %%, over %lld window means)\n",
                  what, p.mean, p.mean - p.half, p.mean + p.half, 100 * std::expm1(p.mean),
                  100 * std::expm1(p.mean - p.half), 100 * std::expm1(p.mean + p.half), static_cast<long long>(p.n));
    };
    report("pow2 vs original scales", ppl[0], ppl[1]);
    report("original scales vs unquantized", *base, ppl[0]);
    if (rules.size() > 2) report("scales rewritten without requantizing vs original", ppl[0], ppl[2]);
  }
  return 0;
}

RunFn setup(CLI::App& app) {
  auto a = std::make_shared<ConformanceArgs>();
  app.add_option("-m,--model", a->model, "GGUF model file (default: the shipped default model)");
  app.add_option("-f,--file", a->file, "text for the perplexity of each scale rule (and a layer comparison over it)");
  app.add_option("-c,--ctx-size", a->n_ctx, "perplexity window in tokens")->capture_default_str();
  app.add_option("--chunks", a->chunks, "use only the first N windows of the text");
  app.add_option("--prompts", a->prompts_file, "prompts, one per line (\\n for a newline); default: 8 built in");
  app.add_option("--tasks", a->tasks, "8 prompts from these task families (comma-separated, test split, seeds 1..8)");
  app.add_option("--task-length", a->task_length, "target length of the --tasks prompts")->capture_default_str();
  app.add_option("-n,--n-predict", a->n_new, "greedy tokens per prompt")->capture_default_str();
  app.add_option("--kernel-a", a->kernel_a, "INT8 kernel that runs the model")->capture_default_str();
  app.add_option("--kernel-b", a->kernel_b, "INT8 kernel compared with it")->capture_default_str();
  app.add_option("--out-type", a->out_type, "output type of the INT8 products: bf16 or f32")->capture_default_str();
  app.add_flag("--layers", a->per_layer, "print every layer's comparison");
  app.add_flag("--faults", a->faults,
               "instead: the fault-injection suite, kernel A against each injected epilogue fault (scale precision, "
               "double rounding, multiplication order, output truncation, fused ordering, an int16 accumulator): what a "
               "one-spacing tolerance test and the bitwise probe conclude");
  app.add_flag("!--no-scales-only", a->scales_only,
               "skip the perplexity of power-of-two scales written without requantizing the weights");
  add_engine_flags(app, a->engine, {}, {"--threads", "--kv-type"});
  return [a]() { return conformance_cmd(*a); };
}

}  // namespace

FRUGAL_COMMAND("conformance", "Do two INT8 kernels give the same model? (W8A8, original vs power-of-two scales)", setup);

}  // namespace frugal::cli
