#include "frugal/telemetry/nvml.h"

#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <mutex>

namespace frugal::telemetry {
namespace {

// NVML's C ABI, as declared in nvml.h: nvmlReturn_t is an int enum (0 = NVML_SUCCESS), a device is
// an opaque pointer, and these two structs are plain.
using NvmlReturn = int;
using NvmlDeviceT = struct NvmlDeviceSt*;
struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr int kNvmlClockSm = 1;  // NVML_CLOCK_SM

struct NvmlApi {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*by_index)(unsigned int, NvmlDeviceT*) = nullptr;
  NvmlReturn (*by_uuid)(const char*, NvmlDeviceT*) = nullptr;
  NvmlReturn (*get_name)(NvmlDeviceT, char*, unsigned int) = nullptr;
  NvmlReturn (*total_energy)(NvmlDeviceT, unsigned long long*) = nullptr;
  NvmlReturn (*power)(NvmlDeviceT, unsigned int*) = nullptr;
  NvmlReturn (*power_limit)(NvmlDeviceT, unsigned int*) = nullptr;
  NvmlReturn (*utilization)(NvmlDeviceT, NvmlUtilization*) = nullptr;
  NvmlReturn (*clock)(NvmlDeviceT, int, unsigned int*) = nullptr;
  NvmlReturn (*memory)(NvmlDeviceT, NvmlMemory*) = nullptr;
};

template <typename F>
void bind(void* lib, const char* name, F& fn, std::string& missing) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (fn == nullptr) {
    if (!missing.empty()) missing += ", ";
    missing += name;
  }
}

// The library stays loaded for the life of the process once opened (as cuBLAS does): NVML keeps
// threads of its own, and unloading it is not worth the risk.
Result<const NvmlApi*> load(const std::string& soname) {
  static std::mutex mu;
  static std::string loaded_name;
  static NvmlApi api;
  std::lock_guard<std::mutex> lk(mu);
  if (!loaded_name.empty()) {
    if (loaded_name == soname) return &api;
    return error(ErrorCode::kNotSupported, "nvml: {} is already loaded; cannot also load {}", loaded_name, soname);
  }
  void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return error(ErrorCode::kNotSupported, "nvml: cannot load {} ({}); it comes with the NVIDIA driver", soname,
                 why ? why : "unknown error");
  }
  NvmlApi a;
  std::string missing;
  bind(lib, "nvmlInit_v2", a.init, missing);
  bind(lib, "nvmlShutdown", a.shutdown, missing);
  bind(lib, "nvmlErrorString", a.error_string, missing);
  bind(lib, "nvmlDeviceGetHandleByIndex_v2", a.by_index, missing);
  bind(lib, "nvmlDeviceGetHandleByUUID", a.by_uuid, missing);
  bind(lib, "nvmlDeviceGetName", a.get_name, missing);
  bind(lib, "nvmlDeviceGetTotalEnergyConsumption", a.total_energy, missing);
  bind(lib, "nvmlDeviceGetPowerUsage", a.power, missing);
  bind(lib, "nvmlDeviceGetEnforcedPowerLimit", a.power_limit, missing);
  bind(lib, "nvmlDeviceGetUtilizationRates", a.utilization, missing);
  bind(lib, "nvmlDeviceGetClockInfo", a.clock, missing);
  bind(lib, "nvmlDeviceGetMemoryInfo", a.memory, missing);
  if (!missing.empty()) {
    dlclose(lib);
    return error(ErrorCode::kNotSupported, "nvml: {} lacks {}", soname, missing);
  }
  const NvmlReturn r = a.init();
  if (r != 0) {
    const std::string why = a.error_string(r);
    dlclose(lib);
    return error(ErrorCode::kNotSupported, "nvml: nvmlInit failed: {} (status {})", why, r);
  }
  api = a;
  loaded_name = soname;
  return &api;
}

