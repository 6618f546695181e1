// The engine samples each phase's edges on its own thread (HardwareSampler::sample_now with
// fresh_gpu false): those samples take the GPU fields of the sampler thread's newest reading while
// it is recent, so the engine thread never waits for NVML, and read the GPU themselves when it is
// not (an idle sampler), so no stale GPU reading is stamped with a later time.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <thread>

#include "frugal/telemetry/sampler.h"

namespace frugal::telemetry {
namespace {

// Every call takes 2 ms and is counted per calling thread; utilisation counts up per call.
class SlowGpu final : public NvmlDevice {
 public:
  explicit SlowGpu(std::thread::id caller) : caller_(caller) {}
  const std::string& name() const override { return name_; }
  bool total_energy_mj(uint64_t& mj) override { return call(), mj = 0, true; }
  bool power_mw(uint32_t& mw) override { return call(), mw = 100000, true; }
  bool utilization(uint32_t& gpu, uint32_t& mem) override {
    call();
    gpu = static_cast<uint32_t>(calls_.load() % 100);
    mem = 0;
    return true;
  }
  bool sm_clock_mhz(uint32_t& mhz) override { return call(), mhz = 1980, true; }
  bool memory_used(uint64_t& bytes) override { return call(), bytes = 1 << 30, true; }
  bool power_limit_mw(uint32_t& mw) override { return call(), mw = 700000, true; }
  std::atomic<int> calls_{0}, caller_calls_{0};

 private:
  void call() {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ++calls_;
    if (std::this_thread::get_id() == caller_) ++caller_calls_;
  }
  std::thread::id caller_;
  std::string name_ = "slow gpu";
};

TEST(SamplerEdges, BusySamplerSparesTheCallerTheGpuReads) {
  auto gpu = std::make_shared<SlowGpu>(std::this_thread::get_id());
  SamplerOptions o;
  o.period_s = 0.2;  // its reading stays recent (two periods) for far longer than the test needs
  o.gpu = gpu;
  HardwareSampler s(o);
  s.set_busy(true);
  // Wait for the thread's first reading (at most 5 s).
  const double t0 = steady_seconds();
  while (gpu->calls_.load() < 4 && steady_seconds() - t0 < 5) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_GE(gpu->calls_.load(), 4) << "the sampler thread never read the GPU";
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // its four calls done
  const int before = gpu->caller_calls_.load();
  const HwSample e = s.sample_now(kNotMeasured, false);
  EXPECT_EQ(gpu->caller_calls_.load(), before) << "an edge sample waited for NVML while the sampler is busy";
  EXPECT_FALSE(std::isnan(e.gpu_util));
  EXPECT_EQ(e.gpu_sm_clock_mhz, 1980);
  EXPECT_FALSE(std::isnan(e.rss_bytes));
  // A fresh sample reads the GPU on the caller's thread, as before.
  (void)s.sample_now();
  EXPECT_EQ(gpu->caller_calls_.load(), before + 4);
}

TEST(SamplerEdges, IdleSamplerEdgeReadsTheGpuItself) {
  auto gpu = std::make_shared<SlowGpu>(std::this_thread::get_id());
  SamplerOptions o;
  o.period_s = 0.01;
  o.gpu = gpu;
  HardwareSampler s(o);  // never busy: no thread readings
  const HwSample e = s.sample_now(kNotMeasured, false);
  EXPECT_EQ(gpu->caller_calls_.load(), 4);
  EXPECT_EQ(e.gpu_sm_clock_mhz, 1980);
  // Older than two periods: read again rather than reuse it.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  (void)s.sample_now(kNotMeasured, false);
  EXPECT_EQ(gpu->caller_calls_.load(), 8);
}

}  // namespace
}  // namespace frugal::telemetry
