// Anthropic Messages: request fields, the Message object and the named stream events
// message_start, content_block_start, content_block_delta, content_block_stop, message_delta,
// message_stop (no [DONE]; errors as `event: error`).
#include "frugal/server/codec.h"

namespace frugal::server {
namespace {

const char* stop_reason(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop_sequence";
    case FinishReason::kLength:
    case FinishReason::kContext: return "max_tokens";
    default: return "end_turn";
  }
}

class Anthropic : public GenerationCodec {
 public:
  explicit Anthropic(const ServedModel& m) : m_(m), id_(random_id("msg_")) {}
  ApiKind api() const override { return ApiKind::kAnthropic; }

  std::optional<ApiError> parse(const json& body, GenSpec& spec) override {
    if (!body.is_object()) return bad_request("the request body must be a JSON object");
    FieldReader r{body, {}};
    const auto model = r.string("model");
    if (!r.ok()) return r.err;
    if (auto e = check_model(m_, model, ApiKind::kAnthropic, true)) return e;
    spec.model = *model;
    const auto max_tokens = r.integer("max_tokens", 1, m_.n_ctx());
    if (!r.ok()) return r.err;
    if (!max_tokens) return bad_request("max_tokens: Field required");
    spec.options.max_tokens = static_cast<int32_t>(*max_tokens);
    if (auto e = read_sampling(r, spec, 1.0)) return e;
    if (auto e = read_kv_options(r, spec)) return e;
    if (auto e = read_speculative(r, spec)) return e;
    if (auto v = r.strings("stop_sequences", 16)) spec.options.stop = *v;
    if (auto v = r.boolean("stream")) spec.stream = *v;
    if (auto v = r.boolean("ignore_eos")) spec.options.ignore_eos = *v;  // extension (benchmarks, tests)
    if (const json* tools = r.array("tools"); tools && !tools->empty()) {
      return bad_request("tools are not supported by this server");
    }
    if (const json* th = r.object("thinking"); th && th->value("type", "") == "enabled") {
      return bad_request("extended thinking is not supported by this server");
    }
    if (!r.ok()) return r.err;
    std::vector<ChatTurn> turns;
    if (body.contains("system") && !body["system"].is_null()) {
      ChatTurn sys{"system", {}};
      if (auto e = content_text(body["system"], "system", sys.content)) return e;
      turns.push_back(std::move(sys));
    }
    if (!body.contains("messages")) return bad_request("messages: Field required");
    if (auto e = read_turns(body["messages"], {"user", "assistant"}, turns)) return e;
    auto prompt = m_.chat_prompt(turns);
    if (!prompt.ok()) return bad_request("messages: " + prompt.status().message());
    spec.prompts.push_back(std::move(prompt).value());
    return std::nullopt;
  }

  std::string stream_begin(const GenSpec& spec) override {
    json msg = message_skeleton(spec);
    msg["usage"] = {{"input_tokens", spec.prompts.empty() ? 0 : spec.prompts[0].size()}, {"output_tokens", 0}};
    std::string out = sse("message_start", {{"type", "message_start"}, {"message", msg}});
    out += sse("content_block_start",
               {{"type", "content_block_start"}, {"index", 0}, {"content_block", {{"type", "text"}, {"text", ""}}}});
    return out;
  }

  std::string stream_update(const GenSpec&, int, const RequestUpdate& u) override {
    if (u.text.empty()) return {};
    return sse("content_block_delta",
               {{"type", "content_block_delta"}, {"index", 0}, {"delta", {{"type", "text_delta"}, {"text", u.text}}}});
  }

  std::string stream_end(const GenSpec&, const std::vector<ChoiceResult>& choices) override {
    const FinishedRequest& f = choices.front().finished;
    std::string out = sse("content_block_stop", {{"type", "content_block_stop"}, {"index", 0}});
    out += sse("message_delta", {{"type", "message_delta"},
                                 {"delta", {{"stop_reason", stop_reason(f.reason)}, {"stop_sequence", stop_seq(f)}}},
                                 {"usage", {{"output_tokens", f.generated_tokens}}}});
    out += sse("message_stop", {{"type", "message_stop"}});
    return out;
  }

  std::string stream_error(const ApiError& e) override { return sse("error", error_json(ApiKind::kAnthropic, e)); }
  std::string keepalive() const override { return sse("ping", {{"type", "ping"}}); }

  json response(const GenSpec& spec, const std::vector<ChoiceResult>& choices) override {
    const ChoiceResult& c = choices.front();
    json msg = message_skeleton(spec);
    msg["content"] = json::array({{{"type", "text"}, {"text", c.text}}});
    msg["stop_reason"] = stop_reason(c.finished.reason);
    msg["stop_sequence"] = stop_seq(c.finished);
    msg["usage"] = {{"input_tokens", c.finished.prompt_tokens},
                    {"output_tokens", c.finished.generated_tokens},
                    {"cache_creation_input_tokens", 0},
                    {"cache_read_input_tokens", c.finished.timings.cached_tokens}};
    return msg;
  }

 private:
  json message_skeleton(const GenSpec& spec) const {
    return json{{"id", id_},          {"type", "message"},       {"role", "assistant"},   {"model", spec.model},
                {"content", json::array()}, {"stop_reason", nullptr}, {"stop_sequence", nullptr}};
  }
  static json stop_seq(const FinishedRequest& f) {
    return f.reason == FinishReason::kStop ? json(f.stop_string) : json(nullptr);
  }

  const ServedModel& m_;
  std::string id_;
};

}  // namespace

std::unique_ptr<GenerationCodec> make_anthropic_codec(const ServedModel& m) { return std::make_unique<Anthropic>(m); }

}  // namespace frugal::server
