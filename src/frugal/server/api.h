// What the three HTTP APIs (OpenAI, Anthropic, Ollama) share: errors in each API's own shape,
// typed reads of request fields, the model as the APIs describe it, and a generation request
// decoded from a body (GenSpec) that the HTTP layer hands to the engine.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "frugal/engine/engine.h"
#include "frugal/tokenize/tokenizer.h"

namespace frugal::server {

using json = nlohmann::ordered_json;

enum class ApiKind { kOpenAI, kAnthropic, kOllama };

// An error as the client sees it. `type` is the API's error type ("invalid_request_error", ...).
struct ApiError {
  int status = 400;
  std::string type;
  std::string message;
  std::string param;  // OpenAI: the offending field, when known
  std::string code;   // OpenAI: e.g. "model_not_found"
};

ApiError bad_request(std::string message, std::string param = {});
ApiError not_found(std::string message, std::string code = {});
ApiError unauthorized(std::string message);
ApiError overloaded(std::string message);
ApiError server_error(std::string message);
// From an engine Status: kInvalidArgument -> 400, kOverBudget -> 503, kNotFound -> 404, else 500.
ApiError from_status(const Status& st);

// The error body in the API's own shape:
//   OpenAI    {"error": {"message", "type", "param", "code"}}
//   Anthropic {"type": "error", "error": {"type", "message"}}
//   Ollama    {"error": "message"}
json error_json(ApiKind api, const ApiError& e);
// Which API a path belongs to (for errors raised before routing: auth, size limits, 404).
ApiKind api_for_path(const std::string& path);

// Typed field access: absent (or null) fields give nullopt; a present field of the wrong type
// gives an ApiError naming it ("'max_tokens' must be an integer, not string").
struct FieldReader {
  const json& body;
  std::optional<ApiError> err;

  std::optional<int64_t> integer(const char* key, int64_t min, int64_t max);
  std::optional<double> number(const char* key, double min, double max);
  std::optional<bool> boolean(const char* key);
  std::optional<std::string> string(const char* key);
  const json* object(const char* key);
  const json* array(const char* key);
  // A string or a list of strings (OpenAI "stop"), at most `max_items`, none empty.
  std::optional<std::vector<std::string>> strings(const char* key, size_t max_items);
  bool ok() const { return !err.has_value(); }
};

struct ChatTurn {
  std::string role;
  std::string content;
};

// The loaded model as the APIs name and describe it, and prompt construction.
class ServedModel {
 public:
  ServedModel(const Model& model, const Tokenizer& tok, std::string id, std::string path, int32_t n_ctx);

  const std::string& id() const { return id_; }
  const std::string& path() const { return path_; }
  const Tokenizer& tokenizer() const { return tok_; }
  const Model& model() const { return model_; }
  int32_t n_ctx() const { return n_ctx_; }
  // "chatml (fallback: the model has no chat template)" etc.
  const std::string& template_description() const { return template_desc_; }
  // True for the names a request may use for this model: the id, the file name, its stem, the
  // path, and Ollama's "name:latest" form.
  bool matches(const std::string& name) const;

  // The conversation rendered with the model's chat template (generation prompt appended), then
  // tokenized as `frugal run --chat` does (special tokens parsed, no extra BOS).
  Result<std::vector<TokenId>> chat_prompt(const std::vector<ChatTurn>& turns) const;
  Result<std::string> render_chat(const std::vector<ChatTurn>& turns) const;
  // Plain text tokenized as `frugal run -p` does (BOS added as the vocabulary says).
  Result<std::vector<TokenId>> text_prompt(const std::string& text) const;

 private:
  const Model& model_;
  const Tokenizer& tok_;
  std::string id_;
  std::string path_;
  int32_t n_ctx_;
  ChatTemplateKind template_ = ChatTemplateKind::kChatml;
  std::string template_desc_;
};

// A generation request decoded from an API body.
struct GenSpec {
  std::vector<std::vector<TokenId>> prompts;  // one per prompt (OpenAI completions accept several)
  int n = 1;                                  // choices per prompt
  RequestOptions options;                     // everything but the prompt
  std::optional<uint64_t> seed;               // choice i of a seeded request uses seed + i
  bool stream = false;
  bool include_usage = false;                 // OpenAI stream_options.include_usage
  std::string model;                          // the name the client used
  // Extension fields of every generation API: this request's KV eviction policy and budget, over
  // the server's defaults (serve --kv-policy, --kv-budget); empty: the default.
  std::optional<std::string> kv_policy;
  std::optional<double> kv_budget;
};

// The result of one choice once it is done.
struct ChoiceResult {
  std::string text;
  std::vector<TokenOutput> tokens;
  FinishedRequest finished;
  int prompt_index = 0;
};

// Usage totals over the choices: prompt tokens counted once per prompt.
struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};
Usage usage_of(const std::vector<ChoiceResult>& choices);

// The chat messages of an OpenAI / Anthropic / Ollama body: `content` as a string or a list of
// text parts. Roles are checked against `roles`.
std::optional<ApiError> read_turns(const json& messages, const std::vector<std::string>& roles,
                                   std::vector<ChatTurn>& out);
// Text of a content value: a string, or a list of {"type": "text", "text": ...} blocks.
std::optional<ApiError> content_text(const json& content, const std::string& where, std::string& out);

// A random id with a prefix ("chatcmpl-", "msg_").
std::string random_id(const std::string& prefix);
// RFC 3339 UTC time with nanoseconds, as Ollama writes created_at.
std::string rfc3339_now();

}  // namespace frugal::server
