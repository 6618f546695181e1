// API codecs without HTTP: request decoding and its 4xx errors, error shapes, and the exact
// streaming contracts of the three APIs (checked against the wire formats in
// shared/reference/serving.md).
#include "frugal/server/codec.h"

#include <gtest/gtest.h>

#include <sstream>

#include "frugal/server/http_server.h"
#include "frugal/server/metrics.h"
#include "frugal/server/request_log.h"
#include "test_model.h"

namespace frugal::server {
namespace {

class CodecTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = Model::load(testing::tiny_chat_model_path());
    ASSERT_TRUE(m.ok()) << m.status().message();
    model_ = std::move(m).value().release();
    tok_ = Tokenizer::from_gguf(model_->gguf()).value().release();
    served_ = new ServedModel(*model_, *tok_, "tiny", testing::tiny_chat_model_path(), 128);
  }
  static void TearDownTestSuite() {
    delete served_;
    delete tok_;
    delete model_;
  }

  // Parses `body` with a fresh codec; returns the error, if any.
  std::optional<ApiError> parse(GenerationCodec& c, const std::string& body, GenSpec& spec) {
    return c.parse(json::parse(body), spec);
  }
  std::optional<ApiError> chat_error(const std::string& body) {
    GenSpec spec;
    auto c = make_openai_chat_codec(*served_, 1);
    return parse(*c, body, spec);
  }

  static FinishedRequest finished(FinishReason r, int64_t prompt, int64_t gen) {
    FinishedRequest f;
    f.reason = r;
    f.prompt_tokens = prompt;
    f.generated_tokens = gen;
    f.timings.prefill_ms = 2;
    f.timings.decode_ms = 3;
    f.timings.total_ms = 6;
    return f;
  }

  static Model* model_;
  static Tokenizer* tok_;
  static ServedModel* served_;
};
Model* CodecTest::model_ = nullptr;
Tokenizer* CodecTest::tok_ = nullptr;
ServedModel* CodecTest::served_ = nullptr;

// "data: {...}" payloads of an SSE text, in order, with their event names.
std::vector<std::pair<std::string, std::string>> sse_events(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(text);
  std::string line, event;
  while (std::getline(in, line)) {
    if (line.rfind("event: ", 0) == 0) event = line.substr(7);
    if (line.rfind("data: ", 0) == 0) {
      out.emplace_back(event, line.substr(6));
      event.clear();
    }
  }
  return out;
}

