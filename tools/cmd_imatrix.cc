// frugal imatrix: the importance matrix of a model on calibration text, in llama.cpp's .dat
// format (quantize/imatrix_file.h), for `frugal quantize --imatrix` or llama-quantize.
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "command.h"
#include "common.h"
#include "engine_options.h"
#include "frugal/quantize/importance_collector.h"

namespace frugal::cli {
namespace {

struct ImatrixArgs {
  std::string model, file, out = "imatrix.dat";
  int n_ctx = 512;
  int chunks = -1;
  EngineFlags engine;
};

int imatrix_cmd(const ImatrixArgs& a) {
  const std::string cmd = "imatrix";
  GenerateOptions engine_opts;
  if (Status st = apply_engine_flags(a.engine, engine_opts); !st.ok()) return fail(cmd, st.message());
  auto path = resolve_model_path(a.model);
  if (!path.ok()) return fail(cmd, path.status().message());
  if (a.file.empty()) return fail(cmd, "pass the calibration text with -f FILE");
  auto text = read_prompt("", a.file);
  if (!text.ok()) return fail(cmd, text.status().message());
  auto lm = load_model(*path, true);
  if (!lm.ok()) return fail(cmd, lm.status().message());
  TokenizeOptions to;
  to.add_special = true;  // BOS first, as llama-imatrix tokenizes the text
  auto tokens = lm->tokenizer->encode(*text, to);
  if (!tokens.ok()) return fail(cmd, a.file + ": " + tokens.status().message());
  CpuBackendOptions bo;
  bo.n_threads = resolve_threads(a.engine.threads);
  auto be = make_cpu_backend(bo);
  quantize::ImatrixRunOptions o;
  o.n_ctx = a.n_ctx;
  o.max_chunks = a.chunks;
  o.kv_dtype = engine_opts.kv_dtype;
  o.bos = lm->tokenizer->add_bos() ? lm->tokenizer->bos() : -1;
  o.dataset = a.file;
  if (isatty(STDERR_FILENO)) {
    o.progress = [](int32_t done, int32_t total) {
      std::fprintf(stderr, "\rimatrix: chunk %d/%d", done, total);
      if (done == total) std::fprintf(stderr, "\n");
    };
  }
  auto m = quantize::collect_imatrix(*lm->model, *be, *tokens, o);
  if (!m.ok()) return fail(cmd, m.status().message());
  if (Status st = quantize::write_imatrix(a.out, *m); !st.ok()) return fail(cmd, st.message());
  std::fprintf(stderr, "frugal imatrix: %zu entries over %d chunks of %d tokens -> %s\n", m->entries.size(),
               m->chunks, a.n_ctx, a.out.c_str());
  return 0;
}

RunFn setup(CLI::App& app) {
  auto a = std::make_shared<ImatrixArgs>();
  app.add_option("-m,--model", a->model, "GGUF model file (default: the shipped default model)");
  app.add_option("-f,--file", a->file, "calibration text");
  app.add_option("-o,--output", a->out, "output .dat file")->capture_default_str();
  app.add_option("-c,--ctx-size", a->n_ctx, "tokens per chunk")->capture_default_str();
  app.add_option("--chunks", a->chunks, "at most this many chunks (-1: all)")->capture_default_str();
  add_engine_flags(app, a->engine, {}, {"--threads", "--kv-type"});
  return [a]() { return imatrix_cmd(*a); };
}

}  // namespace

FRUGAL_COMMAND("imatrix", "Importance matrix from calibration text (llama.cpp's .dat format)", setup);

}  // namespace frugal::cli
