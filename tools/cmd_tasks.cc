// frugal tasks: print synthetic task examples (src/frugal/eval) as JSONL, one per line, for
// inspection, for evaluation harnesses and for the trainer.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "frugal/eval/jsonl.h"
#include "frugal/eval/task.h"

namespace frugal::cli {
namespace {

struct TasksArgs {
  std::string family;
  uint64_t seed = 0;
  uint64_t n = 1;
  int64_t length = 1024;
  std::string split = "train";
  double depth = -1;
  std::vector<std::string> params;
  bool list = false;
};

int list_families() {
  for (const auto& name : eval::task_family_names()) {
    const eval::TaskGenerator* g = eval::find_task_family(name);
    std::printf("%-12s %s%s\n", name.c_str(), std::string(g->description()).c_str(),
                g->supports_depth() ? " [--depth]" : "");
    for (const auto& p : g->params()) {
      std::printf("  --param %s=N  (%lld..%lld) %s\n", p.name, static_cast<long long>(p.min),
                  static_cast<long long>(p.max), p.help);
    }
  }
  return 0;
}

int tasks(const TasksArgs& a) {
  const std::string cmd = "tasks";
  if (a.list) return list_families();
  if (a.family.empty()) return fail(cmd, "--family is required (see --list)");
  auto split = eval::parse_split(a.split);
  if (!split.ok()) return fail(cmd, split.status().message());
  eval::TaskOptions opts;
  opts.length = a.length;
  if (a.depth >= 0) opts.depth = a.depth;
  for (const auto& p : a.params) {
    const auto eq = p.find('=');
    if (eq == std::string::npos || eq == 0) return fail(cmd, "--param wants NAME=VALUE, got '" + p + "'");
    try {
      size_t used = 0;
      const long long v = std::stoll(p.substr(eq + 1), &used);
      if (used != p.size() - eq - 1) throw std::invalid_argument(p);
      opts.params.emplace_back(p.substr(0, eq), v);
    } catch (const std::exception&) {
      return fail(cmd, "--param " + p + ": the value is not an integer");
    }
  }
  if (a.seed > eval::kMaxUserSeed || a.n > eval::kMaxUserSeed - a.seed + 1) {
    return fail(cmd, "seeds must stay below 2^63");
  }
  for (uint64_t i = 0; i < a.n; ++i) {
    auto ex = eval::generate_task(a.family, *split, a.seed + i, opts);
    if (!ex.ok()) return fail(cmd, ex.status().message());
    std::printf("%s\n", eval::example_to_json(*ex).c_str());
  }
  return std::fflush(stdout) == 0 ? 0 : fail(cmd, "cannot write to stdout");
}

RunFn setup(CLI::App& app) {
  auto a = std::make_shared<TasksArgs>();
  app.add_option("--family", a->family, "task family (see --list)");
  app.add_option("--seed", a->seed, "first seed (examples use seed, seed+1, ...)");
  app.add_option("--n", a->n, "number of examples")->check(CLI::Range(uint64_t{0}, uint64_t{1} << 40));
  app.add_option("--length", a->length, "target length in tokens (BOS + prompt + answer)");
  app.add_option("--split", a->split, "train or test: disjoint example sets");
  app.add_option("--depth", a->depth, "needle position 0..1 (passkey, arithmetic)");
  app.add_option("--param", a->params, "family knob NAME=VALUE (repeatable)");
  app.add_flag("--list", a->list, "list the families and their knobs");
  return [a]() { return tasks(*a); };
}

}  // namespace

FRUGAL_COMMAND("tasks", "Print synthetic task examples as JSONL", setup);

}  // namespace frugal::cli
