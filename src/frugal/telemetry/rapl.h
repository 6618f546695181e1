// RAPL energy counters through the Linux powercap sysfs tree (intel_rapl; AMD's RAPL shows up there
// too): each zone `intel-rapl:N` (a CPU package, or "psys" on client parts) has energy_uj, a
// cumulative microjoule counter that wraps at max_energy_range_uj, and may have sub-zones
// `intel-rapl:N:M` (core, uncore, dram). Packages exclude DRAM, so the meter sums the package
// zones and the dram sub-zones; "psys" (the whole platform, which contains the packages) is used
// only when there is no package zone. energy_uj is root-only on most kernels since 2020
// (CVE-2020-8694): then the meter is unavailable and says so.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "frugal/telemetry/energy.h"

namespace frugal::telemetry {

struct RaplDomain {
  std::string zone;   // "intel-rapl:0", "intel-rapl:0:2"
  std::string name;   // the zone's `name` file: "package-0", "dram", "psys"
  uint64_t range_uj = 0;  // max_energy_range_uj (0: unknown, then a decrease is a reset)
};

// The domains a RAPL meter would sum under `root` (a powercap directory), or why there are none
// (no tree, no zone, energy_uj unreadable). Reads real files: tests point it at a fake tree.
Result<std::vector<RaplDomain>> find_rapl_domains(const std::string& root);

// A meter over those domains; kNotSupported (with the reason) when there are none.
Result<std::unique_ptr<EnergyMeter>> open_rapl_meter(const std::string& root);

}  // namespace frugal::telemetry
