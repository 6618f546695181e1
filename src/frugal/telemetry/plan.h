// `frugal plan`: trace-driven what-if planning of where and on what to serve (after InFactPlanner).
// Inputs are files frugal writes or a person can check line by line:
//   trace     a request log (`frugal serve --log-requests`, JSONL): arrival = "time" (when the
//             request finished) - timings.total_ms; "prompt_tokens", "generated_tokens".
//   profiles  `frugal bench --json` output: tests with "phase" (prefill | decode), "n_parallel",
//             "depth", "avg_ts" (tokens/s over all sequences) and energy.joules_per_token_mean
//             (measured; a test without it cannot price a phase). Optional top-level
//             "idle_watts" (the server's draw with nothing running), "source" (provenance) and
//             "prefill_in_decode": true for a profile made from a throughput that already includes
//             the prompts' processing (MLPerf's tokens/s): it has no prefill test, and prompt
//             tokens then cost no extra time or energy.
//   sites     CSV: name,profile,servers,batch,pue,wue_l_per_kwh,renewable_share,rtt_ms,carbon_csv;
//             '#' lines are comments (sources). carbon_csv (relative to the sites file) is
//             hour,g_co2_per_kwh rows, hours from the trace's first arrival, each value holding
//             until the next row.
//
// The model, kept simple enough to check by hand:
//   - a site has servers x batch slots; a request takes the slot that frees first (FIFO) and
//     holds it for prefill (prompt / pp tok/s) plus decode (output / (tg tok/s / batch), the tg
//     test at the site's batch and the depth nearest to prompt + output / 2);
//     latency = rtt + wait + service;
//   - IT energy = prompt x J/token(prefill) + output x J/token(decode) + idle_watts x the time
//     each server has no request; facility energy = IT x PUE;
//   - carbon = facility energy x (1 - renewable_share) x the grid's intensity when it is drawn
//     (a request's at its start; idle energy integrated over the series);
//   - water = IT energy x WUE (The Green Grid's WUE is litres per IT kWh); utilisation = busy
//     slot-seconds / (slots x horizon), the horizon running from the first arrival to the last
//     finish anywhere.
//   - routing: latency-first sends a request where it would finish first; carbon-aware sends it
//     where its carbon is lowest among the sites that meet the latency SLO (else latency-first).
#pragma once

#include <string>
#include <vector>

#include "frugal/core/status.h"

namespace frugal::telemetry::plan {

struct TraceRequest {
  std::string id;
  double arrival_s = 0;   // from the first arrival
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
};
Result<std::vector<TraceRequest>> read_trace(const std::string& path);

struct OperatingPoint {
  int depth = 0;
  int parallel = 1;
  double tok_s = 0;        // all sequences together
  double j_per_token = 0;  // measured
};

struct HardwareProfile {
  std::string name;
  std::string file;
  std::string source;       // provenance, from the file
  std::vector<OperatingPoint> prefill, decode;
  double idle_watts = 0;
  bool prefill_in_decode = false;
};
Result<HardwareProfile> read_profile(const std::string& name, const std::string& path);

struct CarbonSeries {
  std::vector<double> start_s;   // ascending; the first is 0
  std::vector<double> g_per_kwh;
  double at(double t) const;
  // Integral of the intensity over [t0, t1], in g/kWh x seconds.
  double integral(double t0, double t1) const;
};
Result<CarbonSeries> read_carbon(const std::string& path);

struct Site {
  std::string name, profile;
  int servers = 1, batch = 1;
  double pue = 1, wue_l_per_kwh = 0, renewable_share = 0, rtt_ms = 0;
  CarbonSeries carbon;
};
Result<std::vector<Site>> read_sites(const std::string& path);

enum class Policy { kLatencyFirst, kCarbonAware };
Result<Policy> policy_from_name(const std::string& name);  // "latency-first", "carbon-aware"
const char* policy_name(Policy p);

struct PlanOptions {
  Policy policy = Policy::kLatencyFirst;
  double slo_ms = 0;  // carbon-aware: latency limit; 0: none
};

struct SiteResult {
  std::string name;
  int64_t requests = 0;
  double it_joules = 0, idle_joules = 0, facility_joules = 0;
  double carbon_g = 0, water_l = 0;
  double busy_slot_s = 0, utilization = 0;
  double mean_facility_w = 0;
};

struct ScenarioResult {
  std::string policy;
  double horizon_s = 0;
  std::vector<SiteResult> sites;
  SiteResult total;  // name "total"
  double latency_mean_s = 0, latency_p50_s = 0, latency_p95_s = 0, latency_max_s = 0;
  int64_t slo_misses = 0;
  std::vector<int> site_of;        // per request
  std::vector<double> latency_s;   // per request
};

// kInvalidArgument when a site names a profile that is not given or that lacks an operating
// point the site needs (the message says which bench to run).
Result<ScenarioResult> simulate(const std::vector<TraceRequest>& trace, const std::vector<HardwareProfile>& profiles,
                                const std::vector<Site>& sites, const PlanOptions& o);

std::string report_table(const std::vector<ScenarioResult>& results);
std::string report_json(const std::vector<ScenarioResult>& results);
std::string report_svg(const std::vector<ScenarioResult>& results);

}  // namespace frugal::telemetry::plan
