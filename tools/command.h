// Each `frugal` subcommand is one file that registers itself here: it declares its options on a
// CLI11 sub-app and returns the function that runs it (exit code 0 on success).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace frugal::cli {

using RunFn = std::function<int()>;
using SetupFn = RunFn (*)(CLI::App& sub);

struct CommandInfo {
  const char* name;
  const char* help;
  SetupFn setup;
};

std::vector<CommandInfo>& command_registry();

struct RegisterCommand {
  RegisterCommand(const char* name, const char* help, SetupFn setup) {
    command_registry().push_back({name, help, setup});
  }
};

// Prints "frugal <cmd>: <message>" on stderr and returns exit code 1.
int fail(const std::string& command, const std::string& message);

}  // namespace frugal::cli

#define FRUGAL_COMMAND(name, help, setup_fn) \
  static ::frugal::cli::RegisterCommand frugal_command_##setup_fn(name, help, setup_fn)
