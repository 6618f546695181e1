// Energy counters: the one place frugal reads joules from hardware. A meter reads a cumulative
// counter (NVML's total energy since driver load, RAPL's energy_uj per powercap domain); the
// energy of an interval is the difference of two readings, checked for wraps and resets by
// counter_delta(). A phase (prefill, decode) sums the deltas of its intervals in a PhaseEnergy.
//
// Where no counter can be read the source is "unavailable" and the energy is absent: an estimate
// (estimate.h) is a separate, differently named number, never put in place of a measurement.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "frugal/core/status.h"

namespace frugal::telemetry {

// Where a phase's joules came from. Values are frozen (logs, the record's "source" word).
enum class EnergySource : int {
  kUnavailable = 0,  // no counter could be read: no energy is reported
  kNvml = 1,         // nvmlDeviceGetTotalEnergyConsumption of the GPU the CUDA backend uses
  kRapl = 2,         // powercap energy_uj of the CPU packages (and DRAM where exposed)
};
// "unavailable", "nvml", "rapl".
const char* energy_source_name(EnergySource s);

// One reading of a meter: a cumulative counter per domain (RAPL has one per package and DRAM;
// NVML one per GPU), each wrapping independently at its range.
struct CounterReading {
  static constexpr int kMaxDomains = 8;
  bool ok = false;      // false: the read failed (the interval it bounds is unreliable)
  int n = 0;            // domains read
  std::array<uint64_t, kMaxDomains> raw{};    // counter values in the meter's unit
  std::array<uint64_t, kMaxDomains> range{};  // the value at which each wraps to 0; 0: does not wrap
  double seconds = 0;   // steady-clock time of the reading
};

// What can go wrong with one interval. A phase with any of these is unreliable and reports no
// joules. Values are frozen.
enum class CounterIssue : int {
  kNone = 0,
  kReadFailed = 1,   // a reading failed or its domain count changed
  kWrapped = 2,      // a domain's counter went past its range and started again at 0
  kReset = 3,        // a domain's counter went down with no range to wrap at (driver reload, reset)
  kImplausible = 4,  // the difference implies more power than the meter's ceiling
};
// "none", "read failed", "counter wrapped", "counter reset", "implausible power".
const char* counter_issue_name(CounterIssue i);

struct EnergyDelta {
  double joules = 0;  // valid only when issue == kNone
  CounterIssue issue = CounterIssue::kNone;
};

// The energy between readings `a` and `b` (b later) of a counter counting `joules_per_unit` per
// step. A domain whose value decreased has wrapped (range known) or been reset (range unknown);
// either marks the interval unreliable, since a counter may have wrapped more than once and the
// true energy cannot be known. An increase implying more than `max_watts` over the interval is
// implausible (a reset followed by counting past the old value). Never negative, never huge.
EnergyDelta counter_delta(const CounterReading& a, const CounterReading& b, double joules_per_unit, double max_watts);

// The energy of one phase of one request: the sum of its intervals' shares.
struct PhaseEnergy {
  EnergySource source = EnergySource::kUnavailable;
  double joules = 0;        // the sum of reliable shares; reported only when reliable()
  int64_t intervals = 0;    // counter intervals that contributed
  CounterIssue issue = CounterIssue::kNone;  // the first issue met, if any
  bool reliable() const { return source != EnergySource::kUnavailable && issue == CounterIssue::kNone; }
  // Adds `share` (0..1) of interval `d`.
  void add(const EnergyDelta& d, double share);
  void merge(const PhaseEnergy& o);
};

// A cumulative energy counter, read on the engine thread at the edges of each forward step; it
// never allocates. RAPL's read is cheap (a pread per domain); NVML's can take milliseconds, so
// NVML meters are read on a thread of their own (background_meter.h).
class EnergyMeter {
 public:
  virtual ~EnergyMeter() = default;
  virtual EnergySource source() const = 0;
  // What is measured ("rapl: package-0, dram under /sys/class/powercap"), or, for an unavailable
  // meter, why there is none.
  virtual const std::string& describe() const = 0;
  virtual CounterReading read() = 0;
  virtual double joules_per_unit() const = 0;
  // The most power the counted hardware can draw; more is read as a counter fault.
  virtual double max_watts() const = 0;
};

// The meter for a backend: "cuda" -> NVML for the GPU the backend uses, "cpu" -> RAPL under
// `powercap_root`. Never fails: when the counter cannot be opened, a meter whose source is
// kUnavailable and whose describe() says why.
std::unique_ptr<EnergyMeter> open_energy_meter(const std::string& backend,
                                               const std::string& powercap_root = "/sys/class/powercap");

std::unique_ptr<EnergyMeter> unavailable_meter(std::string why);

// Measures one interval: reading at construction, delta at stop().
class IntervalMeter {
 public:
  explicit IntervalMeter(EnergyMeter* m) : m_(m) { start(); }
  void start();
  EnergyDelta stop();

 private:
  EnergyMeter* m_;
  CounterReading a_;
};

}  // namespace frugal::telemetry
