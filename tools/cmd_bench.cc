// frugal bench: llama-bench's pp/tg semantics. ppN = one N-token prompt processed in batches of
// -b tokens from an empty cache; tgN = N single-token decode steps from an empty cache. Each test
// is preceded by a warm-up and repeated -r times; tokens/s as mean ± sample standard deviation.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>

#include <nlohmann/json.hpp>

#include "command.h"
#include "common.h"
#include "device.h"

namespace frugal::cli {
namespace {

struct BenchArgs {
  std::string model;
  std::vector<int> n_prompt{512};
  std::vector<int> n_gen{128};
  int threads = 0;
  int reps = 5;
  int n_batch = 512;
  int n_parallel = 1;
  int depth = 0;
  std::string device = "cpu";
  bool roofline = false;
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

// Runs one repetition and returns tokens/s; the cache starts empty. With n_par > 1 every decode
// step carries one token of each of n_par sequences (tokens/s counts all of them). With depth > 0
// each sequence first gets `depth` untimed context tokens, so pp/tg are measured at that depth.
Result<double> run_once(Model& model, Backend& be, int n_prompt, int n_gen, int n_batch, int n_par, int depth,
                        std::mt19937& rng) {
  const int64_t n_vocab = model.config().n_vocab;
  FRUGAL_ASSIGN_OR_RETURN(KvCache kv, KvCache::create(model.kv_options(n_par, depth + n_prompt + n_gen + 1)));
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
  FRUGAL_RETURN_IF_ERROR(prefill(0, depth));
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

int bench(const BenchArgs& a) {
  const std::string cmd = "bench";
  if (a.reps < 1) return fail(cmd, "-r must be at least 1");
  auto path = resolve_model_path(a.model);
  if (!path.ok()) return fail(cmd, path.status().message());
  ModelLoadOptions mo;
  // Touching every page up front (the progress bar) would make the whole file resident; the
  // CUDA backend reads each tensor once for its upload and then gives its pages back.
  mo.progress = !a.json && a.device == "cpu";
  mo.cpu_layouts = a.device == "cpu";
  auto model = Model::load(*path, mo);
  if (!model.ok()) return fail(cmd, model.status().message());
  if (a.n_parallel < 1) return fail(cmd, "--parallel must be at least 1");
  if (a.depth < 0) return fail(cmd, "--depth must not be negative");
  CpuBackendOptions bo;
  bo.n_threads = resolve_threads(a.threads);
  auto made = make_backend(a.device, bo.n_threads);
  if (!made.ok()) return fail(cmd, made.status().message());
  auto be = std::move(*made);
  std::mt19937 rng(1234);

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
                      a.n_batch, par, 0, rng);
    if (!w.ok()) return fail(cmd, w.status().message());
    for (int r = 0; r < a.reps; ++r) {
      auto ts = run_once(**model, *be, t.n_prompt, t.n_gen, a.n_batch, par, a.depth, rng);
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
  if (a.json) {
    nlohmann::json j;
    j["model"] = *path;
    j["arch"] = (*model)->config().arch;
    j["types"] = (*model)->describe_types();
    j["model_bytes"] = (*model)->weights().bytes;
    j["threads"] = bo.n_threads;
    j["backend"] = be->name();
    j["tests"] = nlohmann::json::array();
    for (const auto& t : tests) {
      j["tests"].push_back({{"name", t.name}, {"n_prompt", t.n_prompt}, {"n_gen", t.n_gen},
                            {"n_parallel", t.n_gen > 0 ? a.n_parallel : 1}, {"depth", a.depth},
                            {"avg_ts", t.mean()}, {"stddev_ts", t.sd()}, {"samples_ts", t.samples}});
    }
    j["peak_rss_bytes"] = peak_rss_bytes();
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
  app.add_option("-t,--threads", a->threads, "CPU threads (0: all cores)")->capture_default_str();
  app.add_option("-r,--repetitions", a->reps, "repetitions per test")->capture_default_str();
  app.add_option("-b,--batch-size", a->n_batch, "prompt tokens per forward pass")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--parallel", a->n_parallel, "sequences decoded together in tg tests (one token each per step)")
      ->capture_default_str();
  app.add_option("-d,--depth", a->depth, "context tokens already in the cache before each timed test (untimed)")
      ->capture_default_str();
  app.add_option("--device", a->device, "cpu or cuda")->capture_default_str();
  app.add_flag("--roofline", a->roofline, "cuda, --json: also measure copy bandwidth and BF16 GEMM peak");
  app.add_flag("--json", a->json, "print results as JSON");
  return [a]() { return bench(*a); };
}

}  // namespace

FRUGAL_COMMAND("bench", "Measure prompt processing (pp) and generation (tg) speed", setup);

}  // namespace frugal::cli
