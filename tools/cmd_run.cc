// frugal run: generate text from a prompt. Generated text only on stdout, diagnostics on stderr;
// --json prints one object instead.
#include <cstdio>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "command.h"
#include "common.h"
#include "device.h"
#include "engine_options.h"
#include "frugal/engine/generate.h"
#include "frugal/engine/timings_json.h"
#include "frugal/eval/score.h"
#include "frugal/eval/task.h"
#include "frugal/quantize/nvfp4_activation_backend.h"

namespace frugal::cli {
namespace {

// The W4A4 emulation wrapper together with the backend it wraps, so that one pointer owns both.
class ActQuantOwner final : public Backend {
 public:
  ActQuantOwner(const Model& m, std::unique_ptr<Backend> inner) : inner_(std::move(inner)), act_(m, *inner_) {}
  std::string name() const override { return act_.name(); }
  int n_threads() const override { return act_.n_threads(); }
  uint64_t contended_dispatches() const override { return act_.contended_dispatches(); }
  void set_row_invariant(bool on) override { act_.set_row_invariant(on); }
  void matmul(const WeightTensor& w, const float* x, int64_t n, float* y, const float* bias) override {
    act_.matmul(w, x, n, y, bias);
  }
  void get_rows(const WeightTensor& w, const int32_t* ids, int64_t n, float* y) override { act_.get_rows(w, ids, n, y); }
  void rms_norm(const float* x, const float* weight, int64_t r, int64_t d, float eps, float* y) override {
    act_.rms_norm(x, weight, r, d, eps, y);
  }
  void rope(float* x, int64_t t, int64_t h, int64_t hd, const int32_t* pos, const RopeParams& p) override {
    act_.rope(x, t, h, hd, pos, p);
  }
  void swiglu(const float* g, const float* u, int64_t n, float* out) override { act_.swiglu(g, u, n, out); }
  void add(float* x, const float* y, int64_t n) override { act_.add(x, y, n); }
  void attention(const float* q, const KvView& kv, int layer, const int32_t* seq, const int32_t* pos, int64_t n,
                 const AttentionParams& p, float* out) override {
    act_.attention(q, kv, layer, seq, pos, n, p, out);
  }

