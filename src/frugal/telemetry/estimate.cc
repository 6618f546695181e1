#include "frugal/telemetry/estimate.h"

namespace frugal::telemetry {

const CostModel& cost_model_for(const std::string& backend) {
  static const CostModel kCpu{"cpu-ddr-fp32", 1.3e3 / 8, (3.7 + 0.9) / 2};
  static const CostModel kGpu{"gpu-hbm2-fp16", 3.9 * 8, (1.1 + 0.4) / 2};
  return backend == "cuda" ? kGpu : kCpu;
}

}  // namespace frugal::telemetry