TEST_F(CodecTest, OpenAIChatDecodesARequest) {
  GenSpec spec;
  auto c = make_openai_chat_codec(*served_, 1);
  ASSERT_FALSE(parse(*c, R"({"model": "tiny", "messages": [{"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "hi"}]}], "max_completion_tokens": 7, "temperature": 0,
      "n": 2, "stop": "x", "seed": 5, "logprobs": true, "top_logprobs": 2, "stream": true,
      "stream_options": {"include_usage": true}, "response_format": {"type": "json_object"}})", spec));
  EXPECT_EQ(spec.model, "tiny");
  EXPECT_EQ(spec.options.max_tokens, 7);
  EXPECT_EQ(spec.options.sampling.temperature, 0.0f);
  EXPECT_EQ(spec.n, 2);
  EXPECT_EQ(spec.options.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(spec.seed, 5u);
  EXPECT_EQ(spec.options.logprobs, 2);
  EXPECT_TRUE(spec.stream);
  EXPECT_TRUE(spec.include_usage);
  EXPECT_NE(spec.options.json_schema, nullptr);
  ASSERT_EQ(spec.prompts.size(), 1u);
  const auto expected = served_->chat_prompt({{"system", "be brief"}, {"user", "hi"}});
  EXPECT_EQ(spec.prompts[0], *expected);
  // ChatML rendering, tokenized without an extra BOS.
  EXPECT_EQ(*served_->render_chat({{"user", "hi"}}), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST_F(CodecTest, OpenAIBadRequestsName400sAnd404s) {
  const std::vector<std::tuple<std::string, int, std::string>> cases = {
      {R"({"messages": [{"role": "user", "content": "x"}]})", 400, "'model' is required"},
      {R"({"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]})", 404, "does not exist"},
      {R"({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": "ten"})", 400,
       "'max_tokens' must be an integer"},
      {R"({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": -1})", 400, "out of range"},
      {R"({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1000000000})", 400,
       "out of range"},
      // Found by tests/fuzz/anthropic.cc: integers written as doubles past int64's range were
      // converted before the range check (undefined behaviour; UBSan stopped on it).
      {R"({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": 18888888888888888888888888888})",
       400, "out of range"},
      {R"({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": -1e300})", 400, "out of range"},
      {R"({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": 9223372036854775808.0})", 400,
       "out of range"},
      {R"({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2.5})", 400,
       "'max_tokens' must be an integer"},
      {R"({"model": "tiny", "messages": []})", 400, "must not be empty"},
      {R"({"model": "tiny", "messages": [{"role": "wizard", "content": "x"}]})", 400, "'wizard'"},
      {R"({"model": "tiny", "messages": [{"role": "user", "content": 5}]})", 400, "content must be"},
      {R"({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "temperature": 3})", 400, "temperature"},
      {R"({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", 400, "logprobs"},
      {R"({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "n": 0})", 400, "'n'"},
      {R"({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "stop": ["a","b","c","d","e"]})", 400,
       "at most 4"},
      {R"({"model": "tiny", "messages": [{"role": "user", "content": "x"}],
          "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "hiccup"}}}})", 400,
       "invalid JSON schema"},
      {R"({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}})", 400,
       "response_format.type"},
  };
  for (const auto& [body, status, needle] : cases) {
    auto e = chat_error(body);
    ASSERT_TRUE(e.has_value()) << body;
    EXPECT_EQ(e->status, status) << body;
    EXPECT_NE(e->message.find(needle), std::string::npos) << body << " -> " << e->message;
  }
}

TEST_F(CodecTest, CompletionsAcceptEveryPromptForm) {
  GenSpec spec;
  auto c = make_openai_completion_codec(*served_, 1);
  ASSERT_FALSE(parse(*c, R"({"model": "tiny", "prompt": ["a", [1, 2, 3]], "n": 2})", spec));
  ASSERT_EQ(spec.prompts.size(), 2u);
  EXPECT_EQ(spec.prompts[0], *served_->text_prompt("a"));
  EXPECT_EQ(spec.prompts[1], (std::vector<TokenId>{1, 2, 3}));
  EXPECT_EQ(spec.options.max_tokens, 16);  // OpenAI's default for completions
  GenSpec bad;
  auto c2 = make_openai_completion_codec(*served_, 1);
  EXPECT_EQ(parse(*c2, R"({"model": "tiny", "prompt": {"x": 1}})", bad)->status, 400);
}

// Token ids are checked against the vocabulary before they are narrowed to 32 bits: 4294967297
// (2^32 + 1) used to become id 1 and run as a valid prompt.
TEST_F(CodecTest, CompletionsRefuseTokenIdsOutsideTheVocabulary) {
  const int64_t n_vocab = model_->config().n_vocab;
  const std::vector<std::string> bad_lists = {"[4294967297]", "[-1]", "[1, " + std::to_string(n_vocab) + "]",
                                              "[18446744073709551615]"};
  for (const std::string& ids : bad_lists) {
    GenSpec spec;
    auto c = make_openai_completion_codec(*served_, 1);
    auto e = parse(*c, R"({"model": "tiny", "prompt": )" + ids + "}", spec);
    ASSERT_TRUE(e.has_value()) << ids;
    EXPECT_EQ(e->status, 400) << ids;
    EXPECT_NE(e->message.find("token ids must be in [0, " + std::to_string(n_vocab) + ")"), std::string::npos)
        << e->message;
  }
  GenSpec spec;
  auto c = make_openai_completion_codec(*served_, 1);
  ASSERT_FALSE(parse(*c, R"({"model": "tiny", "prompt": [0, )" + std::to_string(n_vocab - 1) + "]}", spec));
  EXPECT_EQ(spec.prompts[0], (std::vector<TokenId>{0, static_cast<TokenId>(n_vocab - 1)}));
}

