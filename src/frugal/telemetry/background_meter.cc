#include "frugal/telemetry/background_meter.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

namespace frugal::telemetry {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class BackgroundMeter final : public EnergyMeter {
 public:
  BackgroundMeter(std::unique_ptr<EnergyMeter> inner, double period_s, double idle_s)
      : inner_(std::move(inner)), period_s_(period_s), idle_s_(idle_s) {
    char buf[96];
    std::snprintf(buf, sizeof buf, " (read every %.0f ms on a background thread)", period_s_ * 1e3);
    describe_ = inner_->describe() + buf;
    latest_ = inner_->read();
    last_call_s_ = now_s();
    thread_ = std::thread([this] { loop(); });
  }
  ~BackgroundMeter() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  EnergySource source() const override { return inner_->source(); }
  const std::string& describe() const override { return describe_; }
  double joules_per_unit() const override { return inner_->joules_per_unit(); }
  double max_watts() const override { return inner_->max_watts(); }

  CounterReading read() override {
    std::unique_lock<std::mutex> l(mu_);
    const double t = now_s();
    last_call_s_ = t;
    if (paused_) {
      // The thread stopped reading while nobody asked: read now rather than hand out a reading
      // from before the pause, then let the thread go on.
      l.unlock();
      const CounterReading r = inner_->read();
      l.lock();
      if (r.seconds >= latest_.seconds) latest_ = r;
      paused_ = false;
      cv_.notify_all();
    }
    return latest_;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> l(mu_);
    while (!stop_) {
      if (paused_) {
        cv_.wait(l, [this] { return stop_ || !paused_; });
        continue;
      }
      cv_.wait_for(l, std::chrono::duration<double>(period_s_), [this] { return stop_; });
      if (stop_) break;
      if (now_s() - last_call_s_ > idle_s_) {
        paused_ = true;
        continue;
      }
      l.unlock();
      const CounterReading r = inner_->read();  // the slow call, outside the lock
      l.lock();
      if (r.seconds >= latest_.seconds) latest_ = r;
    }
  }

  std::unique_ptr<EnergyMeter> inner_;
  const double period_s_;
  const double idle_s_;
  std::string describe_;
  std::mutex mu_;
  std::condition_variable cv_;
  CounterReading latest_;
  double last_call_s_ = 0;
  bool paused_ = false;
  bool stop_ = false;
  std::thread thread_;  // last: started once every other member is ready
};

}  // namespace

std::unique_ptr<EnergyMeter> read_in_background(std::unique_ptr<EnergyMeter> inner, double period_s, double idle_s) {
  if (inner == nullptr || inner->source() == EnergySource::kUnavailable) return inner;
  return std::make_unique<BackgroundMeter>(std::move(inner), period_s, idle_s);
}

}  // namespace frugal::telemetry
