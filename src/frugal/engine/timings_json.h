// One JSON schema for phase timings, written by `frugal run --json`, the server's responses and its
// request log: Timings' fields first, then the server-only ones. Field names are frozen.
#pragma once

#include <nlohmann/json.hpp>

#include "frugal/engine/request.h"

namespace frugal {

template <typename Json = nlohmann::ordered_json>
Json timings_json(const Timings& t) {
  Json j;
  j["prefill_ms"] = t.prefill_ms;
  j["decode_ms"] = t.decode_ms;
  j["prefill_tokens"] = t.prefill_tokens;
  j["decode_tokens"] = t.decode_tokens;
  j["prefill_tok_s"] = t.prefill_tok_s();
  j["decode_tok_s"] = t.decode_tok_s();
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

}  // namespace frugal