// kv_policy and kv_budget are extension fields at the top level of every generation API's body.
TEST_F(CodecTest, EveryApiReadsKvPolicyAndBudget) {
  struct Api {
    std::unique_ptr<GenerationCodec> codec;
    std::string body;  // a valid request; the kv fields are appended
  };
  std::vector<Api> apis;
  apis.push_back({make_openai_chat_codec(*served_, 1), R"("model": "tiny", "messages": [{"role": "user", "content": "x"}])"});
  apis.push_back({make_openai_completion_codec(*served_, 1), R"("model": "tiny", "prompt": "x")"});
  apis.push_back({make_anthropic_codec(*served_),
                  R"("model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "x"}])"});
  apis.push_back({make_ollama_generate_codec(*served_), R"("model": "tiny", "prompt": "x")"});
  apis.push_back({make_ollama_chat_codec(*served_), R"("model": "tiny", "messages": [{"role": "user", "content": "x"}])"});
  for (auto& a : apis) {
    SCOPED_TRACE(a.body);
    GenSpec plain;
    ASSERT_FALSE(parse(*a.codec, "{" + a.body + "}", plain));
    EXPECT_FALSE(plain.kv_policy.has_value());
    EXPECT_FALSE(plain.kv_budget.has_value());
    GenSpec spec;
    ASSERT_FALSE(parse(*a.codec, "{" + a.body + R"(, "kv_policy": "random", "kv_budget": 0.25})", spec));
    EXPECT_EQ(spec.kv_policy, "random");
    EXPECT_EQ(spec.kv_budget, 0.25);
    const std::vector<std::pair<std::string, std::string>> bad = {
        {R"("kv_policy": "lru")", "'kv_policy' 'lru' is not one of"},
        {R"("kv_policy": 3)", "kv_policy"},
        {R"("kv_budget": 1.5)", "'kv_budget' must be a token count (>= 1) or a fraction in (0, 1)"},
        {R"("kv_budget": 0)", "'kv_budget' must be a token count"},
        {R"("kv_budget": "half")", "kv_budget"},
    };
    for (const auto& [field, needle] : bad) {
      GenSpec s;
      auto e = parse(*a.codec, "{" + a.body + ", " + field + "}", s);
      ASSERT_TRUE(e.has_value()) << field;
      EXPECT_EQ(e->status, 400) << field;
      EXPECT_NE(e->message.find(needle), std::string::npos) << field << " -> " << e->message;
    }
  }
}

// speculative is an extension field at the top level of every generation API's body: absent (the
// server's default), true or false; anything else is a 400 naming it.
TEST_F(CodecTest, EveryApiReadsTheSpeculativeOptOut) {
  std::vector<std::pair<std::unique_ptr<GenerationCodec>, std::string>> apis;
  apis.emplace_back(make_openai_chat_codec(*served_, 1), R"("model": "tiny", "messages": [{"role": "user", "content": "x"}])");
  apis.emplace_back(make_openai_completion_codec(*served_, 1), R"("model": "tiny", "prompt": "x")");
  apis.emplace_back(make_anthropic_codec(*served_),
                    R"("model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "x"}])");
  apis.emplace_back(make_ollama_generate_codec(*served_), R"("model": "tiny", "prompt": "x")");
  apis.emplace_back(make_ollama_chat_codec(*served_), R"("model": "tiny", "messages": [{"role": "user", "content": "x"}])");
  for (auto& [codec, body] : apis) {
    SCOPED_TRACE(body);
    GenSpec plain, off, on, bad;
    ASSERT_FALSE(parse(*codec, "{" + body + "}", plain));
    EXPECT_FALSE(plain.options.speculative.has_value());
    ASSERT_FALSE(parse(*codec, "{" + body + R"(, "speculative": false})", off));
    EXPECT_EQ(off.options.speculative, std::optional<bool>(false));
    ASSERT_FALSE(parse(*codec, "{" + body + R"(, "speculative": true})", on));
    EXPECT_EQ(on.options.speculative, std::optional<bool>(true));
    auto e = parse(*codec, "{" + body + R"(, "speculative": "no"})", bad);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->status, 400);
    EXPECT_NE(e->message.find("speculative"), std::string::npos) << e->message;
  }
}

