// frugal bench: llama-bench's pp/tg semantics. ppN = one N-token prompt processed in batches of
// -b tokens from an empty cache; tgN = N single-token decode steps from an empty cache. Each test
// is preceded by a warm-up and repeated -r times; tokens/s as mean ± sample standard deviation.
// On the CPU the memory roofline is measured after the tests (a streaming read with the same
// threads), and every tg figure is also given as the fraction of it that the step's reads use:
// weight bytes per step (every matrix once; the embedding table only when it is also the output)
// plus the F16 KV rows attended, times steps/s, over the measured rate.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>

#include <nlohmann/json.hpp>

#include "command.h"
#include "common.h"
#include "device.h"
#include "engine_options.h"

namespace frugal::cli {
namespace {

struct BenchArgs {
  std::string model;
  std::vector<int> n_prompt{512};
  std::vector<int> n_gen{128};
  EngineFlags engine;
  int reps = 5;
  int n_batch = 512;
  int n_parallel = 1;
  int depth = 0;
  bool fill_depth = false;
  bool roofline = false;
  bool no_roofline = false;
  bool json = false;
};

struct TestResult {
  std::string name;
  int n_prompt = 0;
  int n_gen = 0;
  std::vector<double> samples;  // tokens/s
  double mean() const {
    double s = 0;
    for (double x : samples) s += x;
    return samples.empty() ? 0 : s / static_cast<double>(samples.size());
  }
  double sd() const {
    if (samples.size() < 2) return 0;
    const double m = mean();
    double s = 0;
    for (double x : samples) s += (x - m) * (x - m);
    return std::sqrt(s / static_cast<double>(samples.size() - 1));
  }
};

// The cache of one repetition: the model's shape, `quant` rows (hyquant with room to stage one
// prompt batch, as generation sets it up).
struct CacheSpec {
  DType dtype = DType::kF16;
  KvQuant quant = KvQuant::kNone;
  int n_batch = 512;
  bool fill_depth = false;  // write the depth's rows directly (random values) instead of a prefill
};

// Writes `depth` random K/V rows per (layer, sequence): the attention of later steps costs the same
// as over rows a prefill wrote, without the prefill's time (minutes at 16k tokens on a few cores).
Status fill_cache(const Model& model, KvCache& kv, int n_par, int depth, std::mt19937& rng) {
  const ModelConfig& c = model.config();
  const size_t row = static_cast<size_t>(c.n_head_kv * c.head_dim);
  constexpr size_t kPool = 1021;  // distinct rows, cycled (drawing every value costs more than the fill)
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> pool(row * kPool);
  for (float& x : pool) x = normal(rng);
  size_t next = 0;
  for (int s = 0; s < n_par; ++s) {
    for (int p = 0; p < depth; ++p) {
      for (int64_t l = 0; l < c.n_layer; ++l) {
        const float* k = pool.data() + row * (next % kPool);
        const float* v = pool.data() + row * ((next + 500) % kPool);
        ++next;
        FRUGAL_RETURN_IF_ERROR(kv.append(static_cast<int>(l), s, p, k, v));
      }
    }
  }
  return ok_status();
}

// Runs one repetition and returns tokens/s; the cache starts empty. With n_par > 1 every decode
// step carries one token of each of n_par sequences (tokens/s counts all of them). With depth > 0
// each sequence first gets `depth` untimed context tokens, so pp/tg are measured at that depth.
Result<double> run_once(Model& model, Backend& be, int n_prompt, int n_gen, int n_batch, int n_par, int depth,
                        const CacheSpec& cs, std::mt19937& rng) {
  const int64_t n_vocab = model.config().n_vocab;
  KvCacheOptions ko = model.kv_options(n_par, depth + n_prompt + n_gen + 1, cs.dtype);
  ko.quant = cs.quant;
  if (ko.quant == KvQuant::kHyQuant) ko.residual = 2 * kKvGroup + cs.n_batch;
  FRUGAL_ASSIGN_OR_RETURN(KvCache kv, KvCache::create(ko));
  if (cs.fill_depth && depth > 0) {
    FRUGAL_RETURN_IF_ERROR(fill_cache(model, kv, n_par, depth, rng));
  }
  // Logits only for the rows asked for: one per prompt chunk, one per sequence per decode step.
  std::vector<float> logits(static_cast<size_t>(n_vocab * n_par));
  std::uniform_int_distribution<int> tok(0, static_cast<int>(n_vocab) - 1);
  Batch b;
  const auto prefill = [&](int from, int to) -> Status {
    for (int s = 0; s < (from == 0 && depth > 0 ? n_par : 1); ++s) {
      for (int i = from; i < to; i += n_batch) {
        b.clear();
        const int end = std::min(to, i + n_batch);
        for (int j = i; j < end; ++j) b.add(tok(rng), j, s, j + 1 == end);
        FRUGAL_RETURN_IF_ERROR(model.forward(b, kv, be, logits.data()));
      }
    }
    return ok_status();
  };
  if (!cs.fill_depth) FRUGAL_RETURN_IF_ERROR(prefill(0, depth));
  const auto t0 = std::chrono::steady_clock::now();
  FRUGAL_RETURN_IF_ERROR(prefill(depth, depth + n_prompt));
  for (int i = 0; i < n_gen; ++i) {
    b.clear();
    for (int s = 0; s < n_par; ++s) b.add(tok(rng), depth + n_prompt + i, s, true);
    FRUGAL_RETURN_IF_ERROR(model.forward(b, kv, be, logits.data()));
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return (n_prompt + static_cast<double>(n_gen) * n_par) / s;
}

uint64_t tensor_bytes(const WeightTensor& w) { return static_cast<uint64_t>(w.rows) * w.row_stride; }

// Bytes one decode step of one sequence reads from memory: every weight matrix once, and the K and
// V rows of `context` cached tokens (F16, or codes plus their FP16 step/min per group of 32 keys
// of a channel and per 32 channels of a value row). Norm vectors are negligible and left out.
double step_read_bytes(const Model& m, double context, KvQuant quant = KvQuant::kNone) {
  const ModelWeights& w = m.weights();
  uint64_t bytes = tensor_bytes(w.output);
  for (const LayerWeights& l : w.layers) {
    for (const WeightTensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) bytes += tensor_bytes(*t);
  }
  const ModelConfig& c = m.config();
  const double hd = static_cast<double>(c.head_dim);
  const int bits = kv_quant_bits(quant);
  const double per_head = bits == 0 ? 2 * hd * 2 : 2 * hd * bits / 8 + hd * 4 / kKvGroup + hd / kKvGroup * 4;
  const double kv_per_token = static_cast<double>(c.n_layer * c.n_head_kv) * per_head;
  return static_cast<double>(bytes) + kv_per_token * context;
}

int bench(const BenchArgs& a) {
  const std::string cmd = "bench";
  GenerateOptions engine_opts;
  if (Status st = apply_engine_flags(a.engine, engine_opts); !st.ok()) return fail(cmd, st.message());
  // bench measures the cache as configured (type, quantization) but keeps every token: no eviction.
  if (engine_opts.kv_policy.policy != "full") {
    return fail(cmd, "--kv-policy " + engine_opts.kv_policy.policy +
                         ": bench keeps every token (full); eviction runs in `frugal run`, `frugal eval` and `frugal serve`");
  }
  if (engine_opts.kv_policy.memory > 0) {
    return fail(cmd, "--kv-memory: bench sizes the cache to each test (depth + prompt + generated tokens)");
  }
  if (a.reps < 1) return fail(cmd, "-r must be at least 1");
  auto path = resolve_model_path(a.model);
  if (!path.ok()) return fail(cmd, path.status().message());
  ModelLoadOptions mo;
  // Touching every page up front (the progress bar) would make the whole file resident; the
  // CUDA backend reads each tensor once for its upload and then gives its pages back.
  mo.progress = !a.json && a.engine.device == "cpu";
  mo.cpu_layouts = a.engine.device == "cpu";
  auto model = Model::load(*path, mo);
  if (!model.ok()) return fail(cmd, model.status().message());
  if (a.n_parallel < 1) return fail(cmd, "--parallel must be at least 1");
  if (a.depth < 0) return fail(cmd, "--depth must not be negative");
  CpuBackendOptions bo;
  bo.n_threads = resolve_threads(a.engine.threads);
  auto made = make_backend(a.engine.device, bo.n_threads);
  if (!made.ok()) return fail(cmd, made.status().message());
  auto be = std::move(*made);
  std::mt19937 rng(1234);
  CacheSpec cs;
  cs.dtype = engine_opts.kv_dtype;
  cs.quant = engine_opts.kv_policy.quant;
  cs.n_batch = a.n_batch;
  cs.fill_depth = a.fill_depth;
  if (cs.quant != KvQuant::kNone && a.engine.device != "cpu") {
    return fail(cmd, "--kv-quant: the quantized caches run on the CPU backend only");
  }

  std::vector<TestResult> tests;
  for (int p : a.n_prompt) {
    if (p > 0) tests.push_back({"pp" + std::to_string(p), p, 0, {}});
  }
  for (int g : a.n_gen) {
    if (g > 0) {
      tests.push_back({"tg" + std::to_string(g) + (a.n_parallel > 1 ? "x" + std::to_string(a.n_parallel) : ""), 0, g,
                       {}});
    }
  }
  if (a.depth > 0) {
    for (auto& t : tests) t.name += "@d" + std::to_string(a.depth);
  }
  for (auto& t : tests) {
    // Warm-up: touches the weights and grows every buffer once.
    const int par = t.n_gen > 0 ? a.n_parallel : 1;
    // Two decode steps: the CUDA backend captures a step's graph the second time it runs.
    auto w = run_once(**model, *be, t.n_prompt > 0 ? std::min(t.n_prompt, a.n_batch) : 0, t.n_gen > 0 ? 2 : 0,
                      a.n_batch, par, 0, cs, rng);
    if (!w.ok()) return fail(cmd, w.status().message());
    for (int r = 0; r < a.reps; ++r) {
      auto ts = run_once(**model, *be, t.n_prompt, t.n_gen, a.n_batch, par, a.depth, cs, rng);
      if (!ts.ok()) return fail(cmd, ts.status().message());
      t.samples.push_back(*ts);
    }
    if (!a.json) {
      std::printf("%-40s %-24s %3d threads %4s %10s %10.2f ± %.2f tok/s\n", path->c_str(),
                  (*model)->describe_types().substr(0, 24).c_str(), bo.n_threads, be->name().c_str(), t.name.c_str(),
                  t.mean(), t.sd());
      std::fflush(stdout);
    }
  }
  // The roofline is measured after the tests, so its buffer neither disturbs them nor counts in the
  // peak memory reported.
  const uint64_t peak_rss = peak_rss_bytes();
  double bandwidth = 0;
  int bw_threads = 0;
  if (be->name() == "cpu" && !a.no_roofline) {
    auto bw = measure_cpu_read_bandwidth(bo.n_threads);
    if (!bw.ok()) return fail(cmd, bw.status().message());
    bandwidth = bw->read_bytes_per_s;
    bw_threads = bw->threads;
  }
  // Fraction of the roofline a tg test's reads use (0 when not measured or not a tg test).
  const auto roofline_fraction = [&](const TestResult& t) {
    if (bandwidth <= 0 || t.n_gen <= 0) return 0.0;
    const int par = a.n_parallel;
    const double context = a.depth + (t.n_gen + 1) / 2.0;
    const double steps_per_s = t.mean() / par;
    const double bytes =
        step_read_bytes(**model, 0) + (step_read_bytes(**model, context, cs.quant) - step_read_bytes(**model, 0)) * par;
    return bytes * steps_per_s / bandwidth;
  };
  if (!a.json && bandwidth > 0) {
    std::printf("memory read bandwidth: %.2f GB/s (%d threads); weight bytes per token: %.1f MiB (%.1f MiB repacked "
                "in place at load)\n",
                bandwidth / 1e9, bw_threads, step_read_bytes(**model, 0) / (1024.0 * 1024.0),
                static_cast<double>((*model)->weights().repacked_bytes) / (1024.0 * 1024.0));
    for (const auto& t : tests) {
      if (t.n_gen > 0) {
        std::printf("%-10s %.2f tok/s = %.1f%% of the memory roofline\n", t.name.c_str(), t.mean(),
                    100.0 * roofline_fraction(t));
      }
    }
  }
  if (a.json) {
    nlohmann::json j;
    j["model"] = *path;
    j["arch"] = (*model)->config().arch;
    j["types"] = (*model)->describe_types();
    j["model_bytes"] = (*model)->weights().bytes;
    j["repacked_bytes"] = (*model)->weights().repacked_bytes;  // rewritten in place at load, no copy
    j["threads"] = bo.n_threads;
    j["backend"] = be->name();
    j["tests"] = nlohmann::json::array();
    for (const auto& t : tests) {
      j["tests"].push_back({{"name", t.name}, {"n_prompt", t.n_prompt}, {"n_gen", t.n_gen}, {"kv_quant", std::string(kv_quant_name(cs.quant))},
                            {"n_parallel", t.n_gen > 0 ? a.n_parallel : 1}, {"depth", a.depth},
                            {"avg_ts", t.mean()}, {"stddev_ts", t.sd()}, {"samples_ts", t.samples}});
      if (bandwidth > 0 && t.n_gen > 0) j["tests"].back()["roofline_fraction"] = roofline_fraction(t);
    }
    j["peak_rss_bytes"] = peak_rss;
    j["weight_bytes_per_token"] = step_read_bytes(**model, 0);
    if (bandwidth > 0) {
      j["cpu"] = {{"read_bytes_per_s", bandwidth}, {"threads", bw_threads}};
    }
    const GpuStatus gpu = gpu_status();
    if (be->name() == "cuda" && gpu.present) {
      j["gpu"] = {{"name", gpu.name}, {"memory_used_bytes", gpu.used_bytes}, {"memory_total_bytes", gpu.total_bytes}};
      if (a.roofline) {
        auto r = measure_gpu_roofline();
        if (!r.ok()) return fail(cmd, r.status().message());
        j["gpu"]["copy_bytes_per_s"] = r->copy_bytes_per_s;
        j["gpu"]["bf16_flops"] = r->bf16_flops;
      }
    }
    std::cout << j.dump(2) << "\n";
  }
  return 0;
}

RunFn setup(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  app.add_option("-m,--model", a->model, "GGUF model file (default: the shipped default model)");
  app.add_option("-p,--n-prompt", a->n_prompt, "prompt sizes to test (repeatable)")->capture_default_str();
  app.add_option("-n,--n-gen", a->n_gen, "generation lengths to test (repeatable)")->capture_default_str();
  app.add_option("-r,--repetitions", a->reps, "repetitions per test")->capture_default_str();
  app.add_option("-b,--batch-size", a->n_batch, "prompt tokens per forward pass")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--parallel", a->n_parallel, "sequences decoded together in tg tests (one token each per step)")
      ->capture_default_str();
  app.add_option("-d,--depth", a->depth, "context tokens already in the cache before each timed test (untimed)")
      ->capture_default_str();
  app.add_flag("--fill-depth", a->fill_depth,
               "write the -d context as random K/V rows instead of running the model over it (fast)");
  add_engine_flags(app, a->engine);
  app.add_flag("--roofline", a->roofline, "cuda, --json: also measure copy bandwidth and BF16 GEMM peak");
  app.add_flag("--no-roofline", a->no_roofline, "cpu: skip the memory bandwidth measurement after the tests");
  app.add_flag("--json", a->json, "print results as JSON");
  return [a]() { return bench(*a); };
}

}  // namespace

FRUGAL_COMMAND("bench", "Measure prompt processing (pp) and generation (tg) speed", setup);

}  // namespace frugal::cli