 private:
  std::unique_ptr<Backend> inner_;
  quantize::Nvfp4ActivationBackend act_;
};

struct RunArgs {
  std::string model;
  std::string prompt;
  std::string prompt_file;
  std::string system;
  int n_predict = 128;
  int n_ctx = 0;
  int n_batch = 512;
  EngineFlags engine;
  std::string act_quant = "none";
  bool chat = false;
  bool json = false;
  bool ignore_eos = false;
  bool verbose = false;
  bool temp_given = false;
  std::string task;           // generate the prompt from a task family and score the answer
  uint64_t task_seed = 1;
  int64_t task_length = 512;
  std::vector<std::string> stop;
  SamplingParams sampling;
};

Result<std::string> render_chat(const Tokenizer& tok, const RunArgs& a, const std::string& user) {
  FRUGAL_ASSIGN_OR_RETURN(ChatTemplateKind kind, detect_chat_template(tok.chat_template()));
  std::vector<ChatMessage> msgs;
  if (!a.system.empty()) msgs.push_back({"system", a.system});
  msgs.push_back({"user", user});
  const std::string bos = tok.bos() >= 0 ? tok.piece(tok.bos(), true) : "";
  const std::string eos = tok.eos() >= 0 ? tok.piece(tok.eos(), true) : "";
  return apply_chat_template(kind, msgs, true, bos, eos);
}

int run(const RunArgs& a) {
  const std::string cmd = "run";
  GenerateOptions go;
  if (Status s = apply_engine_flags(a.engine, go); !s.ok()) return fail(cmd, s.message());
  if (Status s = validate(go.kv_policy); !s.ok()) return fail(cmd, s.message());
  auto path = resolve_model_path(a.model);
  if (!path.ok()) return fail(cmd, path.status().message());
  std::optional<eval::TaskExample> task;
  Result<std::string> prompt = std::string();
  if (!a.task.empty()) {
    eval::TaskOptions to;
    to.length = a.task_length;
    auto ex = eval::generate_task(a.task, eval::TaskSplit::kTest, a.task_seed, to);
    if (!ex.ok()) return fail(cmd, "--task: " + ex.status().message());
    task = *ex;
    prompt = ex->prompt;
    std::fprintf(stderr, "task %s (test split, seed %llu, %lld tokens); the prompt ends with:\n%s\n",
                 a.task.c_str(), static_cast<unsigned long long>(a.task_seed), static_cast<long long>(ex->n_tokens()),
                 ex->prompt.substr(ex->prompt.size() > 300 ? ex->prompt.size() - 300 : 0).c_str());
  } else {
    prompt = read_prompt(a.prompt, a.prompt_file);
  }
  if (!prompt.ok()) return fail(cmd, prompt.status().message());
  if (prompt->empty()) return fail(cmd, "no prompt: pass -p TEXT, -f FILE, --task FAMILY or pipe text on stdin");
  auto lm = load_model(*path, !a.json && a.engine.device == "cpu", a.engine.device);
  if (!lm.ok()) return fail(cmd, lm.status().message());
  const Tokenizer& tok = *lm->tokenizer;
  auto draft = load_draft_model(go);
  if (!draft.ok()) return fail(cmd, draft.status().message());

  std::string text = *prompt;
  TokenizeOptions to;
  if (a.chat) {
    auto rendered = render_chat(tok, a, text);
    if (!rendered.ok()) return fail(cmd, rendered.status().message());
    text = *rendered;
    to.parse_special = true;
    to.add_special = false;  // the template writes BOS itself where the family wants one
  }
  auto tokens = tok.encode(text, to);
  if (!tokens.ok()) return fail(cmd, "prompt: " + tokens.status().message());

  go.n_predict = a.n_predict;

  const int64_t train_ctx = lm->model->config().n_ctx_train;
  go.n_ctx = a.n_ctx > 0 ? a.n_ctx : static_cast<int32_t>(std::min<int64_t>(train_ctx > 0 ? train_ctx : 4096, 4096));
  go.n_batch = a.n_batch;
  go.ignore_eos = a.ignore_eos;
  go.stop = a.stop;
  go.sampling = a.sampling;
  if (task) go.sampling.temperature = a.temp_given ? a.sampling.temperature : 0;  // tasks are scored greedily

  CpuBackendOptions bo;
  bo.n_threads = resolve_threads(a.engine.threads);
  if (a.act_quant != "none" && a.engine.device != "cpu") {
    // The emulation quantizes activations in host memory between the ops of the CPU backend.
    return fail(cmd, "--act-quant " + a.act_quant + " runs on the CPU backend only (not --device " + a.engine.device + ")");
  }
  auto made = make_backend(a.engine.device, bo.n_threads);
  if (!made.ok()) return fail(cmd, made.status().message());
  auto backend = std::move(*made);
  if (a.act_quant == "nvfp4") {
    // W4A4 emulated: every block linear's input quantized to NVFP4 first (quantize/nvfp4_activation_backend.h).
    backend = std::make_unique<ActQuantOwner>(*lm->model, std::move(backend));
  }
  if (a.verbose) {
    std::fprintf(stderr, "model %s: %s, %lld layers, %lld params bytes, types %s; prompt %zu tokens; %d threads\n",
                 path->c_str(), lm->model->config().arch.c_str(), static_cast<long long>(lm->model->config().n_layer),
                 static_cast<long long>(lm->model->weights().bytes), lm->model->describe_types().c_str(),
                 tokens->size(), bo.n_threads);
  }
  TextCallback stream;
  if (!a.json) {
    stream = [](const std::string& s) {
      std::fwrite(s.data(), 1, s.size(), stdout);
      std::fflush(stdout);
      return true;
    };
  }
  auto res = generate(*lm->model, tok, *backend, *tokens, go, stream);
  if (!res.ok()) return fail(cmd, res.status().message());
  if (a.json) {
    nlohmann::json j = {{"text", res->text},
                        {"prompt_tokens", res->prompt_tokens},
                        {"tokens", res->tokens},
                        {"stop_reason", res->stop_reason},
                        {"timings", timings_json<nlohmann::json>(local_request_timings(res->timings))},
                        {"kv", {{"policy", go.kv_policy.policy},
                                {"quant", kv_quant_name(go.kv_policy.quant)},
                                {"memory_tokens", res->kv_eviction.memory_tokens},
                                {"budget_tokens", res->kv_eviction.budget},
                                {"rounds", res->kv_eviction.rounds},
                                {"round_ms", res->kv_eviction.round_ms},
                                {"stats_ms", res->kv_eviction.stats_ms},
                                {"reserved_bytes", res->kv_bytes},
                                {"peak_used_bytes", res->kv_eviction.peak_used_bytes}}},
                        {"speculative", {{"method", res->speculative.method},
                                         {"candidates", res->speculative.candidates},
                                         {"rule", res->speculative.rule},
                                         {"passes", res->speculative.passes},
                                         {"drafted", res->speculative.drafted},
                                         {"accepted", res->speculative.accepted},
                                         {"emitted", res->speculative.emitted},
                                         {"other_chain", res->speculative.other_chain},
                                         {"draft_ms", res->speculative.draft_ms},
                                         {"skip_set", res->speculative.skip_set},
                                         {"search_ms", res->speculative.search_ms},
                                         {"pool", res->speculative.pool},
                                         {"acceptance_rate", res->speculative.acceptance_rate()},
                                         {"tokens_per_pass", res->speculative.tokens_per_pass()}}},
                        {"weights", {{"bytes", lm->model->weights().bytes},
                                     {"repacked_bytes", lm->model->weights().repacked_bytes}}},
                        {"peak_rss_bytes", peak_rss_bytes()}};
    if (task) {
      // The testbed's score of this completion (bench/spec_audit.py reports accuracy from it).
      const eval::TaskScore sc = eval::score_completion(*task, res->text);
      j["task"] = {{"expected", task->final_answer}, {"extracted", sc.extracted}, {"correct", sc.correct}};
    }
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::fputc('\n', stdout);
    std::fflush(stdout);  // the text before the diagnostics when both go to one pipe
    if (task) {
      const eval::TaskScore sc = eval::score_completion(*task, res->text);
      std::fprintf(stderr, "expected answer: %s; %s\n", task->final_answer.c_str(),
                   sc.correct ? "correct" : ("wrong (got '" + sc.extracted + "')").c_str());
    }
    std::fprintf(stderr, "prefill: %lld tokens, %.1f tok/s; decode: %lld tokens, %.1f tok/s; stop: %s\n",
                 static_cast<long long>(res->timings.prefill_tokens), res->timings.prefill_tok_s(),
                 static_cast<long long>(res->timings.decode_tokens), res->timings.decode_tok_s(),
                 res->stop_reason.c_str());
    if (res->speculative.passes > 0) {
      const SpeculativeStats& sp = res->speculative;
      std::fprintf(stderr,
                   "speculative %s: %lld verify passes, %lld drafted, %lld accepted (%.1f%%), %.2f tokens per pass\n",
                   sp.method.c_str(), static_cast<long long>(sp.passes), static_cast<long long>(sp.drafted),
                   static_cast<long long>(sp.accepted), 100.0 * sp.acceptance_rate(), sp.tokens_per_pass());
    }
    if (go.kv_policy.policy != "full" || go.kv_policy.quant != KvQuant::kNone || go.kv_policy.memory > 0) {
      const KvEvictionStats& k = res->kv_eviction;
      std::fprintf(stderr, "kv %s (quant %s): budget %d tokens/head, %lld rounds, %.3f ms/round (%.3f ms statistics); KV %llu "
                   "bytes reserved, %llu peak live\n",
                   go.kv_policy.policy.c_str(), kv_quant_name(go.kv_policy.quant), k.budget, static_cast<long long>(k.rounds),
                   k.rounds > 0 ? k.round_ms / static_cast<double>(k.rounds) : 0.0,
                   k.rounds > 0 ? k.stats_ms / static_cast<double>(k.rounds) : 0.0,
                   static_cast<unsigned long long>(res->kv_bytes), static_cast<unsigned long long>(k.peak_used_bytes));
    }
  }
  return 0;
}

RunFn setup(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  app.add_option("-m,--model", a->model, "GGUF model file (default: the shipped default model)");
  app.add_option("-p,--prompt", a->prompt, "prompt text");
  app.add_option("-f,--file", a->prompt_file, "read the prompt from a file (else -p, else stdin)");
  app.add_option("-n,--n-predict", a->n_predict, "tokens to generate (-1: until end of text)")->capture_default_str();
  app.add_option("-c,--ctx-size", a->n_ctx, "context size in tokens (0: min(training context, 4096))")->capture_default_str();
  app.add_option("-b,--batch-size", a->n_batch, "prompt tokens per forward pass")->capture_default_str()->check(CLI::PositiveNumber);
  add_engine_flags(app, a->engine, {{"--device", "cpu or cuda (cuda: keep-everything FP16 KV cache only)"}});
  app.add_option("--temp", a->sampling.temperature, "temperature (0: greedy)")->capture_default_str()
      ->each([a](const std::string&) { a->temp_given = true; });
  app.add_option("--top-k", a->sampling.top_k, "top-k (0: off)")->capture_default_str();
  app.add_option("--top-p", a->sampling.top_p, "top-p (1: off)")->capture_default_str();
  app.add_option("--min-p", a->sampling.min_p, "min-p (0: off)")->capture_default_str();
  app.add_option("--repeat-penalty", a->sampling.repeat_penalty, "repetition penalty (1: off)")->capture_default_str();
  app.add_option("--repeat-last-n", a->sampling.repeat_last_n, "tokens the penalties look back over")->capture_default_str();
  app.add_option("--presence-penalty", a->sampling.presence_penalty, "presence penalty")->capture_default_str();
  app.add_option("--frequency-penalty", a->sampling.frequency_penalty, "frequency penalty")->capture_default_str();
  app.add_option("-s,--seed", a->sampling.seed, "sampling seed")->capture_default_str();
  app.add_option("--stop", a->stop, "stop string (repeatable)");
  app.add_flag("--ignore-eos", a->ignore_eos, "keep generating after end-of-text tokens");
  app.add_option("--task", a->task, "prompt with a generated test task of this family and score the answer (greedy)");
  app.add_option("--task-seed", a->task_seed, "seed of the --task example")->capture_default_str();
  app.add_option("--task-length", a->task_length, "target length in tokens of the --task example")->capture_default_str();
  app.add_flag("--chat", a->chat, "wrap the prompt in the model's chat template");
  app.add_option("--act-quant", a->act_quant,
                 "none, or nvfp4: quantize the input of every block linear layer to NVFP4 before the product (W4A4 "
                 "emulated, CPU backend, slow)")
      ->check(CLI::IsMember({"none", "nvfp4"}))
      ->capture_default_str();
  app.add_option("--system", a->system, "system message for --chat");
  app.add_flag("--json", a->json, "print one JSON object with text, tokens, timings and peak memory");
  app.add_flag("-v,--verbose", a->verbose, "describe the model and run on stderr");
  return [a]() { return run(*a); };
}

}  // namespace

FRUGAL_COMMAND("run", "Generate text from a prompt", setup);

}  // namespace frugal::cli
