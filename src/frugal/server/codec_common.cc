#include <cmath>
#include <limits>

#include "frugal/engine/json_constraint.h"
#include "frugal/kv/policies/policy.h"
#include "frugal/server/codec.h"

namespace frugal::server {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse(const json& data) { return "data: " + dump(data) + "\n\n"; }

std::string sse(const std::string& event, const json& data) {
  return "event: " + event + "\ndata: " + dump(data) + "\n\n";
}

std::optional<ApiError> read_sampling(FieldReader& r, GenSpec& spec, double max_temperature) {
  SamplingParams& s = spec.options.sampling;
  if (auto v = r.number("temperature", 0.0, max_temperature)) s.temperature = static_cast<float>(*v);
  if (auto v = r.number("top_p", 0.0, 1.0)) {
    if (*v <= 0.0) return bad_request("'top_p' must be in (0, 1]", "top_p");
    s.top_p = static_cast<float>(*v);
  }
  if (auto v = r.integer("top_k", 0, std::numeric_limits<int32_t>::max())) s.top_k = static_cast<int32_t>(*v);
  if (auto v = r.number("min_p", 0.0, 1.0)) s.min_p = static_cast<float>(*v);
  if (auto v = r.number("presence_penalty", -2.0, 2.0)) s.presence_penalty = static_cast<float>(*v);
  if (auto v = r.number("frequency_penalty", -2.0, 2.0)) s.frequency_penalty = static_cast<float>(*v);
  if (auto v = r.number("repeat_penalty", 0.0, 10.0)) {
    if (*v <= 0.0) return bad_request("'repeat_penalty' must be > 0", "repeat_penalty");
    s.repeat_penalty = static_cast<float>(*v);
  }
  if (auto v = r.integer("repeat_last_n", -1, 1 << 20)) s.repeat_last_n = static_cast<int32_t>(*v);
  if (auto v = r.integer("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max())) {
    spec.seed = static_cast<uint64_t>(*v);
  }
  if (!r.ok()) return r.err;
  return std::nullopt;
}

std::optional<ApiError> read_kv_options(FieldReader& r, GenSpec& spec) {
  if (auto v = r.string("kv_policy")) {
    if (!make_kv_policy(*v).ok()) {
      std::string known;
      for (const auto& n : kv_policy_names()) known += (known.empty() ? "" : ", ") + n;
      return bad_request(fmt::format("'kv_policy' '{}' is not one of {}", *v, known), "kv_policy");
    }
    spec.kv_policy = *v;
  }
  if (auto v = r.number("kv_budget", 0.0, static_cast<double>(std::numeric_limits<int32_t>::max()))) {
    if (!(*v > 0) || (*v >= 1 && *v != std::floor(*v))) {
      return bad_request("'kv_budget' must be a token count (>= 1) or a fraction in (0, 1)", "kv_budget");
    }
    spec.kv_budget = *v;
  }
  if (!r.ok()) return r.err;
  return std::nullopt;
}

std::optional<ApiError> read_speculative(FieldReader& r, GenSpec& spec) {
  if (auto v = r.boolean("speculative")) spec.options.speculative = *v;
  if (!r.ok()) return r.err;
  return std::nullopt;
}

namespace {
std::optional<ApiError> compile_schema(const json& schema, GenSpec& spec, const char* param) {
  auto compiled = JsonSchema::compile(schema);
  if (!compiled.ok()) return bad_request("invalid JSON schema: " + compiled.status().message(), param);
  spec.options.json_schema = *compiled;
  return std::nullopt;
}
}  // namespace

std::optional<ApiError> read_response_format(const json& rf, GenSpec& spec) {
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string()) {
    return bad_request("'response_format' must be an object with a string 'type'", "response_format");
  }
  const std::string type = rf["type"].get<std::string>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    // llama.cpp also accepts a schema here.
    if (rf.contains("schema")) return compile_schema(rf["schema"], spec, "response_format");
    spec.options.json_schema = JsonSchema::any_json_object();
    return std::nullopt;
  }
  if (type == "json_schema") {
    if (!rf.contains("json_schema") || !rf["json_schema"].is_object()) {
      return bad_request("response_format.json_schema must be an object", "response_format");
    }
    const json& js = rf["json_schema"];
    if (!js.contains("schema")) return bad_request("response_format.json_schema.schema is missing", "response_format");
    return compile_schema(js["schema"], spec, "response_format");
  }
  return bad_request(fmt::format("response_format.type '{}' is not one of text, json_object, json_schema", type),
                     "response_format");
}

std::optional<ApiError> read_ollama_format(const json& format, GenSpec& spec) {
  if (format.is_string()) {
    if (format.get<std::string>() == "json") {
      spec.options.json_schema = JsonSchema::any_json_object();
      return std::nullopt;
    }
    if (format.get<std::string>().empty()) return std::nullopt;
    return bad_request(fmt::format("format '{}' is not \"json\" or a JSON schema", format.get<std::string>()));
  }
  if (format.is_object()) return compile_schema(format, spec, "format");
  return bad_request("format must be \"json\" or a JSON schema object");
}

std::optional<ApiError> check_model(const ServedModel& m, const std::optional<std::string>& name, ApiKind api,
                                    bool required) {
  if (!name) {
    if (required) return bad_request("'model' is required", "model");
    return std::nullopt;
  }
  if (m.matches(*name)) return std::nullopt;
  if (api == ApiKind::kOllama) return not_found(fmt::format("model '{}' not found", *name));
  return not_found(fmt::format("The model '{}' does not exist; this server serves '{}'", *name, m.id()),
                   "model_not_found");
}

}  // namespace frugal::server