class Device final : public NvmlDevice {
 public:
  Device(const NvmlApi* api, NvmlDeviceT d, std::string name) : api_(api), d_(d), name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  bool total_energy_mj(uint64_t& mj) override {
    unsigned long long v = 0;
    if (api_->total_energy(d_, &v) != 0) return false;
    mj = v;
    return true;
  }
  bool power_mw(uint32_t& mw) override {
    unsigned int v = 0;
    if (api_->power(d_, &v) != 0) return false;
    mw = v;
    return true;
  }
  bool power_limit_mw(uint32_t& mw) override {
    unsigned int v = 0;
    if (api_->power_limit(d_, &v) != 0) return false;
    mw = v;
    return true;
  }
  bool utilization(uint32_t& gpu_pct, uint32_t& mem_pct) override {
    NvmlUtilization u{};
    if (api_->utilization(d_, &u) != 0) return false;
    gpu_pct = u.gpu;
    mem_pct = u.memory;
    return true;
  }
  bool sm_clock_mhz(uint32_t& mhz) override {
    unsigned int v = 0;
    if (api_->clock(d_, kNvmlClockSm, &v) != 0) return false;
    mhz = v;
    return true;
  }
  bool memory_used(uint64_t& bytes) override {
    NvmlMemory m{};
    if (api_->memory(d_, &m) != 0) return false;
    bytes = m.used;
    return true;
  }

 private:
  const NvmlApi* api_;
  NvmlDeviceT d_;
  std::string name_;
};

class NvmlMeter final : public EnergyMeter {
 public:
  NvmlMeter(std::shared_ptr<NvmlDevice> dev, double max_watts) : dev_(std::move(dev)), max_watts_(max_watts) {
    desc_ = "nvml: total energy of " + dev_->name();
  }
  EnergySource source() const override { return EnergySource::kNvml; }
  const std::string& describe() const override { return desc_; }
  double joules_per_unit() const override { return 1e-3; }
  double max_watts() const override { return max_watts_; }
  CounterReading read() override {
    CounterReading r;
    uint64_t mj = 0;
    r.ok = dev_->total_energy_mj(mj);
    r.n = 1;
    r.raw[0] = mj;
    r.range[0] = 0;  // 64 bits of millijoules since the driver loaded: a decrease is a reset
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    return r;
  }

 private:
  std::shared_ptr<NvmlDevice> dev_;
  double max_watts_;
  std::string desc_;
};

}  // namespace

Result<std::unique_ptr<NvmlDevice>> open_nvml_device(const NvmlOpenOptions& o) {
  FRUGAL_ASSIGN_OR_RETURN(const NvmlApi* api, load(o.library));
  std::string which = o.device;
  if (which.empty()) {
    const char* vis = std::getenv("CUDA_VISIBLE_DEVICES");
    // The first visible device (CUDA_VISIBLE_DEVICES lists them comma-separated).
    const std::string_view all = vis != nullptr ? std::string_view(vis) : std::string_view("0");
    const std::string_view first = all.substr(0, all.find(','));
    which.assign(first.empty() ? std::string_view("0") : first);
  }
  NvmlDeviceT d = nullptr;
  NvmlReturn r = 0;
  if (which.rfind("GPU-", 0) == 0 || which.rfind("MIG-", 0) == 0) {
    r = api->by_uuid(which.c_str(), &d);
  } else {
    char* end = nullptr;
    const unsigned long idx = std::strtoul(which.c_str(), &end, 10);
    if (end == which.c_str() || *end != '\0') {
      return error(ErrorCode::kInvalidArgument, "nvml: device '{}' is neither an index nor a GPU- UUID", which);
    }
    r = api->by_index(static_cast<unsigned int>(idx), &d);
  }
  if (r != 0) {
    return error(ErrorCode::kNotSupported, "nvml: no device '{}': {} (status {})", which, api->error_string(r), r);
  }
  char name[96] = {0};
  if (api->get_name(d, name, sizeof(name)) != 0) name[0] = '\0';
  std::string label = name[0] ? std::string(name) : "GPU " + which;
  return std::unique_ptr<NvmlDevice>(new Device(api, d, std::move(label)));
}

Result<std::unique_ptr<EnergyMeter>> open_nvml_meter(std::shared_ptr<NvmlDevice> dev) {
  uint64_t mj = 0;
  if (!dev->total_energy_mj(mj)) {
    return error(ErrorCode::kNotSupported, "nvml: {} has no total energy counter (Volta or later needed)", dev->name());
  }
  // The ceiling: twice the enforced power limit (transients exceed it briefly), else 2 kW.
  uint32_t limit_mw = 0;
  const double max_watts = dev->power_limit_mw(limit_mw) && limit_mw > 0 ? 2.0 * limit_mw / 1e3 : 2000.0;
  return std::unique_ptr<EnergyMeter>(new NvmlMeter(std::move(dev), max_watts));
}

}  // namespace frugal::telemetry
