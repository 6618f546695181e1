// OpenAI Chat Completions and Completions: request fields, response objects and the streaming
// contract (role-only first chunk per choice, one id for all chunks, a finish chunk per choice, a
// usage chunk with empty choices when stream_options.include_usage, then data: [DONE]).
#include <limits>
#include <unordered_map>

#include "frugal/engine/timings_json.h"
#include "frugal/server/codec.h"

namespace frugal::server {
namespace {

constexpr int kMaxChoices = 16;
constexpr size_t kMaxStop = 4;

const char* openai_finish(FinishReason r) {
  switch (r) {
    case FinishReason::kLength:
    case FinishReason::kContext: return "length";
    default: return "stop";
  }
}

json usage_json(const std::vector<ChoiceResult>& choices) {
  const Usage u = usage_of(choices);
  return json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// Chat logprobs entries for a run of tokens.
json chat_logprobs(const Tokenizer& tok, const std::vector<TokenOutput>& tokens) {
  json content = json::array();
  for (const auto& t : tokens) {
    json top = json::array();
    for (const auto& alt : t.top) {
      const std::string piece = tok.piece(alt.id);
      top.push_back({{"token", piece}, {"logprob", alt.logprob}, {"bytes", bytes_of(piece)}});
    }
    content.push_back({{"token", t.piece}, {"logprob", t.logprob}, {"bytes", bytes_of(t.piece)}, {"top_logprobs", top}});
  }
  return json{{"content", content}, {"refusal", nullptr}};
}

// Legacy completions logprobs.
json completion_logprobs(const Tokenizer& tok, const std::vector<TokenOutput>& tokens, size_t text_offset) {
  json toks = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  for (const auto& t : tokens) {
    toks.push_back(t.piece);
    lps.push_back(t.logprob);
    json top = json::object();
    for (const auto& alt : t.top) top[tok.piece(alt.id)] = alt.logprob;
    tops.push_back(top);
    offs.push_back(text_offset);
    text_offset += t.piece.size();
  }
  return json{{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

// Fields both endpoints read the same way.
std::optional<ApiError> read_common(FieldReader& r, const ServedModel& m, GenSpec& spec, bool chat) {
  const auto model = r.string("model");
  if (!r.ok()) return r.err;
  if (auto e = check_model(m, model, ApiKind::kOpenAI, true)) return e;
  if (auto e = read_sampling(r, spec, 2.0)) return e;
  if (auto e = read_kv_options(r, spec)) return e;
  if (auto e = read_speculative(r, spec)) return e;
  const int64_t max_ctx = m.n_ctx();
  std::optional<int64_t> max_tokens = r.integer("max_tokens", 1, max_ctx);
  if (chat) {
    if (auto v = r.integer("max_completion_tokens", 1, max_ctx)) max_tokens = v;
  }
  if (!r.ok()) return r.err;
  // Completions default to 16 tokens as OpenAI's do; chat runs until the end of the turn.
  spec.options.max_tokens = max_tokens ? static_cast<int32_t>(*max_tokens) : (chat ? -1 : 16);
  if (auto v = r.integer("n", 1, kMaxChoices)) spec.n = static_cast<int>(*v);
  if (auto v = r.strings("stop", kMaxStop)) spec.options.stop = *v;
  if (auto v = r.boolean("stream")) spec.stream = *v;
  if (auto v = r.boolean("ignore_eos")) spec.options.ignore_eos = *v;
  if (const json* so = r.object("stream_options")) {
    FieldReader sr{*so, {}};
    if (auto v = sr.boolean("include_usage")) spec.include_usage = *v;
    if (!sr.ok()) return sr.err;
  }
  if (const json* lb = r.object("logit_bias"); lb && !lb->empty()) {
    return bad_request("'logit_bias' is not supported", "logit_bias");
  }
  if (const json* tools = r.array("tools"); tools && !tools->empty()) {
    return bad_request("tool calling ('tools') is not supported by this server", "tools");
  }
  if (const json* rf = r.object("response_format")) {
    if (auto e = read_response_format(*rf, spec)) return e;
  }
  if (!r.ok()) return r.err;
  return std::nullopt;
}

class OpenAIBase : public GenerationCodec {
 public:
  OpenAIBase(const ServedModel& m, int64_t created, const char* id_prefix)
      : m_(m), created_(created), id_(random_id(id_prefix)) {}
  ApiKind api() const override { return ApiKind::kOpenAI; }
  std::string stream_error(const ApiError& e) override { return sse(error_json(ApiKind::kOpenAI, e)); }

 protected:
  json chunk_base(const GenSpec& spec, const char* object) const {
    json j{{"id", id_}, {"object", object}, {"created", created_}, {"model", spec.model},
           {"system_fingerprint", "fp_frugal"}};
    return j;
  }
  std::string usage_tail(const GenSpec& spec, const std::vector<ChoiceResult>& choices, const char* object) const {
    std::string out;
    if (spec.include_usage) {
      json j = chunk_base(spec, object);
      j["choices"] = json::array();
      j["usage"] = usage_json(choices);
      j["timings"] = timings_of(choices);  // the request's record, as the non-streamed response has it
      out += sse(j);
    }
    out += "data: [DONE]\n\n";
    return out;
  }
  static json timings_of(const std::vector<ChoiceResult>& choices) {
    return choices.empty() ? json(nullptr) : timings_json(choices.front().finished.timings);
  }

  const ServedModel& m_;
  int64_t created_;
  std::string id_;
};

class OpenAIChat : public OpenAIBase {
 public:
  OpenAIChat(const ServedModel& m, int64_t created) : OpenAIBase(m, created, "chatcmpl-") {}

  std::optional<ApiError> parse(const json& body, GenSpec& spec) override {
    if (!body.is_object()) return bad_request("the request body must be a JSON object");
    FieldReader r{body, {}};
    if (auto e = read_common(r, m_, spec, true)) return e;
    spec.model = body["model"].get<std::string>();
    const bool logprobs = r.boolean("logprobs").value_or(false);
    const auto top = r.integer("top_logprobs", 0, 20);
    if (!r.ok()) return r.err;
    if (top && !logprobs) return bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    spec.options.logprobs = logprobs ? static_cast<int32_t>(top.value_or(0)) : -1;
    if (!body.contains("messages")) return bad_request("'messages' is required", "messages");
    std::vector<ChatTurn> turns;
    if (auto e = read_turns(body["messages"], {"system", "developer", "user", "assistant", "tool"}, turns)) return e;
    auto prompt = m_.chat_prompt(turns);
    if (!prompt.ok()) return bad_request("messages: " + prompt.status().message(), "messages");
    spec.prompts.push_back(std::move(prompt).value());
    return std::nullopt;
  }

  std::string stream_begin(const GenSpec& spec) override {
    std::string out;
    for (int i = 0; i < static_cast<int>(spec.prompts.size()) * spec.n; ++i) {
      json j = chunk_base(spec, "chat.completion.chunk");
      j["choices"] = json::array({{{"index", i},
                                   {"delta", {{"role", "assistant"}, {"content", ""}}},
                                   {"logprobs", nullptr},
                                   {"finish_reason", nullptr}}});
      if (spec.include_usage) j["usage"] = nullptr;
      out += sse(j);
    }
    return out;
  }

  std::string stream_update(const GenSpec& spec, int choice, const RequestUpdate& u) override {
    std::string out;
    const bool lp = spec.options.logprobs >= 0 && !u.tokens.empty();
    if (!u.text.empty() || lp) {
      json j = chunk_base(spec, "chat.completion.chunk");
      j["choices"] = json::array({{{"index", choice},
                                   {"delta", {{"content", u.text}}},
                                   {"logprobs", lp ? chat_logprobs(m_.tokenizer(), u.tokens) : json(nullptr)},
                                   {"finish_reason", nullptr}}});
      if (spec.include_usage) j["usage"] = nullptr;
      out += sse(j);
    }
    if (u.done && u.finished.reason != FinishReason::kError) {
      json j = chunk_base(spec, "chat.completion.chunk");
      j["choices"] = json::array({{{"index", choice},
                                   {"delta", json::object()},
                                   {"logprobs", nullptr},
                                   {"finish_reason", openai_finish(u.finished.reason)}}});
      if (spec.include_usage) j["usage"] = nullptr;
      out += sse(j);
    }
    return out;
  }

  std::string stream_end(const GenSpec& spec, const std::vector<ChoiceResult>& choices) override {
    return usage_tail(spec, choices, "chat.completion.chunk");
  }

  json response(const GenSpec& spec, const std::vector<ChoiceResult>& choices) override {
    json j = chunk_base(spec, "chat.completion");
    json arr = json::array();
    for (size_t i = 0; i < choices.size(); ++i) {
      const ChoiceResult& c = choices[i];
      arr.push_back({{"index", i},
                     {"message", {{"role", "assistant"}, {"content", c.text}, {"refusal", nullptr}}},
                     {"logprobs", spec.options.logprobs >= 0 ? chat_logprobs(m_.tokenizer(), c.tokens) : json(nullptr)},
                     {"finish_reason", openai_finish(c.finished.reason)}});
    }
    j["choices"] = arr;
    j["usage"] = usage_json(choices);
    j["timings"] = timings_of(choices);
    return j;
  }
};

class OpenAICompletion : public OpenAIBase {
 public:
  OpenAICompletion(const ServedModel& m, int64_t created) : OpenAIBase(m, created, "cmpl-") {}

  std::optional<ApiError> parse(const json& body, GenSpec& spec) override {
    if (!body.is_object()) return bad_request("the request body must be a JSON object");
    FieldReader r{body, {}};
    if (auto e = read_common(r, m_, spec, false)) return e;
    spec.model = body["model"].get<std::string>();
    if (auto v = r.integer("logprobs", 0, 20)) spec.options.logprobs = static_cast<int32_t>(*v);
    if (r.boolean("echo").value_or(false)) return bad_request("'echo' is not supported", "echo");
    if (auto s = r.string("suffix"); s && !s->empty()) return bad_request("'suffix' is not supported", "suffix");
    if (auto b = r.integer("best_of", 1, kMaxChoices); b && *b != spec.n) {
      return bad_request("'best_of' other than n is not supported", "best_of");
    }
    if (!r.ok()) return r.err;
    if (!body.contains("prompt") || body["prompt"].is_null()) return bad_request("'prompt' is required", "prompt");
    return read_prompts(body["prompt"], spec);
  }

  std::string stream_begin(const GenSpec&) override { return {}; }

  std::string stream_update(const GenSpec& spec, int choice, const RequestUpdate& u) override {
    std::string out;
    const bool lp = spec.options.logprobs >= 0 && !u.tokens.empty();
    size_t& offset = offsets_[choice];
    if (!u.text.empty() || lp) {
      json j = chunk_base(spec, "text_completion");
      j["choices"] = json::array({{{"index", choice},
                                   {"text", u.text},
                                   {"logprobs", lp ? completion_logprobs(m_.tokenizer(), u.tokens, offset) : json(nullptr)},
                                   {"finish_reason", nullptr}}});
      if (spec.include_usage) j["usage"] = nullptr;
      out += sse(j);
    }
    for (const auto& t : u.tokens) offset += t.piece.size();
    if (u.done && u.finished.reason != FinishReason::kError) {
      json j = chunk_base(spec, "text_completion");
      j["choices"] = json::array(
          {{{"index", choice}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", openai_finish(u.finished.reason)}}});
      if (spec.include_usage) j["usage"] = nullptr;
      out += sse(j);
    }
    return out;
  }

  std::string stream_end(const GenSpec& spec, const std::vector<ChoiceResult>& choices) override {
    return usage_tail(spec, choices, "text_completion");
  }

  json response(const GenSpec& spec, const std::vector<ChoiceResult>& choices) override {
    json j = chunk_base(spec, "text_completion");
    json arr = json::array();
    for (size_t i = 0; i < choices.size(); ++i) {
      const ChoiceResult& c = choices[i];
      arr.push_back({{"index", i},
                     {"text", c.text},
                     {"logprobs", spec.options.logprobs >= 0 ? completion_logprobs(m_.tokenizer(), c.tokens, 0)
                                                             : json(nullptr)},
                     {"finish_reason", openai_finish(c.finished.reason)}});
    }
    j["choices"] = arr;
    j["usage"] = usage_json(choices);
    j["timings"] = timings_of(choices);
    return j;
  }

 private:
  // A string, a list of strings, a list of token ids, or a list of lists of token ids.
  std::optional<ApiError> read_prompts(const json& p, GenSpec& spec) {
    const auto ids = [&](const json& arr) -> std::optional<ApiError> {
      std::vector<TokenId> out;
      const int64_t n_vocab = m_.model().config().n_vocab;
      for (const auto& t : arr) {
        if (!t.is_number_integer()) return bad_request("'prompt' token lists must hold integers", "prompt");
        // Checked here, before the narrowing to TokenId: 4294967297 would otherwise become id 1.
        // (Unsigned values past int64 read as negative, so they fail too.)
        const int64_t id = t.get<int64_t>();
        if (id < 0 || id >= n_vocab) {
          return bad_request(fmt::format("'prompt' token ids must be in [0, {}), not {}", n_vocab, t.dump()), "prompt");
        }
        out.push_back(static_cast<TokenId>(id));
      }
      spec.prompts.push_back(std::move(out));
      return std::nullopt;
    };
    const auto text = [&](const json& s) -> std::optional<ApiError> {
      auto toks = m_.text_prompt(s.get<std::string>());
      if (!toks.ok()) return bad_request("prompt: " + toks.status().message(), "prompt");
      spec.prompts.push_back(std::move(toks).value());
      return std::nullopt;
    };
    if (p.is_string()) return text(p);
    if (!p.is_array() || p.empty()) {
      return bad_request("'prompt' must be a string, a list of strings or a list of token ids", "prompt");
    }
    if (p[0].is_number_integer()) return ids(p);
    if (p.size() > kMaxChoices) return bad_request("'prompt' holds too many prompts", "prompt");
    for (const auto& e : p) {
      std::optional<ApiError> err;
      if (e.is_string()) {
        err = text(e);
      } else if (e.is_array()) {
        err = ids(e);
      } else {
        err = bad_request("'prompt' list entries must be strings or token lists", "prompt");
      }
      if (err) return err;
    }
    if (static_cast<int>(spec.prompts.size()) * spec.n > kMaxChoices) {
      return bad_request(fmt::format("prompts x n is more than {} choices", kMaxChoices), "n");
    }
    return std::nullopt;
  }

  std::unordered_map<int, size_t> offsets_;
};

}  // namespace

std::unique_ptr<GenerationCodec> make_openai_chat_codec(const ServedModel& m, int64_t created) {
  return std::make_unique<OpenAIChat>(m, created);
}
std::unique_ptr<GenerationCodec> make_openai_completion_codec(const ServedModel& m, int64_t created) {
  return std::make_unique<OpenAICompletion>(m, created);
}

}  // namespace frugal::server
