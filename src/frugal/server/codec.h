// API codecs: each generation endpoint (OpenAI chat and completions, Anthropic messages, Ollama
// generate and chat) is one class that decodes a request body into a GenSpec and encodes engine
// output as that API's response, stream events and errors. No HTTP here: the codecs are pure
// functions of their inputs (plus the request's id and creation time), so tests drive them
// directly.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "frugal/server/api.h"

namespace frugal::server {

class GenerationCodec {
 public:
  virtual ~GenerationCodec() = default;
  virtual ApiKind api() const = 0;
  // Fills `spec` from the body; an ApiError (4xx) for a bad request.
  virtual std::optional<ApiError> parse(const json& body, GenSpec& spec) = 0;

  virtual const char* stream_content_type() const { return "text/event-stream"; }
  // Written once before any output.
  virtual std::string stream_begin(const GenSpec& spec) = 0;
  // Output of choice `choice` since the previous update (possibly its end).
  virtual std::string stream_update(const GenSpec& spec, int choice, const RequestUpdate& u) = 0;
  // Written once after every choice ended.
  virtual std::string stream_end(const GenSpec& spec, const std::vector<ChoiceResult>& choices) = 0;
  // An error after the stream began (the HTTP status is already 200).
  virtual std::string stream_error(const ApiError& e) = 0;
  // Sent when nothing else was for a while, so a vanished client is noticed; empty: none.
  virtual std::string keepalive() const { return ": ping\n\n"; }
  // The whole response of a request that did not stream.
  virtual json response(const GenSpec& spec, const std::vector<ChoiceResult>& choices) = 0;
};

// `created` is the response's Unix time (seconds).
std::unique_ptr<GenerationCodec> make_openai_chat_codec(const ServedModel& m, int64_t created);
std::unique_ptr<GenerationCodec> make_openai_completion_codec(const ServedModel& m, int64_t created);
std::unique_ptr<GenerationCodec> make_anthropic_codec(const ServedModel& m);
std::unique_ptr<GenerationCodec> make_ollama_generate_codec(const ServedModel& m);
std::unique_ptr<GenerationCodec> make_ollama_chat_codec(const ServedModel& m);

// JSON text that never throws on invalid UTF-8 (a token piece may be half a character).
std::string dump(const json& j);
std::string sse(const json& data);                          // "data: {...}\n\n"
std::string sse(const std::string& event, const json& data);  // "event: NAME\ndata: {...}\n\n"

// Shared decoding helpers.
// The sampling fields every API has under the same names (temperature, top_p, top_k, min_p, seed,
// presence_penalty, frequency_penalty, repeat_penalty, repeat_last_n).
std::optional<ApiError> read_sampling(FieldReader& r, GenSpec& spec, double max_temperature);
// The extension fields kv_policy (a policy name) and kv_budget (tokens per layer and KV head, or a
// fraction in (0, 1) of prompt + max tokens), at the top level of every API's body. Whether the
// budget suits the policy and the buffer is the engine's check (a 400 from submit).
std::optional<ApiError> read_kv_options(FieldReader& r, GenSpec& spec);
// The extension field speculative (a boolean, top level of every API's body): false decodes this
// request plainly on a server started with --spec; true requires speculation (the engine refuses
// the request when it cannot have it: no drafter, a JSON schema, an evicting or quantized cache).
// Absent: the server's default, plain where the request cannot have it.
std::optional<ApiError> read_speculative(FieldReader& r, GenSpec& spec);
// OpenAI response_format / Ollama format: a schema to constrain output to.
std::optional<ApiError> read_response_format(const json& rf, GenSpec& spec);
std::optional<ApiError> read_ollama_format(const json& format, GenSpec& spec);
// 404 unless `name` names the served model.
std::optional<ApiError> check_model(const ServedModel& m, const std::optional<std::string>& name, ApiKind api,
                                    bool required);

}  // namespace frugal::server
