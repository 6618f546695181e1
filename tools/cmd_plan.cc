// frugal plan: what-if planning of energy, carbon, water, latency and utilisation for a request
// trace served at candidate sites (telemetry/plan.h has the model and the file formats).
#include <cstdio>
#include <fstream>
#include <iostream>

#include "command.h"
#include "frugal/telemetry/plan.h"

namespace frugal::cli {
namespace {

struct PlanArgs {
  std::string trace;
  std::vector<std::string> profiles;  // NAME=FILE
  std::string sites;
  std::vector<std::string> policies{"latency-first", "carbon-aware"};
  double slo_ms = 0;
  std::string out_json;
  std::string plot;
  bool json = false;
};

int plan(const PlanArgs& a) {
  const std::string cmd = "plan";
  namespace p = telemetry::plan;
  if (a.trace.empty() || a.sites.empty() || a.profiles.empty()) {
    return fail(cmd, "pass --trace FILE.jsonl, --sites FILE.csv and at least one --profile NAME=BENCH.json");
  }
  if (a.slo_ms < 0) return fail(cmd, "--slo-ms must not be negative");
  std::vector<p::HardwareProfile> profiles;
  for (const std::string& spec : a.profiles) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      return fail(cmd, "--profile '" + spec + "': expected NAME=FILE (FILE a `frugal bench --json` output)");
    }
    auto prof = p::read_profile(spec.substr(0, eq), spec.substr(eq + 1));
    if (!prof.ok()) return fail(cmd, prof.status().message());
    profiles.push_back(std::move(*prof));
  }
  auto trace = p::read_trace(a.trace);
  if (!trace.ok()) return fail(cmd, trace.status().message());
  auto sites = p::read_sites(a.sites);
  if (!sites.ok()) return fail(cmd, sites.status().message());
  std::vector<p::ScenarioResult> results;
  for (const std::string& name : a.policies) {
    auto pol = p::policy_from_name(name);
    if (!pol.ok()) return fail(cmd, "--policy: " + pol.status().message());
    p::PlanOptions o;
    o.policy = *pol;
    o.slo_ms = a.slo_ms;
    auto r = p::simulate(*trace, profiles, *sites, o);
    if (!r.ok()) return fail(cmd, r.status().message());
    results.push_back(std::move(*r));
  }
  const auto write = [&](const std::string& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary);
    f << text;
    return static_cast<bool>(f);
  };
  if (!a.out_json.empty() && !write(a.out_json, p::report_json(results))) return fail(cmd, "cannot write " + a.out_json);
  if (!a.plot.empty() && !write(a.plot, p::report_svg(results))) return fail(cmd, "cannot write " + a.plot);
  if (a.json) {
    std::cout << p::report_json(results) << "\n";
    return 0;
  }
  std::printf("%zu requests over %zu sites; profiles:", trace->size(), sites->size());
  for (const auto& pr : profiles) std::printf(" %s (%s)", pr.name.c_str(), pr.file.c_str());
  std::printf("\n%s", p::report_table(results).c_str());
  return 0;
}

RunFn setup(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  app.add_option("--trace", a->trace, "request log (JSONL) as `frugal serve --log-requests` writes it");
  app.add_option("--profile", a->profiles, "NAME=FILE: a hardware profile, `frugal bench --json` output (repeatable)");
  app.add_option("--sites", a->sites,
                 "candidate sites, CSV: name,profile,servers,batch,pue,wue_l_per_kwh,renewable_share,rtt_ms,carbon_csv");
  app.add_option("--policy", a->policies, "routing policies to compare: latency-first, carbon-aware")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--slo-ms", a->slo_ms, "carbon-aware: the latency a request may not exceed (0: no limit)")
      ->capture_default_str();
  app.add_option("--out", a->out_json, "write the report as JSON");
  app.add_option("--plot", a->plot, "write an SVG of carbon, energy, water and p95 latency per scenario");
  app.add_flag("--json", a->json, "print the report as JSON instead of tables");
  return [a]() { return plan(*a); };
}

}  // namespace

FRUGAL_COMMAND("plan", "What-if energy, carbon, water and latency of a request trace at candidate sites", setup);

}  // namespace frugal::cli
