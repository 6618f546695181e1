#include "frugal/server/http_server.h"

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>

#include "frugal/server/codec.h"
#include "frugal/server/httplib_config.h"

namespace frugal::server {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

constexpr auto kKeepAliveEvery = std::chrono::seconds(2);

const char* api_name(ApiKind api) {
  switch (api) {
    case ApiKind::kOpenAI: return "openai";
    case ApiKind::kAnthropic: return "anthropic";
    case ApiKind::kOllama: return "ollama";
  }
  return "";
}

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

void send_error(httplib::Response& res, ApiKind api, const ApiError& e) {
  if (e.status == 503) res.set_header("Retry-After", "1");
  send_json(res, e.status, error_json(api, e));
}

// The state one generation request shares between its handler and its stream provider.
struct Generation {
  std::unique_ptr<GenerationCodec> codec;
  GenSpec spec;
  std::vector<std::shared_ptr<RequestHandle>> handles;
  std::vector<ChoiceResult> results;
  std::vector<uint8_t> done;
  std::optional<ApiError> error;
  Clock::time_point deadline;
  Clock::time_point last_write;
  bool begun = false;

  void cancel() {
    for (auto& h : handles) h->cancel();
  }
  bool all_done() const {
    return std::all_of(done.begin(), done.end(), [](uint8_t d) { return d != 0; });
  }
  void absorb(size_t i, const RequestUpdate& u) {
    results[i].text += u.text;
    results[i].tokens.insert(results[i].tokens.end(), u.tokens.begin(), u.tokens.end());
    if (u.done) {
      done[i] = 1;
      results[i].finished = u.finished;
      if (u.finished.reason == FinishReason::kError && !error) error = from_status(u.finished.error);
    }
  }
  // Waits up to `wait` for output of any choice; calls `f` for each update. False when none came.
  bool poll(milliseconds wait, const std::function<void(int, const RequestUpdate&)>& f) {
    bool any = false;
    RequestUpdate u;
    for (size_t i = 0; i < handles.size(); ++i) {
      if (!done[i] && handles[i]->wait(u, milliseconds(0))) {
        absorb(i, u);
        if (f) f(static_cast<int>(i), u);
        any = true;
      }
    }
    if (any) return true;
    for (size_t i = 0; i < handles.size(); ++i) {
      if (done[i]) continue;
      const milliseconds w = handles.size() == 1 ? wait : std::min(wait, milliseconds(10));
      if (handles[i]->wait(u, w)) {
        absorb(i, u);
        if (f) f(static_cast<int>(i), u);
        return true;
      }
      return false;
    }
    return false;
  }
};

uint64_t fresh_seed() {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> lk(mu);
  return rng() & 0x7fffffffffffffffULL;
}

}  // namespace

