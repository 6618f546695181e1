// frugal bench: llama-bench's pp/tg semantics. ppN = one N-token prompt processed in batches of
// -b tokens from an empty cache; tgN = N single-token decode steps from an empty cache. Each test
// is preceded by a warm-up and repeated -r times; tokens/s as mean ± sample standard deviation.
// On the CPU the memory roofline is measured after the tests (a streaming read with the same
// threads), and every tg figure is also given as the fraction of it that the step's reads use:
// weight bytes per step (every matrix once; the embedding table only when it is also the output)
// plus the F16 KV rows attended, times steps/s, over the measured rate.
//
// Energy: each repetition's timed region is one interval of the backend's energy counter (NVML on
// cuda, RAPL on the CPU; "unavailable" where none can be read) and of the hardware sampler; a pp
// test is a prefill phase, a tg test a decode phase. --json gives every test its per-request
// record (engine/timings_json.h, summed over the repetitions) and J/token per repetition; --energy
// prints the J/token table, measured and, apart, the estimate. -d and --parallel take lists
// (1k = 1024): every test runs at every depth, and every tg test at every parallel count.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>

#include <nlohmann/json.hpp>

#include "frugal/attention/tilemix/int8_tile.h"
#include "frugal/engine/timings_json.h"
#include "frugal/engine/work.h"
#include "frugal/quant/type_traits.h"
#include "frugal/telemetry/telemetry.h"

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
  std::vector<std::string> parallel_list{"1"};
  std::vector<std::string> depth_list{"0"};
  bool fill_depth = false;
  bool greedy = false;
  bool energy = false;
  bool roofline = false;
  bool no_roofline = false;
  bool json = false;
};

