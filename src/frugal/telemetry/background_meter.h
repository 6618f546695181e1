// An energy meter read on a thread of its own. The engine reads its meter at the edges of every
// forward step; one NVML call took ~3.6 ms on an H100 virtual machine (2026-12-06), which made a
// decode step of the tiny default model cost 7.4 ms instead of 0.17 ms. Wrapped here, read()
// returns at once the newest reading the thread took, with the time it was taken, so intervals
// stay consistent (energy over the time between readings) at the granularity of the period.
#pragma once

#include <memory>

#include "frugal/telemetry/energy.h"

namespace frugal::telemetry {

// Reads `inner` every `period_s` seconds on a background thread while read() is being called.
// After `idle_s` seconds without a call the thread stops reading (an idle server pays nothing);
// the next read() then reads `inner` itself, so the first interval after a pause does not start
// at a stale reading. Source, units and description are the inner meter's (the description says
// how it is read).
std::unique_ptr<EnergyMeter> read_in_background(std::unique_ptr<EnergyMeter> inner, double period_s = 0.02,
                                                double idle_s = 1.0);

}  // namespace frugal::telemetry
