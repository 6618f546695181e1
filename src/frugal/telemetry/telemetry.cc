#include "frugal/telemetry/telemetry.h"

#include "frugal/telemetry/background_meter.h"
#include "frugal/telemetry/rapl.h"

namespace frugal::telemetry {

std::unique_ptr<Telemetry> Telemetry::open(const TelemetryOptions& o) {
  auto t = std::unique_ptr<Telemetry>(new Telemetry());
  t->cost_ = &cost_model_for(o.backend);
  std::shared_ptr<NvmlDevice> gpu;
  if (o.backend == "cuda") {
    auto dev = open_nvml_device();
    if (dev.ok()) {
      gpu = std::shared_ptr<NvmlDevice>(std::move(*dev));
      auto m = open_nvml_meter(gpu);
      // NVML calls can take milliseconds: the engine reads the counter at every step's edges.
      t->meter_ = m.ok() ? read_in_background(std::move(*m)) : unavailable_meter(m.status().message());
    } else {
      t->meter_ = unavailable_meter(dev.status().message());
    }
  } else {
    t->meter_ = open_energy_meter(o.backend, o.powercap_root);
  }
  if (o.sample_period_s > 0) {
    SamplerOptions so;
    so.period_s = o.sample_period_s;
    so.proc_root = o.proc_root;
    so.gpu = gpu;
    t->sampler_ = std::make_unique<HardwareSampler>(std::move(so));
  }
  return t;
}

}  // namespace frugal::telemetry
