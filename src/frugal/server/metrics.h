// Prometheus text exposition of the engine and the requests it finished. Names follow vLLM's
// (vllm: prefix, model_name label) so existing dashboards work: request counts and states, KV
// usage, token counters, prefix-cache counters and latency histograms (TTFT, time per output
// token, end-to-end, queue, prefill, decode). frugal: names add what vLLM has no name for.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "frugal/engine/engine.h"

namespace frugal::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // "# HELP", "# TYPE" and the _bucket / _sum / _count lines.
  void render(std::string& out, const std::string& name, const std::string& help, const std::string& labels) const;
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last one is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  explicit Metrics(std::string model_name);

  // Thread-safe; called by the engine once per finished request.
  void observe(const FinishedRequest& f);
  void count_http(int status);
  std::string render(const EngineStats& s) const;

 private:
  void render_phases(std::string& out, const std::string& labels) const;
  std::string model_;
  mutable std::mutex mu_;
  Histogram ttft_, tpot_, itl_, e2e_, queue_, prefill_, decode_, prompt_tokens_, gen_tokens_;
  std::map<std::string, uint64_t> finished_;  // by vLLM finished_reason
  uint64_t cancelled_ = 0, refused_ = 0;
  uint64_t kv_rounds_ = 0;     // eviction rounds of finished requests
  double kv_round_s_ = 0;      // their time
  double kv_stats_s_ = 0;      // of which the scored policies' attention statistics
  std::map<std::string, uint64_t> kv_policies_;  // finished requests by "policy/quant"
  // Speculative decoding of finished requests: verify passes, draft tokens proposed and kept.
  uint64_t spec_passes_ = 0, spec_drafted_ = 0, spec_accepted_ = 0;
  std::map<int, uint64_t> http_;  // by status code
  // The per-request record's phase fields summed over finished requests, per phase (0 prefill,
  // 1 decode): measured joules by source, phases not measured by reason, the estimate and work.
  struct PhaseSums {
    std::map<std::string, double> joules;          // by source (reliable phases only)
    std::map<std::string, uint64_t> unmeasured;    // "unavailable" or the counter issue
    double estimate_joules = 0, weight_bytes = 0, kv_bytes = 0, flops = 0;
    uint64_t tokens = 0;
  };
  std::array<PhaseSums, 2> phases_;
  std::string estimate_model_;
};

// Resident memory of this process in bytes (/proc/self/statm), 0 when unknown.
uint64_t resident_bytes();

}  // namespace frugal::server
