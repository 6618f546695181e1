// Hardware telemetry at a fixed rate on a background thread: GPU utilisation, SM clock, memory
// used and power (NVML, when a GPU is open), CPU utilisation (/proc/stat) and this process's
// resident memory (/proc/self/statm). Samples are kept in a ring with steady-clock times; a phase
// of a request [t0, t1] is summarised from the samples inside it. The engine also samples each phase's
// edges (admission, first token, last token) on its own thread, so every phase has samples at its
// ends however short it is, and pauses the sampler while it has no work.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "frugal/telemetry/nvml.h"

namespace frugal::telemetry {

inline constexpr double kNotMeasured = std::numeric_limits<double>::quiet_NaN();

struct HwSample {
  double seconds = 0;                  // steady clock (steady_seconds())
  double gpu_util = kNotMeasured;      // percent of the last sample period a kernel ran
  double gpu_sm_clock_mhz = kNotMeasured;
  double gpu_memory_used_bytes = kNotMeasured;
  double gpu_power_w = kNotMeasured;
  double cpu_util = kNotMeasured;      // percent of all CPUs busy since the previous sample
  double rss_bytes = kNotMeasured;
};

// Mean and maximum of each field over a phase's samples; NaN (JSON null) when no sample had it.
struct PhaseSamples {
  int64_t n = 0;
  double gpu_util_mean = kNotMeasured, gpu_util_max = kNotMeasured;
  double gpu_sm_clock_mhz_mean = kNotMeasured;
  double gpu_memory_used_max_bytes = kNotMeasured;
  double gpu_power_w_mean = kNotMeasured, gpu_power_w_max = kNotMeasured;
  double cpu_util_mean = kNotMeasured;
  double rss_max_bytes = kNotMeasured;
};

double steady_seconds();

// /proc/stat's aggregate "cpu" line.
struct CpuTimes {
  uint64_t busy = 0;   // user + nice + system + irq + softirq + steal
  uint64_t total = 0;  // busy + idle + iowait
};
// kCorrupt names `what` (the file) and the field when the line is not what Linux writes.
Result<CpuTimes> parse_proc_stat(const std::string& text, const std::string& what);
// Percent busy between two readings; NaN when no time passed.
double cpu_util_percent(const CpuTimes& a, const CpuTimes& b);

struct SamplerOptions {
  double period_s = 0.05;            // 20 samples per second
  std::string proc_root = "/proc";   // stat and self/statm are read under it
  std::shared_ptr<NvmlDevice> gpu;   // null: no GPU fields
  size_t capacity = 1 << 16;         // samples kept (about 55 minutes at 20 Hz)
};

class HardwareSampler {
 public:
  explicit HardwareSampler(SamplerOptions o);
  ~HardwareSampler();
  HardwareSampler(const HardwareSampler&) = delete;
  HardwareSampler& operator=(const HardwareSampler&) = delete;

  // Samples run only while busy (the engine has sequences); the thread sleeps otherwise.
  void set_busy(bool busy);
  // One sample now, on the caller's thread, put in the ring (the thread uses the same) at time
  // `at` (steady_seconds(); NaN: now). The engine samples a phase's edges itself, stamped with
  // the edge's time, so that each edge's sample falls inside the phase it bounds. With
  // fresh_gpu false the GPU fields are those of the newest GPU reading when it is at most two
  // periods old (NVML calls can take milliseconds: the engine thread should not wait for them),
  // else read now; the CPU and memory fields are always read now.
  HwSample sample_now(double at = kNotMeasured, bool fresh_gpu = true);
  PhaseSamples summarize(double t0, double t1) const;
  const SamplerOptions& options() const { return o_; }

 private:
  void loop();

  SamplerOptions o_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<HwSample> ring_;
  bool busy_ = false, stop_ = false;
  std::mutex read_mu_;          // one CPU reading at a time (the CPU-time baseline is shared)
  HwSample gpu_;                // the newest GPU reading (its GPU fields and time), under mu_
  bool have_gpu_ = false;
  bool have_cpu_ = false;
  CpuTimes last_cpu_;
  std::thread thread_;
};

}  // namespace frugal::telemetry
