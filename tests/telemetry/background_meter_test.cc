// The background-read energy meter (telemetry/background_meter.h) over a fake counter whose reads
// are slow: the caller's reads never wait for the counter while it keeps asking, the readings
// move forward, the thread stops reading once nobody asks, and the first read after such a pause
// is taken then, not handed out from before it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "frugal/telemetry/background_meter.h"

namespace frugal::telemetry {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Counts 1 J per read; each read takes 2 ms and records which thread made it.
class SlowCounter final : public EnergyMeter {
 public:
  explicit SlowCounter(std::thread::id caller) : caller_(caller) {}
  EnergySource source() const override { return EnergySource::kNvml; }
  const std::string& describe() const override { return describe_; }
  CounterReading read() override {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const uint64_t v = ++reads_;
    if (std::this_thread::get_id() == caller_) ++caller_reads_;
    CounterReading r;
    r.ok = true;
    r.n = 1;
    r.raw[0] = v * 1000;  // millijoules, as NVML counts
    r.seconds = now_s();
    return r;
  }
  double joules_per_unit() const override { return 1e-3; }
  double max_watts() const override { return 1e6; }

  std::atomic<int> reads_{0};
  std::atomic<int> caller_reads_{0};

 private:
  std::thread::id caller_;
  std::string describe_ = "slow counter";
};

TEST(BackgroundMeter, CallerNeverReadsTheCounterWhileItKeepsAsking) {
  auto inner = std::make_unique<SlowCounter>(std::this_thread::get_id());
  SlowCounter* c = inner.get();
  auto m = read_in_background(std::move(inner), 0.005, 10.0);
  EXPECT_EQ(m->source(), EnergySource::kNvml);
  EXPECT_NE(m->describe().find("slow counter"), std::string::npos);
  EXPECT_NE(m->describe().find("background"), std::string::npos);
  const int at_start = c->caller_reads_.load();  // the first reading, taken when the meter opens
  CounterReading first = m->read();
  ASSERT_TRUE(first.ok);
  // Keep asking until the thread has delivered a newer reading (at most 5 s).
  CounterReading r = first;
  const double t0 = now_s();
  while (r.seconds == first.seconds && now_s() - t0 < 5) r = m->read();
  EXPECT_GT(r.seconds, first.seconds) << "the thread never delivered a newer reading";
  EXPECT_GT(r.raw[0], first.raw[0]);
  EXPECT_EQ(c->caller_reads_.load(), at_start) << "a read() waited for the counter";
  // Intervals between its readings are the counter's: energy over the time between them.
  const EnergyDelta d = counter_delta(first, r, m->joules_per_unit(), m->max_watts());
  EXPECT_EQ(d.issue, CounterIssue::kNone);
  EXPECT_DOUBLE_EQ(d.joules, static_cast<double>(r.raw[0] - first.raw[0]) * 1e-3);
}

TEST(BackgroundMeter, PausesWhenIdleAndReadsFreshAfterThePause) {
  auto inner = std::make_unique<SlowCounter>(std::this_thread::get_id());
  SlowCounter* c = inner.get();
  auto m = read_in_background(std::move(inner), 0.005, 0.05);
  (void)m->read();
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // idle: the thread pauses
  const int paused_reads = c->reads_.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(c->reads_.load(), paused_reads) << "the thread kept reading an idle meter";
  const int caller_before = c->caller_reads_.load();
  const double t = now_s();
  const CounterReading r = m->read();
  EXPECT_EQ(c->caller_reads_.load(), caller_before + 1) << "the read after a pause was not taken then";
  EXPECT_GE(r.seconds, t) << "a reading from before the pause was handed out";
}

TEST(BackgroundMeter, UnavailableMeterIsReturnedAsItIs) {
  auto u = unavailable_meter("no counter here");
  EnergyMeter* raw = u.get();
  auto m = read_in_background(std::move(u));
  EXPECT_EQ(m.get(), raw);
  EXPECT_EQ(m->source(), EnergySource::kUnavailable);
}

}  // namespace
}  // namespace frugal::telemetry