TEST_F(CodecTest, ErrorShapesFollowEachApi) {
  const ApiError e = bad_request("bad thing", "max_tokens");
  EXPECT_EQ(dump(error_json(ApiKind::kOpenAI, e)),
            R"({"error":{"message":"bad thing","type":"invalid_request_error","param":"max_tokens","code":null}})");
  EXPECT_EQ(dump(error_json(ApiKind::kAnthropic, e)),
            R"({"type":"error","error":{"type":"invalid_request_error","message":"bad thing"}})");
  EXPECT_EQ(dump(error_json(ApiKind::kOllama, e)), R"({"error":"bad thing"})");
  EXPECT_EQ(error_json(ApiKind::kOpenAI, not_found("m", "model_not_found"))["error"]["code"], "model_not_found");
  EXPECT_EQ(error_json(ApiKind::kAnthropic, unauthorized("k"))["error"]["type"], "authentication_error");
  EXPECT_EQ(error_json(ApiKind::kAnthropic, overloaded("busy"))["error"]["type"], "overloaded_error");
  EXPECT_EQ(api_for_path("/v1/messages/count_tokens"), ApiKind::kAnthropic);
  EXPECT_EQ(api_for_path("/api/chat"), ApiKind::kOllama);
  EXPECT_EQ(api_for_path("/v1/chat/completions"), ApiKind::kOpenAI);
}

TEST_F(CodecTest, OpenAIChatStreamContract) {
  GenSpec spec;
  auto c = make_openai_chat_codec(*served_, 1700000000);
  ASSERT_FALSE(parse(*c, R"({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "stream": true,
                             "stream_options": {"include_usage": true}})", spec));
  std::string wire = c->stream_begin(spec);
  RequestUpdate u1;
  u1.text = "Hel";
  wire += c->stream_update(spec, 0, u1);
  RequestUpdate u2;
  u2.text = "lo";
  u2.done = true;
  u2.finished = finished(FinishReason::kLength, 9, 2);
  wire += c->stream_update(spec, 0, u2);
  ChoiceResult r;
  r.text = "Hello";
  r.finished = u2.finished;
  wire += c->stream_end(spec, {r});

  const auto events = sse_events(wire);
  ASSERT_EQ(events.size(), 6u);
  EXPECT_EQ(events.back().second, "[DONE]");
  std::string id;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json j = json::parse(events[i].second);
    EXPECT_EQ(j["object"], "chat.completion.chunk");
    if (id.empty()) id = j["id"].get<std::string>();
    EXPECT_EQ(j["id"], id);
    EXPECT_EQ(j["created"], 1700000000);
    EXPECT_TRUE(j.contains("usage"));
  }
  EXPECT_EQ(id.rfind("chatcmpl-", 0), 0u);
  const json first = json::parse(events[0].second);
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  const json second = json::parse(events[1].second);
  EXPECT_FALSE(second["choices"][0]["delta"].contains("role"));
  EXPECT_EQ(second["choices"][0]["delta"]["content"], "Hel");
  const json fin = json::parse(events[3].second);
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(fin["choices"][0]["delta"].empty());
  const json usage = json::parse(events[4].second);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 9);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 2);
  EXPECT_EQ(usage["usage"]["total_tokens"], 11);
  // The request's record rides on the usage chunk, as on a whole response (peak KV bytes and all).
  ASSERT_TRUE(usage.contains("timings"));
  EXPECT_TRUE(usage["timings"].contains("kv_peak_bytes"));
  EXPECT_EQ(wire.find("\r"), std::string::npos);
}

