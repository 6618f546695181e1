// frugal: the command-line front end. Subcommands live one per file (cmd_*.cc).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <string>

#include <strings.h>

#include "command.h"
#include "frugal/quant/simd_targets.h"

namespace frugal::cli {

std::vector<CommandInfo>& command_registry() {
  static std::vector<CommandInfo> registry;
  return registry;
}

int fail(const std::string& command, const std::string& message) {
  std::fprintf(stderr, "frugal %s: %s\n", command.c_str(), message.c_str());
  return 1;
}

// FRUGAL_SIMD=NAME runs every SIMD kernel on that Highway target (e.g. AVX2 on an AVX-512
// machine), so one machine can measure what a smaller CPU of its family would do. The name must be
// one this CPU runs; anything else is refused with the list of the ones it does.
bool apply_simd_override() {
  const char* want = std::getenv("FRUGAL_SIMD");
  if (want == nullptr || *want == 0) return true;
  std::string names;
  for (int64_t t : frugal::quant::available_simd_targets()) {
    const std::string label = frugal::quant::simd_target_label(t);
    if (strcasecmp(label.c_str(), want) == 0) {
      frugal::quant::force_simd_target(t);
      return true;
    }
    names += (names.empty() ? "" : ", ") + label;
  }
  std::fprintf(stderr, "frugal: FRUGAL_SIMD=%s is not a SIMD target this CPU runs (it runs: %s)\n", want,
               names.c_str());
  return false;
}

}  // namespace frugal::cli

int main(int argc, char** argv) {
  using namespace frugal::cli;
  if (!apply_simd_override()) return 2;
  CLI::App app{"frugal: LLM inference where every resource is a budget you set"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "frugal 0.1.0");
  std::map<CLI::App*, RunFn> runs;
  for (const auto& c : command_registry()) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    runs[sub] = c.setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (auto& [sub, run] : runs) {
    if (sub->parsed()) {
      try {
        return run();
      } catch (const std::exception& e) {
        return fail(sub->get_name(), std::string("internal error: ") + e.what());
      }
    }
  }
  return 1;
}