int json_nesting_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escape = false;
  for (char c : text) {
    if (in_string) {
      if (escape) {
        escape = false;
      } else if (c == '\\') {
        escape = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

struct HttpServer::Impl {
  Impl(Engine& e, const ServedModel& m, Metrics& mt, ServerOptions o)
      : engine(e), model(m), metrics(mt), opts(std::move(o)) {}

  Engine& engine;
  const ServedModel& model;
  Metrics& metrics;
  ServerOptions opts;
  httplib::Server svr;
  int port = -1;
  int listen_fd = -1;  // the listening socket, as the socket-options hook last saw it

  std::optional<json> parse_body(const httplib::Request& req, httplib::Response& res, ApiKind api) {
    if (json_nesting_depth(req.body) > kMaxJsonNesting) {
      send_error(res, api, bad_request(fmt::format("the JSON body is nested deeper than {} levels", kMaxJsonNesting)));
      return std::nullopt;
    }
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded()) {
      send_error(res, api, bad_request("the request body is not valid JSON"));
      return std::nullopt;
    }
    if (!body.is_object()) {
      send_error(res, api, bad_request("the request body must be a JSON object"));
      return std::nullopt;
    }
    return body;
  }

  bool authorized(const httplib::Request& req) const {
    if (opts.api_key.empty()) return true;
    const std::string auth = req.get_header_value("Authorization");
    if (auth.rfind("Bearer ", 0) == 0 && same_secret(auth.substr(7), opts.api_key)) return true;
    return same_secret(req.get_header_value("x-api-key"), opts.api_key);
  }

  // Compares in time independent of where the strings differ.
  static bool same_secret(const std::string& a, const std::string& b) {
    unsigned diff = a.size() == b.size() ? 0u : 1u;
    for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i % b.size()]);
    return diff == 0;
  }

  // Submits every choice; on failure cancels those already queued and returns the error.
  std::optional<ApiError> submit(Generation& g, const std::string& request_id) {
    const size_t total = g.spec.prompts.size() * static_cast<size_t>(g.spec.n);
    for (size_t p = 0; p < g.spec.prompts.size(); ++p) {
      for (int j = 0; j < g.spec.n; ++j) {
        const size_t idx = p * static_cast<size_t>(g.spec.n) + static_cast<size_t>(j);
        RequestOptions o = g.spec.options;
        o.prompt = g.spec.prompts[p];
        o.sampling.seed = g.spec.seed ? *g.spec.seed + idx : fresh_seed();
        o.api = api_name(g.codec->api());
        o.request_id = total > 1 ? fmt::format("{}/{}", request_id, idx) : request_id;
        if (g.spec.kv_policy || g.spec.kv_budget) {
          KvPolicyOptions kv = engine.default_kv();
          if (g.spec.kv_policy) kv.policy = *g.spec.kv_policy;
          if (g.spec.kv_budget) kv.budget = *g.spec.kv_budget;
          o.kv = kv;
        }
        auto h = engine.submit(std::move(o));
        if (!h.ok()) {
          g.cancel();
          ApiError e = from_status(h.status());
          if (total > 1) e.message = fmt::format("prompt {}: {}", p, e.message);
          return e;
        }
        g.handles.push_back(*h);
        ChoiceResult r;
        r.prompt_index = static_cast<int>(p);
        g.results.push_back(std::move(r));
        g.done.push_back(0);
      }
    }
    return std::nullopt;
  }

  void generate(const httplib::Request& req, httplib::Response& res, std::unique_ptr<GenerationCodec> codec) {
    const ApiKind api = codec->api();
    auto body = parse_body(req, res, api);
    if (!body) return;
    auto g = std::make_shared<Generation>();
    g->codec = std::move(codec);
    if (auto e = g->codec->parse(*body, g->spec)) return send_error(res, api, *e);
    const std::string request_id = req.has_header("X-Request-Id") ? req.get_header_value("X-Request-Id")
                                                                   : random_id("req-");
    res.set_header("X-Request-Id", request_id);
    if (g->spec.prompts.empty()) {  // Ollama: an empty prompt only loads the model
      return send_json(res, 200, g->codec->response(g->spec, {}));
    }
    if (auto e = submit(*g, request_id)) return send_error(res, api, *e);
    g->deadline = Clock::now() + std::chrono::seconds(opts.timeout_s);
    if (!g->spec.stream) return wait_whole(*g, res);
    g->last_write = Clock::now();
    res.set_chunked_content_provider(
        g->codec->stream_content_type(),
        [g](size_t, httplib::DataSink& sink) { return stream_step(*g, sink); },
        [g](bool success) {
          if (!success) g->cancel();
        });
  }

  void wait_whole(Generation& g, httplib::Response& res) {
    while (!g.all_done()) {
      if (Clock::now() > g.deadline) {
        g.cancel();
        return send_error(res, g.codec->api(),
                          ApiError{503, "timeout_error", fmt::format("the request ran past {} s", opts.timeout_s)});
      }
      g.poll(milliseconds(200), nullptr);
    }
    if (g.error) return send_error(res, g.codec->api(), *g.error);
    send_json(res, 200, g.codec->response(g.spec, g.results));
  }

  // One call of the chunked content provider: write what is ready, or wait a little for it.
  static bool stream_step(Generation& g, httplib::DataSink& sink) {
    std::string out;
    if (!g.begun) {
      out = g.codec->stream_begin(g.spec);
      g.begun = true;
    }
    bool failed = false;
    g.poll(milliseconds(100), [&](int i, const RequestUpdate& u) {
      if (u.done && u.finished.reason == FinishReason::kError) {
        failed = true;
        return;
      }
      out += g.codec->stream_update(g.spec, i, u);
    });
    const bool finished = g.all_done();
    if (failed || (finished && g.error)) {
      g.cancel();
      out += g.codec->stream_error(g.error.value_or(server_error("generation failed")));
      if (!sink.write(out.data(), out.size())) return false;
      sink.done();
      return true;
    }
    if (!finished && Clock::now() > g.deadline) {
      g.cancel();
      out += g.codec->stream_error(ApiError{503, "timeout_error", "the request ran past the server's time limit"});
      if (!sink.write(out.data(), out.size())) return false;
      sink.done();
      return true;
    }
    if (finished) out += g.codec->stream_end(g.spec, g.results);
    if (out.empty() && Clock::now() - g.last_write > kKeepAliveEvery) out = g.codec->keepalive();
    if (!out.empty()) {
      if (!sink.write(out.data(), out.size())) {
        g.cancel();  // the client went away: free its sequences now
        return false;
      }
      g.last_write = Clock::now();
    }
    if (finished) sink.done();
    return true;
  }

  // ------------------------------------------------------------------------------------------
  // Non-generation endpoints.

  json model_card() const {
    return json{{"id", model.id()}, {"object", "model"}, {"created", 0}, {"owned_by", "frugal"},
                {"meta", {{"n_vocab", model.model().config().n_vocab},
                          {"n_ctx_train", model.model().config().n_ctx_train},
                          {"n_ctx", model.n_ctx()},
                          {"n_embd", model.model().config().n_embd},
                          {"size", model.model().weights().bytes}}}};
  }

  json ollama_details() const {
    const ModelConfig& c = model.model().config();
    const double params = static_cast<double>(c.n_layer) * (4.0 * c.n_embd * c.n_embd + 3.0 * c.n_embd * c.n_ff) +
                          2.0 * static_cast<double>(c.n_vocab) * c.n_embd;
    std::string size = params >= 1e9 ? fmt::format("{:.1f}B", params / 1e9) : fmt::format("{:.0f}M", params / 1e6);
    return json{{"parent_model", ""},         {"format", "gguf"},
                {"family", c.arch},           {"families", json::array({c.arch})},
                {"parameter_size", size},     {"quantization_level", model.model().describe_types()}};
  }

  void tags(httplib::Response& res) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const auto size = fs::file_size(model.path(), ec);
    json m{{"name", model.id() + ":latest"}, {"model", model.id() + ":latest"}, {"modified_at", rfc3339_now()},
           {"size", ec ? 0 : size},          {"digest", ""},                     {"details", ollama_details()}};
    send_json(res, 200, json{{"models", json::array({m})}});
  }

  void show(const httplib::Request& req, httplib::Response& res) {
    auto body = parse_body(req, res, ApiKind::kOllama);
    if (!body) return;
    FieldReader r{*body, {}};
    auto name = r.string("model");
    if (!name) name = r.string("name");
    if (!r.ok()) return send_error(res, ApiKind::kOllama, *r.err);
    if (auto e = check_model(model, name, ApiKind::kOllama, true)) return send_error(res, ApiKind::kOllama, *e);
    json info = json::object();
    for (const auto& [key, value] : model.model().gguf().metadata()) {
      if (key.rfind("tokenizer.ggml.", 0) == 0) continue;  // vocabularies are huge
      if (value.type == GgufType::kString) {
        info[key] = value.s;
      } else if (value.type == GgufType::kF32 || value.type == GgufType::kF64) {
        info[key] = value.f;
      } else if (value.type == GgufType::kBool) {
        info[key] = value.i != 0;
      } else if (value.type != GgufType::kArray) {
        info[key] = value.i;
      }
    }
    send_json(res, 200,
              json{{"modelfile", "FROM " + model.path()},
                   {"parameters", fmt::format("num_ctx {}", model.n_ctx())},
                   {"template", model.tokenizer().chat_template()},
                   {"details", ollama_details()},
                   {"model_info", info},
                   {"capabilities", json::array({"completion"})}});
  }

  void tokenize(const httplib::Request& req, httplib::Response& res) {
    auto body = parse_body(req, res, ApiKind::kOpenAI);
    if (!body) return;
    FieldReader r{*body, {}};
    auto text = r.string("content");
    if (!text) text = r.string("prompt");
    const bool add_special = r.boolean("add_special").value_or(true);
    const bool parse_special = r.boolean("parse_special").value_or(false);
    const bool with_pieces = r.boolean("with_pieces").value_or(false);
    if (!r.ok()) return send_error(res, ApiKind::kOpenAI, *r.err);
    Result<std::vector<TokenId>> toks = std::vector<TokenId>{};
    if (text) {
      TokenizeOptions to;
      to.add_special = add_special;
      to.parse_special = parse_special;
      toks = model.tokenizer().encode(*text, to);
    } else if (body->contains("messages")) {
      std::vector<ChatTurn> turns;
      if (auto e = read_turns((*body)["messages"], {"system", "developer", "user", "assistant", "tool"}, turns)) {
        return send_error(res, ApiKind::kOpenAI, *e);
      }
      toks = model.chat_prompt(turns);
    } else {
      return send_error(res, ApiKind::kOpenAI, bad_request("'content' (text to tokenize) is required", "content"));
    }
    if (!toks.ok()) return send_error(res, ApiKind::kOpenAI, bad_request(toks.status().message()));
    json arr = json::array();
    for (TokenId t : *toks) {
      if (with_pieces) {
        arr.push_back({{"id", t}, {"piece", model.tokenizer().piece(t)}});
      } else {
        arr.push_back(t);
      }
    }
    send_json(res, 200, json{{"tokens", arr}, {"count", toks->size()}, {"max_model_len", model.n_ctx()}});
  }

  void detokenize(const httplib::Request& req, httplib::Response& res) {
    auto body = parse_body(req, res, ApiKind::kOpenAI);
    if (!body) return;
    FieldReader r{*body, {}};
    const json* toks = r.array("tokens");
    if (!r.ok()) return send_error(res, ApiKind::kOpenAI, *r.err);
    if (!toks) return send_error(res, ApiKind::kOpenAI, bad_request("'tokens' (a list of token ids) is required"));
    const bool with_pieces = r.boolean("with_pieces").value_or(false);
    if (!r.ok()) return send_error(res, ApiKind::kOpenAI, *r.err);
    const int64_t n_vocab = model.model().config().n_vocab;
    Detokenizer detok(model.tokenizer());
    std::string text;
    json pieces = json::array();
    for (const auto& t : *toks) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= n_vocab) {
        return send_error(res, ApiKind::kOpenAI,
                          bad_request(fmt::format("'tokens' must hold token ids in [0, {})", n_vocab), "tokens"));
      }
      const auto id = static_cast<TokenId>(t.get<int64_t>());
      text += detok.push(id);
      if (with_pieces) {
        // A piece may be part of a UTF-8 character: its bytes are exact, its text is not.
        const std::string piece = model.tokenizer().piece(id);
        json bytes = json::array();
        for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
        pieces.push_back({{"id", id}, {"piece", piece}, {"bytes", bytes}});
      }
    }
    text += detok.finish();
    json out{{"content", text}, {"prompt", text}};
    if (with_pieces) out["pieces"] = pieces;
    send_json(res, 200, out);
  }

  void count_tokens(const httplib::Request& req, httplib::Response& res) {
    auto body = parse_body(req, res, ApiKind::kAnthropic);
    if (!body) return;
    FieldReader r{*body, {}};
    const auto name = r.string("model");
    if (!r.ok()) return send_error(res, ApiKind::kAnthropic, *r.err);
    if (auto e = check_model(model, name, ApiKind::kAnthropic, true)) return send_error(res, ApiKind::kAnthropic, *e);
    std::vector<ChatTurn> turns;
    if (body->contains("system") && !(*body)["system"].is_null()) {
      ChatTurn sys{"system", {}};
      if (auto e = content_text((*body)["system"], "system", sys.content)) {
        return send_error(res, ApiKind::kAnthropic, *e);
      }
      turns.push_back(std::move(sys));
    }
    if (!body->contains("messages")) return send_error(res, ApiKind::kAnthropic, bad_request("messages: Field required"));
    if (auto e = read_turns((*body)["messages"], {"user", "assistant"}, turns)) {
      return send_error(res, ApiKind::kAnthropic, *e);
    }
    auto toks = model.chat_prompt(turns);
    if (!toks.ok()) return send_error(res, ApiKind::kAnthropic, bad_request(toks.status().message()));
    send_json(res, 200, json{{"input_tokens", toks->size()}});
  }

  void install_routes() {
    svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.path == "/health" || req.path == "/v1/health" || authorized(req)) {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      send_error(res, api_for_path(req.path), unauthorized("invalid or missing API key (send 'Authorization: "
                                                           "Bearer KEY' or 'x-api-key: KEY')"));
      return httplib::Server::HandlerResponse::Handled;
    });
    // Errors httplib raises itself (unknown path, body too large, malformed request line) get a body
    // in the API's own shape.
    svr.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      ApiError e{res.status, "invalid_request_error", {}, {}, {}};
      if (res.status == 404) e = not_found(fmt::format("no such endpoint: {} {}", req.method, req.path));
      if (res.status == 405) e.message = fmt::format("method {} is not allowed on {}", req.method, req.path);
      if (res.status == 413) e.message = "the request body is larger than the server accepts (--max-body)";
      if (e.message.empty()) e.message = fmt::format("HTTP {}", res.status);
      res.set_content(dump(error_json(api_for_path(req.path), e)), "application/json");
      return httplib::Server::HandlerResponse::Handled;
    }));
    svr.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& ex) {
        what = ex.what();
      } catch (...) {
      }
      send_error(res, api_for_path(req.path), server_error(what));
    });
    svr.set_logger([this](const httplib::Request&, const httplib::Response& res) { metrics.count_http(res.status); });

    const auto now_s = [] {
      return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
    };
    svr.Post("/v1/chat/completions", [this, now_s](const httplib::Request& req, httplib::Response& res) {
      generate(req, res, make_openai_chat_codec(model, now_s()));
    });
    svr.Post("/v1/completions", [this, now_s](const httplib::Request& req, httplib::Response& res) {
      generate(req, res, make_openai_completion_codec(model, now_s()));
    });
    svr.Post("/v1/messages", [this](const httplib::Request& req, httplib::Response& res) {
      generate(req, res, make_anthropic_codec(model));
    });
    svr.Post("/v1/messages/count_tokens",
             [this](const httplib::Request& req, httplib::Response& res) { count_tokens(req, res); });
    svr.Post("/api/generate", [this](const httplib::Request& req, httplib::Response& res) {
      generate(req, res, make_ollama_generate_codec(model));
    });
    svr.Post("/api/chat", [this](const httplib::Request& req, httplib::Response& res) {
      generate(req, res, make_ollama_chat_codec(model));
    });
    svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, json{{"object", "list"}, {"data", json::array({model_card()})}});
    });
    svr.Get("/api/tags", [this](const httplib::Request&, httplib::Response& res) { tags(res); });
    svr.Post("/api/show", [this](const httplib::Request& req, httplib::Response& res) { show(req, res); });
    svr.Get("/api/version", [](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, json{{"version", "0.1.0"}});
    });
    const auto health = [](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, json{{"status", "ok"}});
    };
    svr.Get("/health", health);
    svr.Get("/v1/health", health);
    svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics.render(engine.stats()), "text/plain; version=0.0.4");
    });
    svr.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) { tokenize(req, res); });
    svr.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) { detokenize(req, res); });
  }
};

