// frugal meter: the energy counter read around another program (`frugal meter --device cuda --
// llama-bench ...`), so that two engines are measured by the same counter (NVML on cuda, RAPL on
// the CPU) over the same kind of interval. Prints one JSON object on stdout after the program
// ends; the program's own output passes through. The interval is the whole process: loading
// included.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "command.h"
#include "frugal/telemetry/energy.h"

namespace frugal::cli {
namespace {

struct MeterArgs {
  std::string device = "cuda";
  std::vector<std::string> argv;
};

int meter(const MeterArgs& a) {
  const std::string cmd = "meter";
  if (a.argv.empty()) return fail(cmd, "pass the program to measure after --: frugal meter -- PROGRAM ARGS...");
  if (a.device != "cpu" && a.device != "cuda") return fail(cmd, "--device must be cpu or cuda");
  auto m = telemetry::open_energy_meter(a.device);
  telemetry::IntervalMeter im(m.get());
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) return fail(cmd, "cannot fork");
  if (pid == 0) {
    std::vector<char*> args;
    for (const auto& s : a.argv) args.push_back(const_cast<char*>(s.c_str()));
    args.push_back(nullptr);
    // The program's stdout goes to stderr: stdout carries only the measurement.
    dup2(STDERR_FILENO, STDOUT_FILENO);
    execvp(args[0], args.data());
    std::fprintf(stderr, "frugal meter: cannot run %s\n", args[0]);
    _exit(127);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  const telemetry::EnergyDelta d = im.stop();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const bool measured = m->source() != telemetry::EnergySource::kUnavailable && d.issue == telemetry::CounterIssue::kNone;
  nlohmann::json j = {{"source", telemetry::energy_source_name(m->source())},
                      {"meter", m->describe()},
                      {"joules", measured ? nlohmann::json(d.joules) : nlohmann::json(nullptr)},
                      {"reliable", measured},
                      {"issue", telemetry::counter_issue_name(d.issue)},
                      {"seconds", s},
                      {"exit_code", WIFEXITED(st) ? WEXITSTATUS(st) : -1}};
  std::cout << j.dump() << "\n";
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

RunFn setup(CLI::App& app) {
  auto a = std::make_shared<MeterArgs>();
  app.add_option("--device", a->device, "which counter: cuda (NVML) or cpu (RAPL)")->capture_default_str();
  app.add_option("argv", a->argv, "the program and its arguments (after --)");
  return [a]() { return meter(*a); };
}

}  // namespace

FRUGAL_COMMAND("meter", "Measure the energy counter around another program (JSON on stdout)", setup);

}  // namespace frugal::cli
