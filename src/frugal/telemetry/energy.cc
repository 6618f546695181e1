#include "frugal/telemetry/energy.h"

#include <chrono>

#include "frugal/telemetry/background_meter.h"
#include "frugal/telemetry/nvml.h"
#include "frugal/telemetry/rapl.h"

namespace frugal::telemetry {

const char* energy_source_name(EnergySource s) {
  switch (s) {
    case EnergySource::kNvml: return "nvml";
    case EnergySource::kRapl: return "rapl";
    case EnergySource::kUnavailable: break;
  }
  return "unavailable";
}

const char* counter_issue_name(CounterIssue i) {
  switch (i) {
    case CounterIssue::kNone: return "none";
    case CounterIssue::kReadFailed: return "read failed";
    case CounterIssue::kWrapped: return "counter wrapped";
    case CounterIssue::kReset: return "counter reset";
    case CounterIssue::kImplausible: return "implausible power";
  }
  return "unknown";
}

EnergyDelta counter_delta(const CounterReading& a, const CounterReading& b, double joules_per_unit,
                          double max_watts) {
  EnergyDelta d;
  if (!a.ok || !b.ok || a.n != b.n || a.n <= 0) {
    d.issue = CounterIssue::kReadFailed;
    return d;
  }
  double units = 0;
  for (int i = 0; i < a.n; ++i) {
    if (b.raw[i] < a.raw[i]) {
      // Down: past the range (a wrap) or restarted (a reset). Either way the number of wraps in
      // between is unknowable from two readings, so the interval is not measured.
      d.issue = b.range[i] > 0 && a.raw[i] <= b.range[i] ? CounterIssue::kWrapped : CounterIssue::kReset;
      return d;
    }
    units += static_cast<double>(b.raw[i] - a.raw[i]);
  }
  const double joules = units * joules_per_unit;
  const double dt = b.seconds - a.seconds;
  // A counter that reset and then counted past its old value looks like a large increase. The
  // ceiling gets one millisecond of slack: counters update in steps, so a short interval can see
  // one step's worth of energy.
  if (dt < 0 || joules > max_watts * (dt + 1e-3)) {
    d.issue = CounterIssue::kImplausible;
    return d;
  }
  d.joules = joules;
  return d;
}

void PhaseEnergy::add(const EnergyDelta& d, double share) {
  ++intervals;
  if (d.issue != CounterIssue::kNone) {
    if (issue == CounterIssue::kNone) issue = d.issue;
    return;
  }
  joules += d.joules * share;
}

void PhaseEnergy::merge(const PhaseEnergy& o) {
  if (o.intervals == 0 && o.issue == CounterIssue::kNone) return;
  if (intervals == 0 && issue == CounterIssue::kNone) source = o.source;
  if (source != o.source) source = EnergySource::kUnavailable;  // mixed sources are not one number
  joules += o.joules;
  intervals += o.intervals;
  if (issue == CounterIssue::kNone) issue = o.issue;
}

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class Unavailable final : public EnergyMeter {
 public:
  explicit Unavailable(std::string why) : why_(std::move(why)) {}
  EnergySource source() const override { return EnergySource::kUnavailable; }
  const std::string& describe() const override { return why_; }
  CounterReading read() override {
    CounterReading r;
    r.seconds = now_seconds();
    return r;
  }
  double joules_per_unit() const override { return 0; }
  double max_watts() const override { return 0; }

 private:
  std::string why_;
};

}  // namespace

std::unique_ptr<EnergyMeter> unavailable_meter(std::string why) { return std::make_unique<Unavailable>(std::move(why)); }

std::unique_ptr<EnergyMeter> open_energy_meter(const std::string& backend, const std::string& powercap_root) {
  if (backend == "cuda") {
    auto dev = open_nvml_device();
    if (!dev.ok()) return unavailable_meter(dev.status().message());
    auto m = open_nvml_meter(std::shared_ptr<NvmlDevice>(std::move(*dev)));
    if (!m.ok()) return unavailable_meter(m.status().message());
    return read_in_background(std::move(*m));  // NVML calls can take milliseconds
  }
  if (backend == "cpu") {
    auto m = open_rapl_meter(powercap_root);
    if (!m.ok()) return unavailable_meter(m.status().message());
    return std::move(*m);
  }
  return unavailable_meter("no energy counter is known for the " + backend + " backend");
}

void IntervalMeter::start() {
  if (m_ != nullptr) a_ = m_->read();
}

EnergyDelta IntervalMeter::stop() {
  if (m_ == nullptr || m_->source() == EnergySource::kUnavailable) return {};
  const CounterReading b = m_->read();
  return counter_delta(a_, b, m_->joules_per_unit(), m_->max_watts());
}

}  // namespace frugal::telemetry
