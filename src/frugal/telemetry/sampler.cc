#include "frugal/telemetry/sampler.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>

namespace frugal::telemetry {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Result<CpuTimes> parse_proc_stat(const std::string& text, const std::string& what) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line.rfind("cpu ", 0) != 0) {
    return error(ErrorCode::kCorrupt, "{}: line 1: expected the aggregate 'cpu' line", what);
  }
  static const char* kFields[] = {"user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"};
  std::istringstream f(line.substr(4));
  uint64_t v[8] = {0};
  for (int i = 0; i < 8; ++i) {
    std::string tok;
    if (!(f >> tok)) {
      if (i >= 4) break;  // kernels before 2.6 stop after idle; iowait.. are then 0
      return error(ErrorCode::kCorrupt, "{}: line 1: field {} ({}) is missing", what, i + 1, kFields[i]);
    }
    size_t used = 0;
    try {
      v[i] = std::stoull(tok, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != tok.size() || tok[0] == '-') {
      return error(ErrorCode::kCorrupt, "{}: line 1: field {} ({}) = '{}' is not a counter", what, i + 1, kFields[i],
                   tok);
    }
  }
  CpuTimes t;
  t.busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
  t.total = t.busy + v[3] + v[4];
  return t;
}

double cpu_util_percent(const CpuTimes& a, const CpuTimes& b) {
  if (b.total <= a.total || b.busy < a.busy) return kNotMeasured;
  return 100.0 * static_cast<double>(b.busy - a.busy) / static_cast<double>(b.total - a.total);
}

HardwareSampler::HardwareSampler(SamplerOptions o) : o_(std::move(o)) {
  thread_ = std::thread([this] { loop(); });
}

HardwareSampler::~HardwareSampler() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void HardwareSampler::set_busy(bool busy) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (busy_ == busy) return;
    busy_ = busy;
  }
  cv_.notify_all();
}

namespace {
std::string slurp(const std::string& path) {
  std::ifstream f(path);
  if (!f) return {};
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}
}  // namespace

HwSample HardwareSampler::sample_now(double at, bool fresh_gpu) {
  HwSample s;
  if (o_.gpu) {
    bool cached = false;
    if (!fresh_gpu) {
      std::lock_guard<std::mutex> lk(mu_);
      if (have_gpu_ && steady_seconds() - gpu_.seconds <= 2 * o_.period_s) {
        s.gpu_util = gpu_.gpu_util;
        s.gpu_sm_clock_mhz = gpu_.gpu_sm_clock_mhz;
        s.gpu_memory_used_bytes = gpu_.gpu_memory_used_bytes;
        s.gpu_power_w = gpu_.gpu_power_w;
        cached = true;
      }
    }
    if (!cached) {
      // Outside every lock: four NVML calls can take milliseconds each, and the caller may be
      // the engine thread.
      uint32_t u = 0, m = 0, mhz = 0, mw = 0;
      uint64_t used = 0;
      if (o_.gpu->utilization(u, m)) s.gpu_util = u;
      if (o_.gpu->sm_clock_mhz(mhz)) s.gpu_sm_clock_mhz = mhz;
      if (o_.gpu->memory_used(used)) s.gpu_memory_used_bytes = static_cast<double>(used);
      if (o_.gpu->power_mw(mw)) s.gpu_power_w = mw / 1e3;
      std::lock_guard<std::mutex> lk(mu_);
      gpu_ = s;
      gpu_.seconds = steady_seconds();
      have_gpu_ = true;
    }
  }
  std::lock_guard<std::mutex> rl(read_mu_);
  if (auto t = parse_proc_stat(slurp(o_.proc_root + "/stat"), o_.proc_root + "/stat"); t.ok()) {
    if (have_cpu_) s.cpu_util = cpu_util_percent(last_cpu_, *t);
    last_cpu_ = *t;
    have_cpu_ = true;
  }
  {
    std::istringstream statm(slurp(o_.proc_root + "/self/statm"));
    uint64_t size = 0, resident = 0;
    if (statm >> size >> resident) s.rss_bytes = static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
  }
  s.seconds = std::isnan(at) ? steady_seconds() : at;
  std::lock_guard<std::mutex> lk(mu_);
  // Kept in time order: a stamped sample may be older than the thread's latest.
  const auto pos = std::upper_bound(ring_.begin(), ring_.end(), s.seconds,
                                    [](double t, const HwSample& x) { return t < x.seconds; });
  ring_.insert(pos, s);
  while (ring_.size() > o_.capacity) ring_.pop_front();
  return s;
}

void HardwareSampler::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    if (busy_) {
      cv_.wait_for(lk, std::chrono::duration<double>(o_.period_s), [&] { return stop_ || !busy_; });
    } else {
      cv_.wait(lk, [&] { return stop_ || busy_; });
    }
    if (stop_) return;
    if (!busy_) continue;
    lk.unlock();
    (void)sample_now();
    lk.lock();
  }
}

PhaseSamples HardwareSampler::summarize(double t0, double t1) const {
  PhaseSamples p;
  struct Acc {
    double sum = 0, max = -1e300;
    int64_t n = 0;
    void add(double v) {
      if (std::isnan(v)) return;
      sum += v;
      max = std::max(max, v);
      ++n;
    }
    double mean() const { return n ? sum / static_cast<double>(n) : kNotMeasured; }
    double top() const { return n ? max : kNotMeasured; }
  } util, clock, mem, power, cpu, rss;
  std::lock_guard<std::mutex> lk(mu_);
  const auto first = std::lower_bound(ring_.begin(), ring_.end(), t0,
                                      [](const HwSample& s, double t) { return s.seconds < t; });
  for (auto it = first; it != ring_.end() && it->seconds <= t1; ++it) {
    ++p.n;
    util.add(it->gpu_util);
    clock.add(it->gpu_sm_clock_mhz);
    mem.add(it->gpu_memory_used_bytes);
    power.add(it->gpu_power_w);
    cpu.add(it->cpu_util);
    rss.add(it->rss_bytes);
  }
  p.gpu_util_mean = util.mean();
  p.gpu_util_max = util.top();
  p.gpu_sm_clock_mhz_mean = clock.mean();
  p.gpu_memory_used_max_bytes = mem.top();
  p.gpu_power_w_mean = power.mean();
  p.gpu_power_w_max = power.top();
  p.cpu_util_mean = cpu.mean();
  p.rss_max_bytes = rss.top();
  return p;
}

}  // namespace frugal::telemetry
