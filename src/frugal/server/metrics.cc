#include "frugal/server/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>

#include <fmt/format.h>

namespace frugal::server {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help,
                       const std::string& labels) const {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, bounds_[i], cum);
  }
  cum += counts_.back();
  out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, cum);
  out += fmt::format("{}_sum{{{}}} {}\n", name, labels, sum_);
  out += fmt::format("{}_count{{{}}} {}\n", name, labels, count_);
}

namespace {
// vLLM's bucket boundaries (seconds, tokens).
std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
          80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> tpot_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> latency_buckets() {
  return {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
          960.0, 1920.0, 7680.0};
}
std::vector<double> token_buckets() {
  return {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000};
}

const char* vllm_reason(FinishReason r) {
  switch (r) {
    case FinishReason::kEos:
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength:
    case FinishReason::kContext: return "length";
    default: return "abort";
  }
}

void gauge(std::string& out, const std::string& name, const std::string& help, const std::string& labels, double v) {
  out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{}{{{}}} {}\n", name, help, name, name, labels, v);
}
void counter(std::string& out, const std::string& name, const std::string& help, const std::string& labels,
             uint64_t v) {
  out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{}{{{}}} {}\n", name, help, name, name, labels, v);
}
}  // namespace

Metrics::Metrics(std::string model_name)
    : model_(std::move(model_name)),
      ttft_(ttft_buckets()),
      tpot_(tpot_buckets()),
      itl_(tpot_buckets()),
      e2e_(latency_buckets()),
      queue_(latency_buckets()),
      prefill_(latency_buckets()),
      decode_(latency_buckets()),
      prompt_tokens_(token_buckets()),
      gen_tokens_(token_buckets()) {}

void Metrics::observe(const FinishedRequest& f) {
  std::lock_guard<std::mutex> lk(mu_);
  if (f.reason == FinishReason::kCancelled) ++cancelled_;
  if (f.reason == FinishReason::kError) ++refused_;
  ++finished_[vllm_reason(f.reason)];
  if (f.reason == FinishReason::kError) return;  // never ran: no latencies to record
  kv_rounds_ += static_cast<uint64_t>(f.kv.rounds);
  kv_round_s_ += f.kv.round_ms / 1e3;
  kv_stats_s_ += f.kv.stats_ms / 1e3;
  ++kv_policies_[f.kv_policy + "/" + kv_quant_name(f.kv_quant)];
  spec_passes_ += static_cast<uint64_t>(f.speculative.passes);
  spec_drafted_ += static_cast<uint64_t>(f.speculative.drafted);
  spec_accepted_ += static_cast<uint64_t>(f.speculative.accepted);
  const RequestTimings& t = f.timings;
  if (f.generated_tokens > 0) ttft_.observe(t.ttft_ms / 1e3);
  if (f.generated_tokens > 1) {
    tpot_.observe(t.tpot_ms / 1e3);
    itl_.observe(t.tpot_ms / 1e3);
  }
  e2e_.observe(t.total_ms / 1e3);
  queue_.observe(t.queue_ms / 1e3);
  prefill_.observe(t.prefill_ms / 1e3);
  decode_.observe(t.decode_ms / 1e3);
  prompt_tokens_.observe(static_cast<double>(f.prompt_tokens));
  gen_tokens_.observe(static_cast<double>(f.generated_tokens));
  const telemetry::PhaseRecord* recs[2] = {&t.prefill, &t.decode};
  const int64_t tokens[2] = {t.prefill_tokens, t.decode_tokens};
  for (int i = 0; i < 2; ++i) {
    const telemetry::PhaseRecord& r = *recs[i];
    PhaseSums& p = phases_[static_cast<size_t>(i)];
    if (r.energy.reliable()) {
      p.joules[telemetry::energy_source_name(r.energy.source)] += r.energy.joules;
    } else {
      ++p.unmeasured[r.energy.source == telemetry::EnergySource::kUnavailable
                         ? "unavailable"
                         : telemetry::counter_issue_name(r.energy.issue)];
    }
    if (t.cost != nullptr) {
      p.estimate_joules += telemetry::estimate_joules(r.work, *t.cost);
      estimate_model_ = t.cost->name;
    }
    p.weight_bytes += r.work.weight_bytes;
    p.kv_bytes += r.work.kv_bytes;
    p.flops += r.work.flops;
    p.tokens += static_cast<uint64_t>(std::max<int64_t>(tokens[i], 0));
  }
}

