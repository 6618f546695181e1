// One JSON schema for the per-request record, written by `frugal run --json`, `frugal bench --json`,
// `frugal eval --out`, the server's responses and its request log (`serve --log-requests`): Timings'
// fields first, then the server-only ones. Field names are frozen; docs/record.schema.json is the
// schema and tests/cli/record_schema_test.cc checks a record from each writer against it.
//
// Per phase ("phases": {"prefill", "decode"}):
//   energy    measured joules: "source" (nvml | rapl | unavailable), "joules" (null when
//             unavailable or unreliable), "reliable", "issue" (a wrapped or reset counter, a
//             failed read), "intervals" (counter intervals summed), "joules_per_token"
//   estimate  the separate estimate (telemetry/estimate.h): "model", "joules", "joules_per_token"
//   work      "weight_bytes_read", "kv_bytes_read", "flops"
//   hardware  sampled telemetry: "samples" and means/maxima, null where nothing was sampled
#pragma once

#include <cmath>

#include <nlohmann/json.hpp>

#include "frugal/engine/request.h"

namespace frugal {

namespace timings_detail {

template <typename Json>
Json number_or_null(double v) {
  return std::isfinite(v) ? Json(v) : Json(nullptr);
}

template <typename Json>
Json phase_json(const telemetry::PhaseRecord& p, int64_t tokens, const telemetry::CostModel* cost) {
  Json e;
  e["source"] = telemetry::energy_source_name(p.energy.source);
  const bool measured = p.energy.reliable();
  e["joules"] = measured ? Json(p.energy.joules) : Json(nullptr);
  e["reliable"] = measured;
  e["issue"] = telemetry::counter_issue_name(p.energy.issue);
  e["intervals"] = p.energy.intervals;
  e["joules_per_token"] = measured && tokens > 0 ? Json(p.energy.joules / static_cast<double>(tokens)) : Json(nullptr);
  Json est;
  if (cost != nullptr) {
    const double j = telemetry::estimate_joules(p.work, *cost);
    est["model"] = cost->name;
    est["joules"] = j;
    est["joules_per_token"] = tokens > 0 ? Json(j / static_cast<double>(tokens)) : Json(nullptr);
  } else {
    est["model"] = "none";
    est["joules"] = nullptr;
    est["joules_per_token"] = nullptr;
  }
  Json w;
  w["weight_bytes_read"] = p.work.weight_bytes;
  w["kv_bytes_read"] = p.work.kv_bytes;
  w["flops"] = p.work.flops;
  const telemetry::PhaseSamples& s = p.hw;
  Json h;
  h["samples"] = s.n;
  h["gpu_util_mean"] = number_or_null<Json>(s.gpu_util_mean);
  h["gpu_util_max"] = number_or_null<Json>(s.gpu_util_max);
  h["gpu_sm_clock_mhz_mean"] = number_or_null<Json>(s.gpu_sm_clock_mhz_mean);
  h["gpu_memory_used_max_bytes"] = number_or_null<Json>(s.gpu_memory_used_max_bytes);
  h["gpu_power_w_mean"] = number_or_null<Json>(s.gpu_power_w_mean);
  h["gpu_power_w_max"] = number_or_null<Json>(s.gpu_power_w_max);
  h["cpu_util_mean"] = number_or_null<Json>(s.cpu_util_mean);
  h["rss_max_bytes"] = number_or_null<Json>(s.rss_max_bytes);
  Json out;
  out["energy"] = std::move(e);
  out["estimate"] = std::move(est);
  out["work"] = std::move(w);
  out["hardware"] = std::move(h);
  return out;
}

}  // namespace timings_detail

template <typename Json = nlohmann::ordered_json>
Json timings_json(const Timings& t) {
  Json j;
  j["prefill_ms"] = t.prefill_ms;
  j["decode_ms"] = t.decode_ms;
  j["prefill_tokens"] = t.prefill_tokens;
  j["decode_tokens"] = t.decode_tokens;
  j["prefill_tok_s"] = t.prefill_tok_s();
  j["decode_tok_s"] = t.decode_tok_s();
  j["kv_reserved_bytes"] = t.kv_reserved_bytes;
  j["kv_peak_bytes"] = t.kv_peak_bytes;
  j["energy_meter"] = t.energy_meter.empty() ? std::string("unavailable: not measured") : t.energy_meter;
  if (!t.prefill_sparse_method.empty() && t.prefill_sparse_method != "none") {
    Json ps;
    ps["method"] = t.prefill_sparse_method;
    ps["sparse_calls"] = t.prefill_sparse.sparse_calls;
    ps["dense_fallback_calls"] = t.prefill_sparse.dense_calls;
    ps["short_prompt_dense"] = t.prefill_sparse_short_prompt;
    ps["blocks_kept"] = t.prefill_sparse.blocks_kept;
    ps["blocks_causal"] = t.prefill_sparse.blocks_causal;
    ps["kept_fraction"] = t.prefill_sparse.kept_fraction();
    ps["select_ms"] = t.prefill_sparse.select_ms;
    ps["heads_vertical_slash"] = t.prefill_sparse.heads_vertical_slash;
    ps["heads_query_aware"] = t.prefill_sparse.heads_query_aware;
    ps["route_ms"] = t.prefill_sparse.route_ms;
    j["prefill_sparse"] = std::move(ps);
  }
  if (t.tilemix_int8 > 0) {
    Json tm;
    tm["int8_fraction"] = t.tilemix_int8;
    tm["routed_calls"] = t.tilemix.routed_calls;
    tm["float_fallback_calls"] = t.tilemix.float_calls;
    tm["short_prompt_float"] = t.tilemix_short_prompt;
    tm["tiles_int8"] = t.tilemix.tiles_int8;
    tm["tiles_total"] = t.tilemix.tiles_total;
    tm["route_ms"] = t.tilemix.route_ms;
    j["tilemix"] = std::move(tm);
  }
  Json phases;
  phases["prefill"] = timings_detail::phase_json<Json>(t.prefill, t.prefill_tokens, t.cost);
  phases["decode"] = timings_detail::phase_json<Json>(t.decode, t.decode_tokens, t.cost);
  j["phases"] = std::move(phases);
  return j;
}

template <typename Json = nlohmann::ordered_json>
Json timings_json(const RequestTimings& t) {
  Json j = timings_json<Json>(static_cast<const Timings&>(t));
  j["queue_ms"] = t.queue_ms;
  j["ttft_ms"] = t.ttft_ms;
  j["tpot_ms"] = t.tpot_ms;
  j["total_ms"] = t.total_ms;
  j["cached_tokens"] = t.cached_tokens;
  return j;
}

// The request timings of a generation run alone (run, eval, bench): no queue, the first token
// arrives when the prefill ends, and every later token costs one decode step.
inline RequestTimings local_request_timings(const Timings& t) {
  RequestTimings r;
  static_cast<Timings&>(r) = t;
  r.ttft_ms = t.prefill_ms;
  r.tpot_ms = t.decode_tokens > 0 ? t.decode_ms / static_cast<double>(t.decode_tokens) : 0;
  r.total_ms = t.prefill_ms + t.decode_ms;
  return r;
}

}  // namespace frugal