struct TestResult {
  std::string name;
  int n_prompt = 0;
  int n_gen = 0;
  int n_parallel = 1;
  int depth = 0;
  std::vector<double> samples;  // tokens/s
  std::vector<double> joules_per_token;  // measured, per reliable repetition
  int unreliable = 0;                    // repetitions whose counter interval was unreliable
  Timings record;                        // summed over the repetitions
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
  bool greedy = false;      // tg: each step's greedy tokens feed the next (Model::forward_greedy)
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

struct Rep {
  double seconds = 0;
  double tokens = 0;
  telemetry::PhaseRecord phase;  // the timed region: prefill (pp) or decode (tg)
};

// Runs one repetition and returns its time, tokens and phase record; the cache starts empty. With n_par > 1 every decode
// step carries one token of each of n_par sequences (tokens/s counts all of them). With depth > 0
// each sequence first gets `depth` untimed context tokens, so pp/tg are measured at that depth.
Result<Rep> run_once(Model& model, Backend& be, int n_prompt, int n_gen, int n_batch, int n_par, int depth,
                     const CacheSpec& cs, std::mt19937& rng, telemetry::Telemetry* tel = nullptr) {
  const ModelWork mw = model_work(model, cs.dtype, cs.quant);
  Rep rep;
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
        if (from >= depth) rep.phase.work.merge(mw.chunk(i, end, 1.0));
      }
    }
    return ok_status();
  };
  if (!cs.fill_depth) FRUGAL_RETURN_IF_ERROR(prefill(0, depth));
  telemetry::EnergyMeter* meter = tel != nullptr ? &tel->meter() : nullptr;
  const bool metered = meter != nullptr && meter->source() != telemetry::EnergySource::kUnavailable;
  telemetry::HardwareSampler* hs = tel != nullptr ? tel->sampler() : nullptr;
  if (hs != nullptr) hs->set_busy(true);
  const double h0 = telemetry::steady_seconds();
  if (hs != nullptr) (void)hs->sample_now(h0);
  // The counter is read just outside the timed region: an NVML energy read can take
  // milliseconds, as long as a whole pp512 step on a GPU.
  telemetry::IntervalMeter im(metered ? meter : nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  FRUGAL_RETURN_IF_ERROR(prefill(depth, depth + n_prompt));
  std::vector<int32_t> next(static_cast<size_t>(n_par));
  for (int& t : next) t = tok(rng);
  for (int i = 0; i < n_gen; ++i) {
    b.clear();
    const int32_t p = depth + n_prompt + i;
    for (int s = 0; s < n_par; ++s) b.add(cs.greedy ? next[static_cast<size_t>(s)] : tok(rng), p, s, true);
    if (cs.greedy) {
      FRUGAL_RETURN_IF_ERROR(model.forward_greedy(b, kv, be, next.data()));
    } else {
      FRUGAL_RETURN_IF_ERROR(model.forward(b, kv, be, logits.data()));
    }
    for (int s = 0; s < n_par; ++s) rep.phase.work.merge(mw.chunk(p, p + 1, 1.0 / n_par));
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const telemetry::EnergyDelta d = metered ? im.stop() : telemetry::EnergyDelta{};
  rep.tokens = n_prompt + static_cast<double>(n_gen) * n_par;
  rep.phase.energy.source = meter != nullptr ? meter->source() : telemetry::EnergySource::kUnavailable;
  if (metered) rep.phase.energy.add(d, 1.0);
  if (hs != nullptr) {
    const double h1 = telemetry::steady_seconds();
    (void)hs->sample_now(h1);
    rep.phase.hw = hs->summarize(h0, h1);
    hs->set_busy(false);
  }
  return rep;
}

// "512", "1k" (1024), "64K": a non-negative token count.
Result<int> parse_count(const std::string& flag, const std::string& v) {
  std::string digits = v;
  int64_t mul = 1;
  if (!digits.empty() && (digits.back() == 'k' || digits.back() == 'K')) {
    mul = 1024;
    digits.pop_back();
  }
  int64_t n = 0;
  if (digits.empty() || digits.size() > 9) return error(ErrorCode::kInvalidArgument, "{}: '{}' is not a count", flag, v);
  for (char c : digits) {
    if (c < '0' || c > '9') return error(ErrorCode::kInvalidArgument, "{}: '{}' is not a count (e.g. 512, 4k)", flag, v);
    n = n * 10 + (c - '0');
  }
  n *= mul;
  if (n > (1 << 30)) return error(ErrorCode::kInvalidArgument, "{}: {} is too large", flag, v);
  return static_cast<int>(n);
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
  if (engine_opts.spec.method != speculative::Method::kNone) {
    return fail(cmd, std::string("--spec ") + speculative::method_name(engine_opts.spec.method) +
                         ": bench measures plain prefill and decode; speculative decoding is measured by "
                         "bench/speculative.py (frugal run and eval)");
  }
  if (engine_opts.spec.candidates != 1) {
    return fail(cmd, "--spec-candidates " + std::to_string(engine_opts.spec.candidates) +
                         ": bench measures plain prefill and decode; speculative decoding is measured by "
                         "bench/speculative.py (frugal run and eval)");
  }
  if (a.reps < 1) return fail(cmd, "-r must be at least 1");
  std::vector<int> depths, parallels;
  for (const std::string& v : a.depth_list) {
    auto n = parse_count("--depth", v);
    if (!n.ok()) return fail(cmd, n.status().message());
    depths.push_back(*n);
  }
  for (const std::string& v : a.parallel_list) {
    auto n = parse_count("--parallel", v);
    if (!n.ok()) return fail(cmd, n.status().message());
    if (*n < 1) return fail(cmd, "--parallel must be at least 1");
    parallels.push_back(*n);
  }
  if (depths.empty()) depths.push_back(0);
  if (parallels.empty()) parallels.push_back(1);
  auto path = resolve_model_path(a.model);
  if (!path.ok()) return fail(cmd, path.status().message());
  ModelLoadOptions mo;
  // Touching every page up front (the progress bar) would make the whole file resident; the
  // CUDA backend reads each tensor once for its upload and then gives its pages back.
  mo.progress = !a.json && a.engine.device == "cpu";
  mo.cpu_layouts = a.engine.device == "cpu";
  auto model = Model::load(*path, mo);
  if (!model.ok()) return fail(cmd, model.status().message());
  CpuBackendOptions bo;
  bo.n_threads = resolve_threads(a.engine.threads);
  auto made = make_backend(a.engine.device, bo.n_threads);
  if (!made.ok()) return fail(cmd, made.status().message());
  auto be = std::move(*made);
  if (Status st = be->set_prefill_sparse(engine_opts.prefill_sparse); !st.ok()) return fail(cmd, st.message());
  if (Status st = be->set_tilemix(engine_opts.tilemix); !st.ok()) return fail(cmd, st.message());
  std::mt19937 rng(1234);
  CacheSpec cs;
  cs.dtype = engine_opts.kv_dtype;
  cs.quant = engine_opts.kv_policy.quant;
  cs.n_batch = a.n_batch;
  cs.fill_depth = a.fill_depth;
  cs.greedy = a.greedy;
  if (cs.quant != KvQuant::kNone && a.engine.device != "cpu") {
    return fail(cmd, "--kv-quant: the quantized caches run on the CPU backend only");
  }
  telemetry::TelemetryOptions to;
  to.backend = be->name();
  // Without --energy no sampler thread polls the counters beside the timed steps.
  if (!a.energy) to.sample_period_s = 0;
  auto tel = telemetry::Telemetry::open(to);
  const telemetry::EnergyMeter& meter = tel->meter();

  std::vector<TestResult> tests;
  for (int d : depths) {
    for (int p : a.n_prompt) {
      if (p > 0) tests.push_back({"pp" + std::to_string(p), p, 0, 1, d});
    }
    for (int g : a.n_gen) {
      if (g <= 0) continue;
      for (int par : parallels) {
        tests.push_back({"tg" + std::to_string(g) + (par > 1 ? "x" + std::to_string(par) : ""), 0, g, par, d});
      }
    }
  }
  for (auto& t : tests) {
    if (t.depth > 0) t.name += "@d" + std::to_string(t.depth);
  }
  if (!a.json && a.energy) std::printf("energy meter: %s\n", meter.describe().c_str());
  for (auto& t : tests) {
    // Warm-up: touches the weights and grows every buffer once.
    // Two decode steps: the CUDA backend captures a step's graph the second time it runs.
    auto w = run_once(**model, *be, t.n_prompt > 0 ? std::min(t.n_prompt, a.n_batch) : 0, t.n_gen > 0 ? 2 : 0,
                      a.n_batch, t.n_parallel, 0, cs, rng);
    if (!w.ok()) return fail(cmd, w.status().message());
    Timings& rec = t.record;
    rec.cost = &tel->cost();
    rec.energy_meter = meter.describe();
    for (int r = 0; r < a.reps; ++r) {
      auto ts = run_once(**model, *be, t.n_prompt, t.n_gen, a.n_batch, t.n_parallel, t.depth, cs, rng, tel.get());
      if (!ts.ok()) return fail(cmd, ts.status().message());
      t.samples.push_back(ts->tokens / ts->seconds);
      const bool pp = t.n_prompt > 0;
      telemetry::PhaseRecord& phase = pp ? rec.prefill : rec.decode;
      if (r == 0) {
        phase.energy.source = ts->phase.energy.source;
        rec.prefill.energy.source = rec.decode.energy.source = ts->phase.energy.source;
      }
      phase.merge(ts->phase);
      phase.hw = ts->phase.hw;  // the last repetition's samples
      (pp ? rec.prefill_ms : rec.decode_ms) += ts->seconds * 1e3;
      (pp ? rec.prefill_tokens : rec.decode_tokens) += static_cast<int64_t>(ts->tokens);
      if (ts->phase.energy.reliable()) {
        t.joules_per_token.push_back(ts->phase.energy.joules / ts->tokens);
      } else if (ts->phase.energy.source != telemetry::EnergySource::kUnavailable) {
        ++t.unreliable;
      }
    }
    if (!a.json) {
      std::printf("%-40s %-24s %3d threads %4s %10s %10.2f ± %.2f tok/s\n", path->c_str(),
                  (*model)->describe_types().substr(0, 24).c_str(), bo.n_threads, be->name().c_str(), t.name.c_str(),
                  t.mean(), t.sd());
      std::fflush(stdout);
    }
  }
  // J/token: measured (mean ± sd over reliable repetitions) and, apart, the estimate.
  const auto stats = [](const std::vector<double>& v) {
    double m = 0, sd = 0;
    for (double x : v) m += x;
    m = v.empty() ? 0 : m / static_cast<double>(v.size());
    for (double x : v) sd += (x - m) * (x - m);
    sd = v.size() > 1 ? std::sqrt(sd / static_cast<double>(v.size() - 1)) : 0;
    return std::pair<double, double>(m, sd);
  };
  const auto estimate_per_token = [&](const TestResult& t) {
    const telemetry::PhaseRecord& ph = t.n_prompt > 0 ? t.record.prefill : t.record.decode;
    const int64_t n = t.n_prompt > 0 ? t.record.prefill_tokens : t.record.decode_tokens;
    return n > 0 ? telemetry::estimate_joules(ph.work, tel->cost()) / static_cast<double>(n) : 0.0;
  };
  if (!a.json && a.energy) {
    std::printf("%-16s %6s %8s %9s  %-30s %s\n", "test", "phase", "depth", "parallel", "measured J/token",
                ("estimate J/token (" + tel->cost().name + ", not a measurement)").c_str());
    for (const auto& t : tests) {
      std::string measured;
      if (!t.joules_per_token.empty()) {
        const auto [m, sd] = stats(t.joules_per_token);
        measured = fmt::format("{:.6g} ± {:.2g} ({}, n={})", m, sd, telemetry::energy_source_name(meter.source()),
                               t.joules_per_token.size());
      } else if (meter.source() == telemetry::EnergySource::kUnavailable) {
        measured = "unavailable";
      } else {
        measured = fmt::format("unreliable ({} of {} repetitions)", t.unreliable, a.reps);
      }
      std::printf("%-16s %6s %8d %9d  %-30s %.6g\n", t.name.c_str(), t.n_prompt > 0 ? "pp" : "tg", t.depth,
                  t.n_parallel, measured.c_str(), estimate_per_token(t));
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
    const int par = t.n_parallel;
    const double context = t.depth + (t.n_gen + 1) / 2.0;
    const double steps_per_s = t.mean() / par;
    const double bytes =
        step_read_bytes(**model, 0) + (step_read_bytes(**model, context, cs.quant) - step_read_bytes(**model, 0)) * par;
    return bytes * steps_per_s / bandwidth;
  };
  if (!a.json && bandwidth > 0) {
    std::printf("memory read bandwidth: %.2f GB/s (%d threads); SIMD target %s; weight bytes per token: %.1f MiB "
                "(%.1f MiB repacked in place at load)\n",
                bandwidth / 1e9, bw_threads, simd_target_name(), step_read_bytes(**model, 0) / (1024.0 * 1024.0),
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
    j["greedy"] = a.greedy;  // tg steps fed their own greedy tokens (no logits copied)
    j["tests"] = nlohmann::json::array();
    for (const auto& t : tests) {
      j["tests"].push_back({{"name", t.name}, {"n_prompt", t.n_prompt}, {"n_gen", t.n_gen}, {"kv_quant", std::string(kv_quant_name(cs.quant))},
                            {"n_parallel", t.n_parallel}, {"depth", t.depth},
                            {"avg_ts", t.mean()}, {"stddev_ts", t.sd()}, {"samples_ts", t.samples}});
      auto& jt = j["tests"].back();
      if (bandwidth > 0 && t.n_gen > 0) jt["roofline_fraction"] = roofline_fraction(t);
      // What the plan command reads as a hardware profile: J/token measured per repetition (none
      // when unavailable or unreliable) and, apart, the estimate.
      jt["phase"] = t.n_prompt > 0 ? "prefill" : "decode";
      const auto [jm, jsd] = stats(t.joules_per_token);
      jt["energy"] = {{"source", telemetry::energy_source_name(meter.source())},
                      {"joules_per_token_mean", t.joules_per_token.empty() ? nlohmann::json(nullptr) : nlohmann::json(jm)},
                      {"joules_per_token_sd", t.joules_per_token.empty() ? nlohmann::json(nullptr) : nlohmann::json(jsd)},
                      {"samples_joules_per_token", t.joules_per_token},
                      {"reliable_reps", t.joules_per_token.size()},
                      {"unreliable_reps", t.unreliable}};
      jt["estimate"] = {{"model", tel->cost().name}, {"joules_per_token", estimate_per_token(t)}};
      jt["record"] = timings_json<nlohmann::json>(local_request_timings(t.record));
    }
    j["energy_meter"] = meter.describe();
    j["peak_rss_bytes"] = peak_rss;
    j["weight_bytes_per_token"] = step_read_bytes(**model, 0);
    if (bandwidth > 0) {
      j["cpu"] = {{"read_bytes_per_s", bandwidth}, {"threads", bw_threads}, {"simd_target", simd_target_name()}};
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
  if (engine_opts.prefill_sparse.method != sparse::Method::kNone) {
    // Summed over every repetition and test (warm-up included); a fraction, so the sum is fair.
    const sparse::PrefillSparseStats ps = be->prefill_sparse_stats();
    std::cerr << fmt::format(
        "prefill-sparse {}: {} sparse (layer, chunk) calls, {} dense fallbacks, {} of {} blocks computed ({:.1f}%), "
        "block selection {:.1f} ms\n",
        sparse::method_name(engine_opts.prefill_sparse.method), ps.sparse_calls, ps.dense_calls, ps.blocks_kept,
        ps.blocks_causal, 100.0 * ps.kept_fraction(), ps.select_ms);
    if (ps.heads_vertical_slash + ps.heads_query_aware > 0) {
      std::cerr << fmt::format(
          "prefill-sparse {}: query heads routed {} vertical-slash, {} query-aware; routing {:.1f} ms (summed over "
          "threads)\n",
          sparse::method_name(engine_opts.prefill_sparse.method), ps.heads_vertical_slash, ps.heads_query_aware,
          ps.route_ms);
    }
  }
  if (engine_opts.tilemix.enabled()) {
    const tilemix::TileMixStats ts = be->tilemix_stats();
    std::cerr << fmt::format(
        "tilemix {}: {} routed (layer, chunk) calls, {} float fallbacks, {} of {} tiles INT8 ({:.1f}%), routing "
        "{:.1f} ms, int8 dot: {}\n",
        engine_opts.tilemix.int8_fraction, ts.routed_calls, ts.float_calls, ts.tiles_int8, ts.tiles_total,
        100.0 * ts.int8_share(), ts.route_ms, tilemix::int8_dot_path());
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
  app.add_option("--parallel", a->parallel_list,
                 "sequences decoded together in tg tests (one token each per step); a list: 1,8,64")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("-d,--depth", a->depth_list,
                 "context tokens already in the cache before each timed test (untimed); a list: 1k,4k,16k")
      ->delimiter(',')
      ->capture_default_str();
  app.add_flag("--greedy", a->greedy,
               "tg: generate greedily (each step's tokens are the argmax of the last, picked on the device for "
               "cuda, so only token ids leave it) instead of feeding random tokens and copying every logit row");
  app.add_flag("--fill-depth", a->fill_depth,
               "write the -d context as random K/V rows instead of running the model over it (fast)");
  add_engine_flags(app, a->engine);
  app.add_flag("--roofline", a->roofline, "cuda, --json: also measure copy bandwidth and BF16 GEMM peak");
  app.add_flag("--no-roofline", a->no_roofline, "cpu: skip the memory bandwidth measurement after the tests");
  app.add_flag("--energy", a->energy,
               "print J/token per test: measured (NVML on cuda, RAPL on the CPU, or 'unavailable') and, apart, "
               "the estimate");
  app.add_flag("--json", a->json, "print results as JSON");
  return [a]() { return bench(*a); };
}

}  // namespace

FRUGAL_COMMAND("bench", "Measure prompt processing (pp) and generation (tg) speed", setup);

}  // namespace frugal::cli
