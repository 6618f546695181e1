#include "frugal/server/api.h"

#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <random>
#include <set>

#include <fmt/ranges.h>

namespace frugal::server {

ApiError bad_request(std::string message, std::string param) {
  return {400, "invalid_request_error", std::move(message), std::move(param), {}};
}
ApiError not_found(std::string message, std::string code) {
  return {404, "not_found_error", std::move(message), {}, std::move(code)};
}
ApiError unauthorized(std::string message) { return {401, "authentication_error", std::move(message), {}, {}}; }
ApiError overloaded(std::string message) { return {503, "overloaded_error", std::move(message), {}, {}}; }
ApiError server_error(std::string message) { return {500, "api_error", std::move(message), {}, {}}; }

ApiError from_status(const Status& st) {
  switch (st.code()) {
    case ErrorCode::kInvalidArgument: return bad_request(st.message());
    // What this server cannot do for the request (e.g. a KV policy its backend lacks): the
    // request's to change, so a 4xx in the API's shape, not a server fault.
    case ErrorCode::kNotSupported: return bad_request(st.message());
    case ErrorCode::kOverBudget: return overloaded(st.message());
    case ErrorCode::kNotFound: return not_found(st.message());
    default: return server_error(st.message());
  }
}

json error_json(ApiKind api, const ApiError& e) {
  switch (api) {
    case ApiKind::kOpenAI: {
      // OpenAI names types per status; not_found and overload map onto its own words.
      std::string type = e.type;
      if (e.status == 404) type = "invalid_request_error";
      if (e.status >= 500) type = "server_error";
      json err = {{"message", e.message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
      if (!e.param.empty()) err["param"] = e.param;
      if (!e.code.empty()) err["code"] = e.code;
      return json{{"error", err}};
    }
    case ApiKind::kAnthropic: {
      std::string type = e.type;
      if (e.status == 413) type = "request_too_large";
      if (e.status == 503) type = "overloaded_error";
      if (e.status == 500) type = "api_error";
      return json{{"type", "error"}, {"error", {{"type", type}, {"message", e.message}}}};
    }
    case ApiKind::kOllama: return json{{"error", e.message}};
  }
  return json{{"error", e.message}};
}

ApiKind api_for_path(const std::string& path) {
  if (path.rfind("/v1/messages", 0) == 0) return ApiKind::kAnthropic;
  if (path.rfind("/api/", 0) == 0) return ApiKind::kOllama;
  return ApiKind::kOpenAI;
}

// ---------------------------------------------------------------------------------------------

namespace {
const json* present(const json& body, const char* key) {
  if (!body.is_object()) return nullptr;
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}
}  // namespace

std::optional<int64_t> FieldReader::integer(const char* key, int64_t min, int64_t max) {
  const json* v = present(body, key);
  if (!v || err) return std::nullopt;
  int64_t x = 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      err = bad_request(fmt::format("'{}' = {} is out of range [{}, {}]", key, v->dump(), min, max), key);
      return std::nullopt;
    }
    x = v->get<int64_t>();
  } else if (v->is_number_float() && v->get<double>() == std::trunc(v->get<double>())) {
    // 5.0 is an integer in JSON. The range is checked before converting: a double past int64's
    // range (1e30, or a literal too long for uint64 that the parser kept as a double) has no
    // int64 value, and the conversion would be undefined.
    const double d = v->get<double>();
    if (!(d >= -0x1p63 && d < 0x1p63)) {
      err = bad_request(fmt::format("'{}' = {} is out of range [{}, {}]", key, v->dump(), min, max), key);
      return std::nullopt;
    }
    x = static_cast<int64_t>(d);
  } else {
    err = bad_request(fmt::format("'{}' must be an integer, not {}", key, v->dump()), key);
    return std::nullopt;
  }
  if (x < min || x > max) {
    err = bad_request(fmt::format("'{}' = {} is out of range [{}, {}]", key, x, min, max), key);
    return std::nullopt;
  }
  return x;
}

std::optional<double> FieldReader::number(const char* key, double min, double max) {
  const json* v = present(body, key);
  if (!v || err) return std::nullopt;
  if (!v->is_number()) {
    err = bad_request(fmt::format("'{}' must be a number, not {}", key, v->dump()), key);
    return std::nullopt;
  }
  const double x = v->get<double>();
  if (!(x >= min && x <= max)) {
    err = bad_request(fmt::format("'{}' = {} is out of range [{}, {}]", key, x, min, max), key);
    return std::nullopt;
  }
  return x;
}

std::optional<bool> FieldReader::boolean(const char* key) {
  const json* v = present(body, key);
  if (!v || err) return std::nullopt;
  if (!v->is_boolean()) {
    err = bad_request(fmt::format("'{}' must be true or false, not {}", key, v->dump()), key);
    return std::nullopt;
  }
  return v->get<bool>();
}

std::optional<std::string> FieldReader::string(const char* key) {
  const json* v = present(body, key);
  if (!v || err) return std::nullopt;
  if (!v->is_string()) {
    err = bad_request(fmt::format("'{}' must be a string, not {}", key, v->dump()), key);
    return std::nullopt;
  }
  return v->get<std::string>();
}

const json* FieldReader::object(const char* key) {
  const json* v = present(body, key);
  if (!v || err) return nullptr;
  if (!v->is_object()) {
    err = bad_request(fmt::format("'{}' must be an object, not {}", key, v->dump()), key);
    return nullptr;
  }
  return v;
}

const json* FieldReader::array(const char* key) {
  const json* v = present(body, key);
  if (!v || err) return nullptr;
  if (!v->is_array()) {
    err = bad_request(fmt::format("'{}' must be a list, not {}", key, v->dump()), key);
    return nullptr;
  }
  return v;
}

std::optional<std::vector<std::string>> FieldReader::strings(const char* key, size_t max_items) {
  const json* v = present(body, key);
  if (!v || err) return std::nullopt;
  std::vector<std::string> out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (const auto& e : *v) {
      if (!e.is_string()) {
        err = bad_request(fmt::format("'{}' must hold strings, not {}", key, e.dump()), key);
        return std::nullopt;
      }
      out.push_back(e.get<std::string>());
    }
  } else {
    err = bad_request(fmt::format("'{}' must be a string or a list of strings, not {}", key, v->dump()), key);
    return std::nullopt;
  }
  if (out.size() > max_items) {
    err = bad_request(fmt::format("'{}' holds {} strings; at most {} are allowed", key, out.size(), max_items), key);
    return std::nullopt;
  }
  for (const auto& s : out) {
    if (s.empty()) {
      err = bad_request(fmt::format("'{}' must not contain an empty string", key), key);
      return std::nullopt;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------

ServedModel::ServedModel(const Model& model, const Tokenizer& tok, std::string id, std::string path, int32_t n_ctx)
    : model_(model), tok_(tok), id_(std::move(id)), path_(std::move(path)), n_ctx_(n_ctx) {
  if (tok.chat_template().empty()) {
    template_ = ChatTemplateKind::kChatml;
    template_desc_ = "chatml (the model has no chat template)";
  } else if (auto kind = detect_chat_template(tok.chat_template()); kind.ok()) {
    template_ = *kind;
    template_desc_ = chat_template_name(*kind);
  } else {
    template_ = ChatTemplateKind::kChatml;
    template_desc_ = "chatml (the model's chat template is not one frugal renders)";
  }
}

bool ServedModel::matches(const std::string& name) const {
  namespace fs = std::filesystem;
  const fs::path p(path_);
  std::string base = name;
  if (const auto colon = base.rfind(":latest"); colon != std::string::npos && colon + 7 == base.size()) {
    base.resize(colon);
  }
  return base == id_ || base == path_ || base == p.filename().string() || base == p.stem().string();
}

Result<std::string> ServedModel::render_chat(const std::vector<ChatTurn>& turns) const {
  std::vector<ChatMessage> msgs;
  msgs.reserve(turns.size());
  for (const auto& t : turns) msgs.push_back({t.role, t.content});
  const std::string bos = tok_.bos() >= 0 ? tok_.piece(tok_.bos(), true) : "";
  const std::string eos = tok_.eos() >= 0 ? tok_.piece(tok_.eos(), true) : "";
  return apply_chat_template(template_, msgs, true, bos, eos);
}

Result<std::vector<TokenId>> ServedModel::chat_prompt(const std::vector<ChatTurn>& turns) const {
  FRUGAL_ASSIGN_OR_RETURN(std::string text, render_chat(turns));
  TokenizeOptions to;
  to.parse_special = true;
  to.add_special = false;
  return tok_.encode(text, to);
}

Result<std::vector<TokenId>> ServedModel::text_prompt(const std::string& text) const {
  return tok_.encode(text, TokenizeOptions{});
}

Usage usage_of(const std::vector<ChoiceResult>& choices) {
  Usage u;
  std::set<int> seen;
  for (const auto& c : choices) {
    if (seen.insert(c.prompt_index).second) {
      u.prompt_tokens += c.finished.prompt_tokens;
      u.cached_tokens += c.finished.timings.cached_tokens;
    }
    u.completion_tokens += c.finished.generated_tokens;
  }
  return u;
}

std::optional<ApiError> content_text(const json& content, const std::string& where, std::string& out) {
  if (content.is_string()) {
    out = content.get<std::string>();
    return std::nullopt;
  }
  if (content.is_null()) {
    out.clear();
    return std::nullopt;
  }
  if (!content.is_array()) {
    return bad_request(fmt::format("{}: content must be a string or a list of text parts, not {}", where,
                                   content.type_name()));
  }
  out.clear();
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      return bad_request(fmt::format("{}: content[{}] must be an object with a 'type'", where, i));
    }
    const std::string type = part["type"].get<std::string>();
    if (type != "text" && type != "input_text") {
      return bad_request(fmt::format("{}: content[{}] has type '{}'; only text parts are supported", where, i, type));
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      return bad_request(fmt::format("{}: content[{}].text must be a string", where, i));
    }
    out += part["text"].get<std::string>();
  }
  return std::nullopt;
}

std::optional<ApiError> read_turns(const json& messages, const std::vector<std::string>& roles,
                                   std::vector<ChatTurn>& out) {
  if (!messages.is_array()) return bad_request("'messages' must be a list", "messages");
  if (messages.empty()) return bad_request("'messages' must not be empty", "messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) return bad_request(where + " must be an object", "messages");
    if (!m.contains("role") || !m["role"].is_string()) return bad_request(where + ".role must be a string", "messages");
    std::string role = m["role"].get<std::string>();
    if (std::find(roles.begin(), roles.end(), role) == roles.end()) {
      return bad_request(fmt::format("{}.role '{}' is not one of: {}", where, role, fmt::join(roles, ", ")),
                         "messages");
    }
    if (role == "developer") role = "system";
    if (role == "tool") role = "user";
    ChatTurn t{role, {}};
    if (m.contains("content")) {
      if (auto e = content_text(m["content"], where, t.content)) return e;
    }
    out.push_back(std::move(t));
  }
  return std::nullopt;
}

std::string random_id(const std::string& prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static const char* kHex = "0123456789abcdef";
  std::string s = prefix;
  for (int i = 0; i < 24; ++i) s.push_back(kHex[rng() & 15]);
  return s;
}

std::string rfc3339_now() {
  const auto now = std::chrono::system_clock::now();
  const auto secs = std::chrono::system_clock::to_time_t(now);
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count() % 1000000000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:09d}Z", buf, ns);
}

}  // namespace frugal::server