TEST_F(CodecTest, AnthropicStreamEventsAreNamedAndOrdered) {
  GenSpec spec;
  auto c = make_anthropic_codec(*served_);
  ASSERT_FALSE(parse(*c, R"({"model": "tiny", "max_tokens": 5, "system": "s",
                             "messages": [{"role": "user", "content": "x"}], "stream": true})", spec));
  std::string wire = c->stream_begin(spec);
  RequestUpdate u;
  u.text = "hi";
  u.done = true;
  u.finished = finished(FinishReason::kEos, 4, 3);
  wire += c->stream_update(spec, 0, u);
  ChoiceResult r;
  r.finished = u.finished;
  wire += c->stream_end(spec, {r});
  const auto events = sse_events(wire);
  const std::vector<std::string> names = {"message_start",      "content_block_start", "content_block_delta",
                                          "content_block_stop", "message_delta",       "message_stop"};
  ASSERT_EQ(events.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(events[i].first, names[i]);
    EXPECT_EQ(json::parse(events[i].second)["type"], names[i]);
  }
  const json start = json::parse(events[0].second);
  EXPECT_EQ(start["message"]["role"], "assistant");
  EXPECT_TRUE(start["message"]["content"].empty());
  EXPECT_EQ(json::parse(events[2].second)["delta"]["text"], "hi");
  const json delta = json::parse(events[4].second);
  EXPECT_EQ(delta["delta"]["stop_reason"], "end_turn");
  EXPECT_EQ(delta["usage"]["output_tokens"], 3);
  GenSpec bad;
  auto c2 = make_anthropic_codec(*served_);
  auto e = parse(*c2, R"({"model": "tiny", "messages": [{"role": "user", "content": "x"}]})", bad);
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->message.find("max_tokens"), std::string::npos);
}

TEST_F(CodecTest, OllamaStreamsNdjsonWithNanosecondTimings) {
  GenSpec spec;
  auto c = make_ollama_chat_codec(*served_);
  ASSERT_FALSE(parse(*c, R"({"model": "tiny:latest", "messages": [{"role": "user", "content": "x"}],
                             "options": {"num_predict": 3, "temperature": 0, "seed": 1}})", spec));
  EXPECT_TRUE(spec.stream);  // Ollama streams unless told not to
  EXPECT_EQ(spec.options.max_tokens, 3);
  RequestUpdate u;
  u.text = "ab";
  const std::string line = c->stream_update(spec, 0, u);
  ASSERT_EQ(line.back(), '\n');
  const json j = json::parse(line);
  EXPECT_EQ(j["message"]["content"], "ab");
  EXPECT_EQ(j["done"], false);
  ChoiceResult r;
  r.finished = finished(FinishReason::kLength, 5, 3);
  const json end = json::parse(c->stream_end(spec, {r}));
  EXPECT_EQ(end["done"], true);
  EXPECT_EQ(end["done_reason"], "length");
  EXPECT_EQ(end["eval_count"], 3);
  EXPECT_EQ(end["eval_duration"], 3000000);
  EXPECT_EQ(end["prompt_eval_count"], 5);
  GenSpec bad;
  auto c2 = make_ollama_generate_codec(*served_);
  auto e = parse(*c2, R"({"model": "llama3", "prompt": "x"})", bad);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->status, 404);
  EXPECT_EQ(dump(error_json(ApiKind::kOllama, *e)), R"({"error":"model 'llama3' not found"})");
}

