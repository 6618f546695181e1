// frugal: the command-line front end. Subcommands live one per file (cmd_*.cc).
#include <cstdio>
#include <exception>
#include <map>

#include "command.h"

namespace frugal::cli {

std::vector<CommandInfo>& command_registry() {
  static std::vector<CommandInfo> registry;
  return registry;
}

int fail(const std::string& command, const std::string& message) {
  std::fprintf(stderr, "frugal %s: %s\n", command.c_str(), message.c_str());
  return 1;
}

}  // namespace frugal::cli

int main(int argc, char** argv) {
  using namespace frugal::cli;
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
