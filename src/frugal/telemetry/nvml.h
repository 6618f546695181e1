// NVML (the NVIDIA management library) opened with dlopen at run time, as the CUDA backend opens
// cuBLAS: nothing links against it, so a CPU-only machine never needs it and a missing driver is a
// message, not a load failure. Only the calls telemetry needs are bound; their C signatures are
// NVML's stable ABI (nvml.h, which the CUDA toolkit does not always ship) and are declared here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "frugal/telemetry/energy.h"

namespace frugal::telemetry {

// One GPU as NVML sees it. Every getter returns false when the call fails (not supported on this
// GPU, no permission) and leaves its output untouched.
class NvmlDevice {
 public:
  virtual ~NvmlDevice() = default;
  virtual const std::string& name() const = 0;
  virtual bool total_energy_mj(uint64_t& mj) = 0;   // nvmlDeviceGetTotalEnergyConsumption
  virtual bool power_mw(uint32_t& mw) = 0;          // nvmlDeviceGetPowerUsage
  virtual bool utilization(uint32_t& gpu_pct, uint32_t& mem_pct) = 0;  // nvmlDeviceGetUtilizationRates
  virtual bool sm_clock_mhz(uint32_t& mhz) = 0;     // nvmlDeviceGetClockInfo(NVML_CLOCK_SM)
  virtual bool memory_used(uint64_t& bytes) = 0;    // nvmlDeviceGetMemoryInfo().used
  virtual bool power_limit_mw(uint32_t& mw) = 0;    // nvmlDeviceGetEnforcedPowerLimit
};

struct NvmlOpenOptions {
  std::string library = "libnvidia-ml.so.1";  // the driver's soname
  // Which GPU: "" follows the CUDA runtime's first visible device (CUDA_VISIBLE_DEVICES: an index
  // or a GPU-UUID; absent: index 0). Index order is NVML's (PCI bus order): set
  // CUDA_DEVICE_ORDER=PCI_BUS_ID so that the CUDA runtime numbers devices the same way.
  std::string device;
};

// Loads the library, initialises NVML and opens the device. kNotSupported names what is missing:
// the library ("cannot load libnvidia-ml.so.1 (...)"), symbols ("... lacks nvmlInit_v2, ..."),
// or the device.
Result<std::unique_ptr<NvmlDevice>> open_nvml_device(const NvmlOpenOptions& o = {});

// An energy meter over a device's total energy counter (millijoules, 64-bit, since driver load);
// kNotSupported when the GPU has no energy counter (pre-Volta).
Result<std::unique_ptr<EnergyMeter>> open_nvml_meter(std::shared_ptr<NvmlDevice> dev);

}  // namespace frugal::telemetry