TEST_F(CodecTest, NestingDepthIgnoresStrings) {
  EXPECT_EQ(json_nesting_depth(R"({"a": [1, {"b": "[[[{{{"}]})"), 3);
  EXPECT_EQ(json_nesting_depth(R"("\"[")"), 0);
  EXPECT_EQ(json_nesting_depth(std::string(1000, '[')), 1000);
}

TEST_F(CodecTest, MetricsUseVllmNames) {
  Metrics m("tiny");
  FinishedRequest f = finished(FinishReason::kEos, 10, 5);
  f.timings.ttft_ms = 30;
  f.timings.tpot_ms = 7;
  m.observe(f);
  FinishedRequest c = finished(FinishReason::kCancelled, 3, 1);
  m.observe(c);
  EngineStats s;
  s.running = 2;
  s.waiting = 1;
  s.kv_rows_running = 50;
  s.kv_rows_total = 200;
  const std::string text = m.render(s);
  for (const char* needle :
       {"vllm:num_requests_running{model_name=\"tiny\"} 2", "vllm:num_requests_waiting{model_name=\"tiny\"} 1",
        "vllm:kv_cache_usage_perc{model_name=\"tiny\"} 0.25",
        "vllm:time_to_first_token_seconds_bucket{model_name=\"tiny\",le=\"0.04\"} 2",
        "vllm:time_to_first_token_seconds_bucket{model_name=\"tiny\",le=\"0.02\"} 1",
        "vllm:time_to_first_token_seconds_count{model_name=\"tiny\"} 2",
        "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"stop\"} 1",
        "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"abort\"} 1",
        "# TYPE vllm:time_per_output_token_seconds histogram", "frugal:requests_cancelled_total{model_name=\"tiny\"} 1"}) {
    EXPECT_NE(text.find(needle), std::string::npos) << needle << "\n" << text;
  }
}

TEST_F(CodecTest, MetricsCountEvictionRoundsAndKvPolicies) {
  Metrics m("tiny");
  m.observe(finished(FinishReason::kEos, 10, 5));
  FinishedRequest ev = finished(FinishReason::kLength, 40, 60);
  ev.kv_policy = "random";
  ev.kv_quant = KvQuant::kInt8;
  ev.kv.rounds = 3;
  ev.kv.round_ms = 1500;
  ev.kv.stats_ms = 250;
  m.observe(ev);
  m.observe(finished(FinishReason::kError, 4, 0));  // refused: never ran, counts nowhere here
  const std::string text = m.render(EngineStats{});
  for (const char* needle :
       {"frugal:kv_eviction_rounds_total{model_name=\"tiny\"} 3", "frugal:kv_eviction_seconds_total{model_name=\"tiny\"} 1.5",
        "frugal:kv_eviction_stats_seconds_total{model_name=\"tiny\"} 0.25",
        "frugal:kv_policy_requests_total{model_name=\"tiny\",policy=\"full\",quant=\"none\"} 1",
        "frugal:kv_policy_requests_total{model_name=\"tiny\",policy=\"random\",quant=\"int8\"} 1"}) {
    EXPECT_NE(text.find(needle), std::string::npos) << needle << "\n" << text;
  }
}

TEST_F(CodecTest, MetricsCountSpeculativeTokens) {
  Metrics m("tiny");
  for (int64_t drafted : {12, 30}) {
    FinishedRequest f = finished(FinishReason::kEos, 10, 20);
    f.speculative.method = "ngram";
    f.speculative.passes = drafted / 3;
    f.speculative.drafted = drafted;
    f.speculative.accepted = drafted / 2;
    m.observe(f);
  }
  m.observe(finished(FinishReason::kEos, 10, 5));  // plain: adds nothing
  const std::string text = m.render(EngineStats{});
  for (const char* needle : {"frugal:spec_verify_passes_total{model_name=\"tiny\"} 14",
                             "frugal:spec_draft_tokens_total{model_name=\"tiny\"} 42",
                             "frugal:spec_accepted_tokens_total{model_name=\"tiny\"} 21"}) {
    EXPECT_NE(text.find(needle), std::string::npos) << needle << "\n" << text;
  }
}

TEST_F(CodecTest, RequestLogRecordsTheSharedTimingSchema) {
  FinishedRequest f = finished(FinishReason::kStop, 4, 2);
  f.stop_string = "\n";
  f.request_id = "req-1";
  f.api = "openai";
  const json j = RequestLog::record(f, "tiny");
  EXPECT_EQ(j["finish_reason"], "stop");
  EXPECT_EQ(j["stop"], "\n");
  for (const char* key : {"prefill_ms", "decode_ms", "prefill_tokens", "decode_tokens", "prefill_tok_s",
                          "decode_tok_s", "queue_ms", "ttft_ms", "tpot_ms", "total_ms", "cached_tokens"}) {
    EXPECT_TRUE(j["timings"].contains(key)) << key;
  }
}

}  // namespace
}  // namespace frugal::server
