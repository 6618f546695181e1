// Ollama /api/generate and /api/chat: NDJSON streaming (one JSON object per line, the last with
// done: true and the timing fields in nanoseconds), or one object with "stream": false.
#include "frugal/server/codec.h"

namespace frugal::server {
namespace {

int64_t ns(double ms) { return static_cast<int64_t>(ms * 1e6); }

class OllamaBase : public GenerationCodec {
 public:
  OllamaBase(const ServedModel& m, bool chat) : m_(m), chat_(chat) {}
  ApiKind api() const override { return ApiKind::kOllama; }
  const char* stream_content_type() const override { return "application/x-ndjson"; }
  std::string keepalive() const override { return {}; }
  std::string stream_begin(const GenSpec&) override { return {}; }
  std::string stream_error(const ApiError& e) override { return dump(error_json(ApiKind::kOllama, e)) + "\n"; }

  std::string stream_update(const GenSpec& spec, int, const RequestUpdate& u) override {
    if (u.text.empty()) return {};
    json j = head(spec);
    put_text(j, u.text);
    j["done"] = false;
    return dump(j) + "\n";
  }

  std::string stream_end(const GenSpec& spec, const std::vector<ChoiceResult>& choices) override {
    return dump(final_object(spec, choices, "")) + "\n";
  }

  json response(const GenSpec& spec, const std::vector<ChoiceResult>& choices) override {
    return final_object(spec, choices, choices.empty() ? std::string() : choices.front().text);
  }

 protected:
  // Reads model, options, format and stream; the endpoint reads its prompt.
  std::optional<ApiError> parse_common(const json& body, GenSpec& spec) {
    if (!body.is_object()) return bad_request("the request body must be a JSON object");
    FieldReader r{body, {}};
    auto model = r.string("model");
    if (!r.ok()) return r.err;
    if (!model) model = r.string("name");
    if (!model) return bad_request("model is required");
    if (auto e = check_model(m_, model, ApiKind::kOllama, true)) return e;
    spec.model = *model;
    spec.stream = r.boolean("stream").value_or(true);
    spec.options.ignore_eos = r.boolean("ignore_eos").value_or(false);  // extension (benchmarks, tests)
    if (const json* tools = r.array("tools"); tools && !tools->empty()) {
      return bad_request("tools are not supported by this server");
    }
    if (const json* images = r.array("images"); images && !images->empty()) {
      return bad_request("images are not supported by this model");
    }
    if (auto e = read_kv_options(r, spec)) return e;
    if (auto e = read_speculative(r, spec)) return e;
    if (!r.ok()) return r.err;
    if (body.contains("format") && !body["format"].is_null()) {
      if (auto e = read_ollama_format(body["format"], spec)) return e;
    }
    if (const json* opts = r.object("options")) {
      FieldReader o{*opts, {}};
      if (auto e = read_sampling(o, spec, 2.0)) return e;
      if (auto v = o.integer("num_predict", -2, m_.n_ctx())) {
        if (*v == 0) return bad_request("options.num_predict must not be 0");
        spec.options.max_tokens = *v < 0 ? -1 : static_cast<int32_t>(*v);
      }
      if (auto v = o.strings("stop", 16)) spec.options.stop = *v;
      if (!o.ok()) return ApiError{o.err->status, o.err->type, "options: " + o.err->message, {}, {}};
    }
    if (!r.ok()) return r.err;
    return std::nullopt;
  }

  json head(const GenSpec& spec) const { return json{{"model", spec.model}, {"created_at", rfc3339_now()}}; }

  void put_text(json& j, const std::string& text) const {
    if (chat_) {
      j["message"] = {{"role", "assistant"}, {"content", text}};
    } else {
      j["response"] = text;
    }
  }

  json final_object(const GenSpec& spec, const std::vector<ChoiceResult>& choices, const std::string& text) const {
    json j = head(spec);
    put_text(j, text);
    j["done"] = true;
    if (choices.empty()) {  // an empty prompt only loads the model
      j["done_reason"] = "load";
      return j;
    }
    const FinishedRequest& f = choices.front().finished;
    const bool length = f.reason == FinishReason::kLength || f.reason == FinishReason::kContext;
    j["done_reason"] = length ? "length" : "stop";
    if (!chat_) {
      json ctx = json::array();
      for (TokenId t : spec.prompts.front()) ctx.push_back(t);
      for (const auto& t : choices.front().tokens) ctx.push_back(t.id);
      j["context"] = ctx;
    }
    j["total_duration"] = ns(f.timings.total_ms);
    j["load_duration"] = 0;
    j["prompt_eval_count"] = f.prompt_tokens;
    j["prompt_eval_duration"] = ns(f.timings.queue_ms + f.timings.prefill_ms);
    j["eval_count"] = f.generated_tokens;
    j["eval_duration"] = ns(f.timings.decode_ms);
    return j;
  }

  const ServedModel& m_;
  bool chat_;
};

class OllamaGenerate : public OllamaBase {
 public:
  explicit OllamaGenerate(const ServedModel& m) : OllamaBase(m, false) {}

  std::optional<ApiError> parse(const json& body, GenSpec& spec) override {
    if (auto e = parse_common(body, spec)) return e;
    FieldReader r{body, {}};
    const std::string prompt = r.string("prompt").value_or("");
    const std::string system = r.string("system").value_or("");
    const bool raw = r.boolean("raw").value_or(false);
    if (auto s = r.string("suffix"); s && !s->empty()) return bad_request("suffix is not supported");
    if (!r.ok()) return r.err;
    if (prompt.empty()) return std::nullopt;  // loads the model; nothing to generate
    Result<std::vector<TokenId>> toks = std::vector<TokenId>{};
    if (raw) {
      toks = m_.text_prompt(prompt);
    } else {
      std::vector<ChatTurn> turns;
      if (!system.empty()) turns.push_back({"system", system});
      turns.push_back({"user", prompt});
      toks = m_.chat_prompt(turns);
    }
    if (!toks.ok()) return bad_request("prompt: " + toks.status().message());
    spec.prompts.push_back(std::move(toks).value());
    return std::nullopt;
  }
};

class OllamaChat : public OllamaBase {
 public:
  explicit OllamaChat(const ServedModel& m) : OllamaBase(m, true) {}

  std::optional<ApiError> parse(const json& body, GenSpec& spec) override {
    if (auto e = parse_common(body, spec)) return e;
    if (!body.contains("messages")) return bad_request("messages is required");
    std::vector<ChatTurn> turns;
    if (auto e = read_turns(body["messages"], {"system", "user", "assistant", "tool"}, turns)) return e;
    auto toks = m_.chat_prompt(turns);
    if (!toks.ok()) return bad_request("messages: " + toks.status().message());
    spec.prompts.push_back(std::move(toks).value());
    return std::nullopt;
  }
};

}  // namespace

std::unique_ptr<GenerationCodec> make_ollama_generate_codec(const ServedModel& m) {
  return std::make_unique<OllamaGenerate>(m);
}
std::unique_ptr<GenerationCodec> make_ollama_chat_codec(const ServedModel& m) { return std::make_unique<OllamaChat>(m); }

}  // namespace frugal::server
