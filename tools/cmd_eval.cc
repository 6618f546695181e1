// frugal eval: run the task suite against an engine configuration (and a sweep of them), with
// exact-match accuracy and 95% intervals, KL / top-1 agreement against a reference configuration,
// speed and memory. Table on stdout, every per-example result in --out JSON, a plot for --sweep.
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "command.h"
#include "common.h"
#include "device.h"
#include "engine_options.h"
#include "frugal/eval/harness.h"

namespace frugal::cli {
namespace {

struct EvalArgs {
  EngineFlags engine;                 // the configuration under test
  std::string model;
  std::vector<std::string> tasks;
  std::vector<int64_t> lengths = eval::EvalSuite{}.lengths;
  int n = 200;
  uint64_t seed = 0;
  std::string split = "test";
  int kl_examples = 20;
  std::vector<std::string> set;       // NAME=VALUE for the configuration under test
  std::vector<std::string> ref;       // NAME=VALUE for the reference configuration
  bool no_ref = false;
  std::string sweep;                  // NAME=v1,v2,...
  std::string out_json;
  std::string plot;
  bool quiet = false;
};

std::vector<std::string> split_list(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

Status apply_settings(GenerateOptions& g, const std::vector<std::string>& settings) {
  for (const auto& kv : settings) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) return error(ErrorCode::kInvalidArgument, "'{}' is not NAME=VALUE", kv);
    FRUGAL_RETURN_IF_ERROR(set_generate_option(g, kv.substr(0, eq), kv.substr(eq + 1)));
  }
  return ok_status();
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  return static_cast<bool>(out);
}

int eval_cmd(const EvalArgs& a) {
  const std::string cmd = "eval";
  auto path = resolve_model_path(a.model);
  if (!path.ok()) return fail(cmd, path.status().message());
  auto split = eval::parse_split(a.split);
  if (!split.ok()) return fail(cmd, split.status().message());
  // Greedy decoding and an F16 cache unless told otherwise; the reference keeps full precision.
  GenerateOptions base;
  base.sampling.temperature = 0;
  eval::EvalConfig config{"", base};
  if (Status st = apply_settings(config.gen, a.set); !st.ok()) return fail(cmd, st.message());
  // Engine flags are shorthands for --set, applied after it.
  if (Status st = apply_engine_flags(a.engine, config.gen); !st.ok()) return fail(cmd, st.message());
  std::vector<std::string> settings = a.set;
  for (const std::string& s : given_engine_settings(a.engine)) settings.push_back(s);
  eval::EvalConfig reference{"reference", base};
  reference.gen.kv_dtype = DType::kF32;
  if (Status st = apply_settings(reference.gen, a.ref); !st.ok()) return fail(cmd, "--ref: " + st.message());

  std::string sweep_name;
  std::vector<std::string> sweep_values;
  if (!a.sweep.empty()) {
    const size_t eq = a.sweep.find('=');
    if (eq == std::string::npos) return fail(cmd, "--sweep must be NAME=v1,v2,...");
    sweep_name = a.sweep.substr(0, eq);
    sweep_values = split_list(a.sweep.substr(eq + 1), ',');
    if (sweep_values.empty()) return fail(cmd, "--sweep " + sweep_name + " has no values");
    for (const auto& v : sweep_values) {  // fail before any work is done
      GenerateOptions probe = config.gen;
      if (Status st = set_generate_option(probe, sweep_name, v); !st.ok()) return fail(cmd, "--sweep: " + st.message());
    }
  }
  auto lm = load_model(*path, !a.quiet && a.engine.device == "cpu", a.engine.device);
  if (!lm.ok()) return fail(cmd, lm.status().message());
  CpuBackendOptions bo;
  bo.n_threads = resolve_threads(a.engine.threads);
  auto made = make_backend(a.engine.device, bo.n_threads);
  if (!made.ok()) return fail(cmd, made.status().message());
  auto backend = std::move(*made);

  eval::EvalSuite suite;
  suite.families = a.tasks;
  suite.lengths = a.lengths;
  suite.n = a.n;
  suite.seed = a.seed;
  suite.split = *split;
  suite.kl_examples = a.no_ref ? 0 : a.kl_examples;

  std::vector<eval::EvalConfig> configs;
  if (sweep_values.empty()) {
    config.label = settings.empty() ? "default" : fmt::format("{}", fmt::join(settings, " "));
    configs.push_back(config);
  } else {
    for (const auto& v : sweep_values) {
      eval::EvalConfig c = config;
      (void)set_generate_option(c.gen, sweep_name, v);  // checked above
      c.label = sweep_name + "=" + v;
      configs.push_back(c);
    }
  }
  // Draft models of the configurations that name one, loaded once per path.
  std::map<std::string, std::unique_ptr<Model>> drafts;
  for (auto& c : configs) {
    if (c.gen.spec.method != speculative::Method::kDraft) continue;
    auto& held = drafts[c.gen.spec.draft_path];
    if (!held) {
      auto d = load_draft_model(c.gen);
      if (!d.ok()) return fail(cmd, d.status().message());
      held = std::move(d).value();
    }
    c.gen.spec.draft_model = held.get();
  }
  std::vector<eval::EvalReport> reports;
  for (const auto& c : configs) {
    eval::EvalProgress progress;
    if (!a.quiet) {
      progress = [&c](const std::string& cell, int done, int total) {
        std::fprintf(stderr, "\r%s: %s %d/%d   ", c.label.c_str(), cell.c_str(), done, total);
        if (done == total) std::fprintf(stderr, "\n");
      };
    }
    auto rep = eval::run_eval(*lm->model, *lm->tokenizer, *backend, suite, c, a.no_ref ? nullptr : &reference, progress);
    if (!rep.ok()) return fail(cmd, rep.status().message());
    reports.push_back(std::move(rep).value());
  }
  std::fputs(eval::report_table(reports).c_str(), stdout);
  for (const auto& r : reports) {
    std::printf("\n%s: %.1f s, peak RSS %.1f MiB, peak KV %.2f MiB (%s)\n", r.label.c_str(), r.seconds,
                r.peak_rss_bytes / 1048576.0, r.peak_kv_bytes / 1048576.0, r.config.c_str());
  }
  if (!a.out_json.empty() && !write_file(a.out_json, eval::report_json(reports))) {
    return fail(cmd, "cannot write " + a.out_json);
  }
  if (!sweep_values.empty()) {
    const std::string plot = a.plot.empty() ? "eval-sweep-" + sweep_name + ".svg" : a.plot;
    if (!write_file(plot, eval::sweep_svg(sweep_name, sweep_values, reports))) return fail(cmd, "cannot write " + plot);
    std::fprintf(stderr, "plot written to %s\n", plot.c_str());
  }
  return 0;
}

RunFn setup(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  app.add_option("-m,--model", a->model, "GGUF model file (default: the shipped default model)");
  app.add_option("--tasks", a->tasks, "task families (default: all)")->delimiter(',');
  app.add_option("--lengths", a->lengths, "target lengths in tokens")->delimiter(',')->capture_default_str();
  app.add_option("-n", a->n, "examples per task and length")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--seed", a->seed, "first example seed")->capture_default_str();
  app.add_option("--split", a->split, "train or test")->capture_default_str();
  add_engine_flags(app, a->engine, {{"--device", "cpu or cuda (the model and the reference both run there)"}});
  app.add_option("--set", a->set, "engine option NAME=VALUE for the configuration under test (repeatable)");
  app.add_option("--ref", a->ref, "engine option NAME=VALUE for the reference configuration (default kv-type=f32)");
  app.add_flag("--no-ref", a->no_ref, "skip the teacher-forced comparison with the reference");
  app.add_option("--kl-examples", a->kl_examples, "teacher-forced comparisons per task and length")->capture_default_str();
  app.add_option("--sweep", a->sweep, "NAME=v1,v2,...: evaluate each value and plot accuracy against it");
  app.add_option("--out", a->out_json, "write every per-example result as JSON");
  app.add_option("--plot", a->plot, "SVG file for --sweep (default eval-sweep-NAME.svg)");
  app.add_flag("-q,--quiet", a->quiet, "no progress on stderr");
  app.footer("The --kv-* flags set the configuration under test, as --set does (the reference: --ref).\n"
             "Engine options for --set/--ref/--sweep: " + fmt::format("{}", fmt::join(generate_option_names(), ", ")));
  return [a]() { return eval_cmd(*a); };
}

}  // namespace

FRUGAL_COMMAND("eval", "Evaluate accuracy, divergence, speed and memory on the task suite", setup);

}  // namespace frugal::cli
