// frugal perplexity: perplexity of a text file in windows of -c tokens, scoring the second half of
// each window.
#include <cstdio>

#include "command.h"
#include "common.h"
#include "engine_options.h"
#include "frugal/eval/harness.h"

namespace frugal::cli {
namespace {

int perplexity_cmd(const std::string& model, const std::string& file, int n_ctx, const EngineFlags& engine) {
  const std::string cmd = "perplexity";
  GenerateOptions engine_opts;
  if (Status st = apply_engine_flags(engine, engine_opts); !st.ok()) return fail(cmd, st.message());
  auto path = resolve_model_path(model);
  if (!path.ok()) return fail(cmd, path.status().message());
  if (file.empty()) return fail(cmd, "pass the text with -f FILE");
  auto text = read_prompt("", file);
  if (!text.ok()) return fail(cmd, text.status().message());
  auto lm = load_model(*path, true);
  if (!lm.ok()) return fail(cmd, lm.status().message());
  TokenizeOptions to;
  to.add_special = false;
  auto tokens = lm->tokenizer->encode(*text, to);
  if (!tokens.ok()) return fail(cmd, file + ": " + tokens.status().message());
  CpuBackendOptions bo;
  bo.n_threads = resolve_threads(engine.threads);
  auto be = make_cpu_backend(bo);
  const TokenId bos = lm->tokenizer->add_bos() ? lm->tokenizer->bos() : -1;
  auto res = eval::perplexity(*lm->model, *be, *tokens, n_ctx, engine_opts.kv_dtype, bos);
  if (!res.ok()) return fail(cmd, res.status().message());
  std::printf("perplexity %.4f ± %.4f over %lld tokens (%lld windows of %d)\n", res->ppl, res->ppl_stderr,
              static_cast<long long>(res->scored_tokens), static_cast<long long>(res->windows), n_ctx);
  return 0;
}

RunFn setup(CLI::App& app) {
  struct Args {
    std::string model, file;
    int n_ctx = 512;
    EngineFlags engine;
  };
  auto a = std::make_shared<Args>();
  app.add_option("-m,--model", a->model, "GGUF model file (default: the shipped default model)");
  app.add_option("-f,--file", a->file, "text file");
  app.add_option("-c,--ctx-size", a->n_ctx, "window size in tokens")->capture_default_str();
  add_engine_flags(app, a->engine, {}, {"--threads", "--kv-type"});
  return [a]() { return perplexity_cmd(a->model, a->file, a->n_ctx, a->engine); };
}

}  // namespace

FRUGAL_COMMAND("perplexity", "Perplexity of a text file", setup);

}  // namespace frugal::cli
