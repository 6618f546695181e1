// What an engine (or a benchmark) owns to account for a request's phases: an energy meter, a
// hardware sampler and the cost model of the estimate, chosen by backend. PhaseRecord is what one
// phase of one request carries into the per-request record (engine/timings_json.h).
#pragma once

#include <memory>
#include <string>

#include "frugal/telemetry/energy.h"
#include "frugal/telemetry/estimate.h"
#include "frugal/telemetry/sampler.h"

namespace frugal::telemetry {

// One phase (prefill or decode) of one request.
struct PhaseRecord {
  PhaseEnergy energy;   // measured, or source "unavailable"
  Work work;            // bytes and FLOPs, for the estimate
  PhaseSamples hw;      // sampled hardware telemetry over the phase
  void merge(const PhaseRecord& o) {
    energy.merge(o.energy);
    work.merge(o.work);
  }
};

struct TelemetryOptions {
  std::string backend = "cpu";                      // "cpu": RAPL; "cuda": NVML
  std::string powercap_root = "/sys/class/powercap";
  std::string proc_root = "/proc";
  double sample_period_s = 0.05;                    // 0: no sampler thread
};

class Telemetry {
 public:
  // Never fails: what cannot be opened is reported as unavailable (meter().describe() says why).
  static std::unique_ptr<Telemetry> open(const TelemetryOptions& o);
  EnergyMeter& meter() { return *meter_; }
  HardwareSampler* sampler() { return sampler_.get(); }
  const CostModel& cost() const { return *cost_; }

 private:
  std::unique_ptr<EnergyMeter> meter_;
  std::unique_ptr<HardwareSampler> sampler_;
  const CostModel* cost_ = nullptr;
};

}  // namespace frugal::telemetry