// The per-request record's phase fields summed (engine/timings_json.h): measured energy by source,
// phases with no measurement by reason, the estimate beside them under its own name, and the work.
void Metrics::render_phases(std::string& out, const std::string& l) const {
  static const char* kPhase[2] = {"prefill", "decode"};
  const auto family = [&](const char* name, const char* help, const char* type) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  family("frugal:energy_joules_total",
         "Measured energy of finished requests' phases (hardware counters: nvml or rapl), by phase and source.",
         "counter");
  for (int i = 0; i < 2; ++i) {
    for (const auto& [source, j] : phases_[static_cast<size_t>(i)].joules) {
      out += fmt::format("frugal:energy_joules_total{{{},phase=\"{}\",source=\"{}\"}} {}\n", l, kPhase[i], source, j);
    }
  }
  family("frugal:energy_unmeasured_phases_total",
         "Phases of finished requests with no measured energy: no counter (unavailable) or an unreliable interval.",
         "counter");
  for (int i = 0; i < 2; ++i) {
    for (const auto& [reason, n] : phases_[static_cast<size_t>(i)].unmeasured) {
      out += fmt::format("frugal:energy_unmeasured_phases_total{{{},phase=\"{}\",reason=\"{}\"}} {}\n", l, kPhase[i],
                         reason, n);
    }
  }
  const auto per_phase = [&](const char* name, const char* help, auto get) {
    family(name, help, "counter");
    for (int i = 0; i < 2; ++i) {
      out += fmt::format("{}{{{},phase=\"{}\"}} {}\n", name, l, kPhase[i], get(phases_[static_cast<size_t>(i)]));
    }
  };
  per_phase("frugal:energy_estimate_joules_total",
            "ESTIMATED energy (bytes x pJ/byte + FLOPs x pJ/FLOP), not a measurement; see docs/energy.md.",
            [](const PhaseSums& p) { return p.estimate_joules; });
  per_phase("frugal:weight_bytes_read_total", "Weight bytes read by finished requests' phases (their share of each pass).",
            [](const PhaseSums& p) { return p.weight_bytes; });
  per_phase("frugal:kv_bytes_read_total", "K and V bytes read by attention in finished requests' phases.",
            [](const PhaseSums& p) { return p.kv_bytes; });
  per_phase("frugal:flops_total", "Matrix and attention FLOPs of finished requests' phases.",
            [](const PhaseSums& p) { return p.flops; });
  per_phase("frugal:phase_tokens_total", "Tokens of finished requests' phases (prompt tokens run; decode steps).",
            [](const PhaseSums& p) { return p.tokens; });
}

void Metrics::count_http(int status) {
  std::lock_guard<std::mutex> lk(mu_);
  ++http_[status];
}