HttpServer::HttpServer(Engine& engine, const ServedModel& model, Metrics& metrics, ServerOptions opts)
    : impl_(std::make_unique<Impl>(engine, model, metrics, std::move(opts))) {
  Impl& s = *impl_;
  const int threads = s.opts.threads_http > 0 ? s.opts.threads_http : 4 * engine.stats().n_slots + 64;
  s.svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  s.svr.set_payload_max_length(s.opts.max_body_bytes);
  s.svr.set_read_timeout(s.opts.timeout_s, 0);
  s.svr.set_write_timeout(s.opts.timeout_s, 0);
  s.svr.set_keep_alive_timeout(5);
  // The listening socket is wanted after bind (below); httplib's own options are kept.
  s.svr.set_socket_options([&s](socket_t sock) {
    httplib::default_socket_options(sock);
    s.listen_fd = static_cast<int>(sock);
  });
  s.install_routes();
}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::bind() {
  Impl& s = *impl_;
  if (s.opts.port == 0) {
    s.port = s.svr.bind_to_any_port(s.opts.host);
  } else if (s.svr.bind_to_port(s.opts.host, s.opts.port)) {
    s.port = s.opts.port;
  }
  if (s.port <= 0) {
    return error(ErrorCode::kIo, "cannot listen on {}:{} (address in use, or not an address of this machine)",
                 s.opts.host, s.opts.port);
  }
  // Debian's libcpp-httplib listens with a backlog of 5: a burst of clients connecting at once (64
  // streaming clients, seen on a 16-core GPU machine) overflows it and the kernel resets some of
  // them before the accept loop gets to them. listen() again on the bound socket raises it.
  if (s.listen_fd >= 0 && ::listen(s.listen_fd, SOMAXCONN) != 0) {
    return error(ErrorCode::kIo, "listen backlog on {}:{}: {}", s.opts.host, s.port, std::strerror(errno));
  }
  return ok_status();
}

int HttpServer::port() const { return impl_->port; }

void HttpServer::run() { impl_->svr.listen_after_bind(); }

void HttpServer::stop() {
  if (impl_ && impl_->svr.is_running()) impl_->svr.stop();
}

}  // namespace frugal::server
