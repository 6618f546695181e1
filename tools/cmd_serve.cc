// frugal serve: an HTTP server speaking the OpenAI, Anthropic and Ollama APIs over the batching
// engine. Diagnostics on stderr; the line "listening on http://HOST:PORT" says it is ready.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "command.h"
#include "common.h"
#include "device.h"
#include "engine_options.h"
#include "frugal/core/parse_size.h"
#include "frugal/engine/engine.h"
#include "frugal/server/http_server.h"
#include "frugal/server/request_log.h"

namespace frugal::cli {
namespace {

struct ServeArgs {
  EngineFlags engine;
  std::string model;
  std::string alias;
  std::string host = "127.0.0.1";
  int port = 8080;
  int parallel = 4;
  int n_ctx = 0;
  int batch = 512;
  int max_queue = 64;
  double queue_timeout = 120;
  int timeout = 600;
  std::string max_body = "8M";
  int threads_http = 0;
  std::string api_key;
  std::string log_requests;
  bool no_prefix_cache = false;
  bool batch_invariant = false;
};

std::atomic<server::HttpServer*> g_server{nullptr};

// Signals are blocked in every thread and taken here, so stopping runs outside a signal handler.
void watch_signals(sigset_t set) {
  int sig = 0;
  sigwait(&set, &sig);
  if (server::HttpServer* s = g_server.load()) {
    s->stop();
  } else {
    std::_Exit(128 + sig);
  }
}

int serve(const ServeArgs& a) {
  const std::string cmd = "serve";
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread(watch_signals, set).detach();

  GenerateOptions engine_opts;
  if (Status st = apply_engine_flags(a.engine, engine_opts); !st.ok()) return fail(cmd, st.message());
  auto path = resolve_model_path(a.model);
  if (!path.ok()) return fail(cmd, path.status().message());
  EngineOptions eo;
  eo.n_parallel = a.parallel;
  eo.n_ctx = a.n_ctx;
  eo.max_step_tokens = std::max(a.batch, a.parallel);
  eo.max_waiting = a.max_queue;
  eo.queue_timeout_s = a.queue_timeout;
  eo.prefix_cache = !a.no_prefix_cache;
  eo.batch_invariant = a.batch_invariant;
  eo.kv_dtype = engine_opts.kv_dtype;
  eo.kv_memory = engine_opts.kv_policy.memory;
  // --kv-policy, --kv-budget, --kv-quant...: the default of a request that names none. --kv-memory
  // sizes the shared slots, not one sequence.
  eo.kv = engine_opts.kv_policy;
  eo.kv.memory = 0;
  if (Status st = validate(eo.kv); !st.ok()) return fail(cmd, st.message());  // before the model loads
  auto body = parse_size(a.max_body);
  if (!body.ok()) return fail(cmd, "--max-body: " + body.status().message());
  if (a.timeout <= 0) return fail(cmd, "--timeout must be positive");

  auto lm = load_model(*path, false, a.engine.device);
  if (!lm.ok()) return fail(cmd, lm.status().message());
  auto draft = load_draft_model(engine_opts);
  if (!draft.ok()) return fail(cmd, draft.status().message());
  // The default of every request; one may opt out ("speculative": false, docs/speculative.md).
  eo.spec = engine_opts.spec;
  eo.prefill_sparse = engine_opts.prefill_sparse;
  eo.tilemix = engine_opts.tilemix;
  const std::string id = a.alias.empty() ? std::filesystem::path(*path).stem().string() : a.alias;

  server::Metrics metrics(id);
  std::unique_ptr<server::RequestLog> log;
  if (!a.log_requests.empty()) {
    auto l = server::RequestLog::open(a.log_requests, id);
    if (!l.ok()) return fail(cmd, l.status().message());
    log = std::move(l).value();
  }
  eo.on_finish = [&metrics, &log](const FinishedRequest& f) {
    metrics.observe(f);
    if (log) log->write(f);
  };

  CpuBackendOptions bo;
  bo.n_threads = resolve_threads(a.engine.threads);
  auto made = make_backend(a.engine.device, bo.n_threads);
  if (!made.ok()) return fail(cmd, made.status().message());
  auto backend = std::move(*made);
  auto engine = Engine::create(*lm->model, *lm->tokenizer, *backend, eo);
  if (!engine.ok()) return fail(cmd, engine.status().message());
  server::ServedModel served(*lm->model, *lm->tokenizer, id, *path, (*engine)->context_per_sequence());

  server::ServerOptions so;
  so.host = a.host;
  so.port = a.port;
  so.api_key = a.api_key.empty() && std::getenv("FRUGAL_API_KEY") ? std::getenv("FRUGAL_API_KEY") : a.api_key;
  so.max_body_bytes = *body;
  so.timeout_s = a.timeout;
  so.threads_http = a.threads_http;
  server::HttpServer http(**engine, served, metrics, so);
  const Status st = http.bind();
  if (!st.ok()) return fail(cmd, st.message());
  const EngineStats es = (*engine)->stats();
  std::fprintf(stderr,
               "frugal serve: model %s (%s), %d sequences x %d tokens, KV %.1f MiB, chat template %s, %s\n"
               "frugal serve: listening on http://%s:%d\n",
               id.c_str(), lm->model->config().arch.c_str(), es.n_slots, es.slot_capacity,
               static_cast<double>(es.kv_bytes) / (1024.0 * 1024.0), served.template_description().c_str(),
               so.api_key.empty() ? "no API key" : "API key required", a.host.c_str(), http.port());
  if (a.host != "127.0.0.1" && a.host != "localhost" && a.host != "::1" && so.api_key.empty()) {
    std::fprintf(stderr, "frugal serve: warning: listening beyond loopback without --api-key\n");
  }
  g_server.store(&http);
  http.run();
  g_server.store(nullptr);
  (*engine)->shutdown();
  std::fprintf(stderr, "frugal serve: stopped\n");
  return 0;
}

RunFn setup(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  app.add_option("-m,--model", a->model, "GGUF model file (default: the shipped default model)");
  app.add_option("-a,--alias", a->alias, "model name the APIs report (default: the file name without .gguf)");
  app.add_option("--host", a->host, "address to bind (loopback by default)")->capture_default_str();
  app.add_option("--port", a->port, "port (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  app.add_option("--parallel", a->parallel, "sequences decoded together")->capture_default_str()->check(CLI::Range(1, 256));
  app.add_option("-c,--ctx-size", a->n_ctx, "context per sequence (0: min(training context, 4096))")->capture_default_str();
  add_engine_flags(app, a->engine,
                   {{"--threads", "CPU threads for the model (0: all cores)"},
                    {"--device", "cpu or cuda (cuda: FP16 keep-everything KV cache)"},
                    {"--kv-memory", "KV cache budget, e.g. 512M (default: parallel x context)"}});
  app.add_option("-b,--batch-size", a->batch, "tokens per forward step (decodes + prefill chunks)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--max-queue", a->max_queue, "requests that may wait for a sequence slot")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--queue-timeout", a->queue_timeout, "seconds a request may wait for a slot")->capture_default_str();
  app.add_option("--timeout", a->timeout, "seconds for socket reads/writes and for a whole request")->capture_default_str();
  app.add_option("--max-body", a->max_body, "largest request body accepted")->capture_default_str();
  app.add_option("--threads-http", a->threads_http, "connections served at once (0: 4 x parallel + 64)")->capture_default_str();
  app.add_option("--api-key", a->api_key, "require this key (Bearer or x-api-key); also FRUGAL_API_KEY");
  app.add_option("--log-requests", a->log_requests, "append one JSON line per request to FILE");
  app.add_flag("--no-prefix-cache", a->no_prefix_cache, "do not reuse cached prompt prefixes");
  app.add_flag("--batch-invariant", a->batch_invariant,
               "compute every token as if it ran alone, so a response does not depend on the requests it was "
               "batched with (cpu backend; slower)");
  return [a]() { return serve(*a); };
}

}  // namespace

FRUGAL_COMMAND("serve", "Serve the model over HTTP (OpenAI, Anthropic and Ollama APIs)", setup);

}  // namespace frugal::cli