std::string Metrics::render(const EngineStats& s) const {
  const std::string l = fmt::format("model_name=\"{}\"", model_);
  std::string out;
  out.reserve(16384);
  gauge(out, "vllm:num_requests_running", "Number of requests in model execution batches.", l, s.running);
  gauge(out, "vllm:num_requests_waiting", "Number of requests waiting to be processed.", l, s.waiting);
  // With a page pool: the pages running sequences hold (cached prefixes can be dropped at any time,
  // so they count as free, as vLLM counts its cached blocks); a device cache: rows running.
  const double usage = s.kv_pages_total > 0
                           ? static_cast<double>(s.kv_pages_running) / static_cast<double>(s.kv_pages_total)
                       : s.kv_rows_total > 0 ? static_cast<double>(s.kv_rows_running) / s.kv_rows_total
                                             : 0.0;
  gauge(out, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", l, usage);
  counter(out, "vllm:prompt_tokens_total", "Number of prefill tokens processed.", l, s.prompt_tokens);
  counter(out, "vllm:generation_tokens_total", "Number of generation tokens processed.", l, s.generated_tokens);
  counter(out, "vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", l,
          s.prompt_tokens);
  counter(out, "vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", l,
          s.prefix_hit_tokens);
  std::lock_guard<std::mutex> lk(mu_);
  out += "# HELP vllm:request_success_total Count of successfully processed requests.\n"
         "# TYPE vllm:request_success_total counter\n";
  for (const char* reason : {"stop", "length", "abort"}) {
    auto it = finished_.find(reason);
    out += fmt::format("vllm:request_success_total{{{},finished_reason=\"{}\"}} {}\n", l, reason,
                       it == finished_.end() ? 0 : it->second);
  }
  ttft_.render(out, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", l);
  tpot_.render(out, "vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", l);
  itl_.render(out, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", l);
  e2e_.render(out, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", l);
  queue_.render(out, "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", l);
  prefill_.render(out, "vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", l);
  decode_.render(out, "vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", l);
  prompt_tokens_.render(out, "vllm:request_prompt_tokens", "Number of prefill tokens processed.", l);
  gen_tokens_.render(out, "vllm:request_generation_tokens", "Number of generation tokens processed.", l);
  counter(out, "frugal:requests_cancelled_total", "Requests ended because the client went away.", l, cancelled_);
  counter(out, "frugal:requests_refused_total", "Requests refused or failed after they were queued.", l, refused_);
  gauge(out, "frugal:kv_cache_reserved_bytes", "KV cache memory reserved at start-up.", l,
        static_cast<double>(s.kv_bytes));
  gauge(out, "frugal:kv_side_bytes",
        "Host memory the requests' KV policies hold beside the KV cache: recorded queries, round scratch, "
        "caches of their own (quantized or per-request kv-memory). With --kv-memory on the cpu backend the "
        "policies' part is paid from the pool (kv_pool_lent_pages); the caches of their own are outside it.",
        l, static_cast<double>(s.kv_side_bytes));
  gauge(out, "frugal:kv_side_peak_bytes", "The most kv_side_bytes seen after a step.", l,
        static_cast<double>(s.kv_side_bytes_peak));
  gauge(out, "frugal:kv_cache_cached_rows", "KV rows held by all slots, running and cached prefixes.", l,
        static_cast<double>(s.kv_rows_cached));
  gauge(out, "frugal:num_sequence_slots", "Sequences that can run at once.", l, s.n_slots);
  counter(out, "vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", l, s.preemptions);
  gauge(out, "frugal:kv_pool_pages", "Pages of the KV page pool (0: the cache is on the device).", l,
        static_cast<double>(s.kv_pages_total));
  gauge(out, "frugal:kv_pool_free_pages", "Pages of the KV page pool nobody holds.", l,
        static_cast<double>(s.kv_pages_free));
  gauge(out, "frugal:kv_pool_lent_pages",
        "Pages of the KV page pool lent to the KV policies' recorded queries and round scratch (with "
        "--kv-memory on the cpu backend they are paid from the pool; counted as held, not free).",
        l, static_cast<double>(s.kv_pages_lent));
  gauge(out, "frugal:kv_pool_lent_peak_pages", "The most kv_pool_lent_pages seen after a step.", l,
        static_cast<double>(s.kv_pages_lent_peak));
  gauge(out, "frugal:kv_pool_shared_pages",
        "Pages of the KV page pool saved by sharing prompt prefixes (references beyond one per used page).", l,
        static_cast<double>(s.kv_pages_shared));
  counter(out, "frugal:engine_steps_total", "Forward steps run by the engine loop.", l, s.steps);
  counter(out, "frugal:kv_eviction_rounds_total", "KV eviction rounds of finished requests.", l, kv_rounds_);
  out += fmt::format("# HELP frugal:kv_eviction_seconds_total Time spent in those rounds.\n"
                     "# TYPE frugal:kv_eviction_seconds_total counter\nfrugal:kv_eviction_seconds_total{{{}}} {}\n",
                     l, kv_round_s_);
  out += fmt::format("# HELP frugal:kv_eviction_stats_seconds_total Of that time, the scored policies' attention "
                     "statistics (on the device when the rows are there).\n"
                     "# TYPE frugal:kv_eviction_stats_seconds_total counter\n"
                     "frugal:kv_eviction_stats_seconds_total{{{}}} {}\n",
                     l, kv_stats_s_);
  out += "# HELP frugal:kv_policy_requests_total Finished requests by KV policy and quantization.\n"
         "# TYPE frugal:kv_policy_requests_total counter\n";
  for (const auto& [key, n] : kv_policies_) {
    const size_t slash = key.find('/');
    out += fmt::format("frugal:kv_policy_requests_total{{{},policy=\"{}\",quant=\"{}\"}} {}\n", l,
                       key.substr(0, slash), key.substr(slash + 1), n);
  }
  counter(out, "frugal:spec_verify_passes_total", "Speculative verify passes of finished requests.", l, spec_passes_);
  counter(out, "frugal:spec_draft_tokens_total", "Draft tokens proposed to those passes.", l, spec_drafted_);
  counter(out, "frugal:spec_accepted_tokens_total", "Of those, tokens the target kept.", l, spec_accepted_);
  render_phases(out, l);
  gauge(out, "process_resident_memory_bytes", "Resident memory size in bytes.", "",
        static_cast<double>(resident_bytes()));
  out += "# HELP frugal:http_responses_total HTTP responses by status code.\n"
         "# TYPE frugal:http_responses_total counter\n";
  for (const auto& [status, n] : http_) {
    out += fmt::format("frugal:http_responses_total{{code=\"{}\"}} {}\n", status, n);
  }
  return out;
}

uint64_t resident_bytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  if (!(in >> size >> resident)) return 0;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace frugal::server
