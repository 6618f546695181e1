// frugal perplexity: perplexity of a text file in windows of -c tokens, as llama-perplexity
// computes it; with --kl-divergence-base FILE it also saves the model's log-probabilities, and
// with --kl-divergence as well it scores the model against a saved file instead (eval/kl_divergence.h).
#include <cstdio>

#include "command.h"
#include "common.h"
#include "engine_options.h"
#include "frugal/eval/harness.h"
#include "frugal/eval/kl_divergence.h"
#include "frugal/quantize/nvfp4_activation_backend.h"

namespace frugal::cli {
namespace {

struct PerplexityArgs {
  std::string model, file, kl_base, kl_values;
  std::string act_quant = "none";
  int n_ctx = 512;
  bool kl = false;
  EngineFlags engine;
};

// The backend the model runs on: the CPU backend, wrapped for --act-quant nvfp4 (W4A4 emulation).
struct EvalBackend {
  std::unique_ptr<Backend> cpu;
  std::unique_ptr<quantize::Nvfp4ActivationBackend> act;
  Backend& get() { return act ? static_cast<Backend&>(*act) : *cpu; }
};

EvalBackend make_eval_backend(const Model& model, const PerplexityArgs& a) {
  EvalBackend b;
  CpuBackendOptions bo;
  bo.n_threads = resolve_threads(a.engine.threads);
  b.cpu = make_cpu_backend(bo);
  if (a.act_quant == "nvfp4") {
    b.act = std::make_unique<quantize::Nvfp4ActivationBackend>(model, *b.cpu);
    for (const std::string& s : b.act->skipped()) {
      std::fprintf(stderr, "frugal perplexity: %s: input length not a multiple of 16, activations left in float\n",
                   s.c_str());
    }
  }
  return b;
}

int perplexity_cmd(const PerplexityArgs& a) {
  const std::string& model = a.model;
  const std::string& file = a.file;
  const int n_ctx = a.n_ctx;
  const EngineFlags& engine = a.engine;
  const std::string cmd = "perplexity";
  GenerateOptions engine_opts;
  if (Status st = apply_engine_flags(engine, engine_opts); !st.ok()) return fail(cmd, st.message());
  auto path = resolve_model_path(model);
  if (!path.ok()) return fail(cmd, path.status().message());
  if (a.kl && a.kl_base.empty()) return fail(cmd, "--kl-divergence needs --kl-divergence-base FILE (the saved base)");
  if (!a.kl_values.empty() && !a.kl) return fail(cmd, "--kl-values needs --kl-divergence");
  if (file.empty() && !a.kl) return fail(cmd, "pass the text with -f FILE");
  if (a.kl) {
    auto lm0 = load_model(*path, true);
    if (!lm0.ok()) return fail(cmd, lm0.status().message());
    EvalBackend be = make_eval_backend(*lm0->model, a);
    const TokenId bos = lm0->tokenizer->add_bos() ? lm0->tokenizer->bos() : -1;
    auto r = eval::kl_divergence(*lm0->model, be.get(), a.kl_base, engine_opts.kv_dtype, bos);
    if (!r.ok()) return fail(cmd, r.status().message());
    std::printf("%s", eval::kl_report(*r).c_str());
    if (!a.kl_values.empty()) {
      // One value per scored position, window after window: two models scored against the same
      // base pair up line by line, for intervals on their difference.
      std::FILE* f = std::fopen(a.kl_values.c_str(), "w");
      if (f == nullptr) return fail(cmd, a.kl_values + ": cannot create");
      for (float v : r->kld_values) std::fprintf(f, "%.9g\n", static_cast<double>(v));
      if (std::fclose(f) != 0) return fail(cmd, a.kl_values + ": write failed");
    }
    return 0;
  }
  auto text = read_prompt("", file);
  if (!text.ok()) return fail(cmd, text.status().message());
  auto lm = load_model(*path, true);
  if (!lm.ok()) return fail(cmd, lm.status().message());
  TokenizeOptions to;
  to.add_special = true;  // BOS first, as llama-perplexity tokenizes the text
  auto tokens = lm->tokenizer->encode(*text, to);
  if (!tokens.ok()) return fail(cmd, file + ": " + tokens.status().message());
  EvalBackend be = make_eval_backend(*lm->model, a);
  const TokenId bos = lm->tokenizer->add_bos() ? lm->tokenizer->bos() : -1;
  auto res = a.kl_base.empty()
                 ? eval::perplexity(*lm->model, be.get(), *tokens, n_ctx, engine_opts.kv_dtype, bos)
                 : eval::save_kl_base(*lm->model, be.get(), *tokens, n_ctx, engine_opts.kv_dtype, bos, a.kl_base);
  if (!res.ok()) return fail(cmd, res.status().message());
  std::printf("perplexity %.4f ± %.4f over %lld tokens (%lld windows of %d)\n", res->ppl, res->ppl_stderr,
              static_cast<long long>(res->scored_tokens), static_cast<long long>(res->windows), n_ctx);
  return 0;
}

RunFn setup(CLI::App& app) {
  auto a = std::make_shared<PerplexityArgs>();
  app.add_option("-m,--model", a->model, "GGUF model file (default: the shipped default model)");
  app.add_option("-f,--file", a->file, "text file");
  app.add_option("-c,--ctx-size", a->n_ctx, "window size in tokens")->capture_default_str();
  app.add_option("--kl-divergence-base", a->kl_base,
                 "save the log-probabilities to FILE (llama-perplexity's format); with --kl-divergence, read them");
  app.add_flag("--kl-divergence", a->kl, "score the model against --kl-divergence-base FILE: KLD, Δp, same top");
  app.add_option("--kl-values", a->kl_values,
                 "with --kl-divergence: write each scored position's KLD to FILE, one per line, in order");
  app.add_option("--act-quant", a->act_quant,
                 "none, or nvfp4: quantize the input of every block linear layer to NVFP4 (16-element groups, E4M3 "
                 "scales, per-token global scale) before the product: W4A4 emulated on the CPU")
      ->check(CLI::IsMember({"none", "nvfp4"}))
      ->capture_default_str();
  add_engine_flags(app, a->engine, {}, {"--threads", "--kv-type"});
  return [a]() { return perplexity_cmd(*a); };
}

}  // namespace

FRUGAL_COMMAND("perplexity", "Perplexity of a text file", setup);

}  // namespace frugal::cli
