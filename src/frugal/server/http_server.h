// The HTTP front end of `frugal serve`: routes for the OpenAI, Anthropic and Ollama APIs plus
// /health, /metrics, /tokenize and /detokenize, over one Engine. Safe defaults: loopback bind, an
// API key when one is set (Bearer or x-api-key; /health stays public), body size, nesting and
// prompt limits, socket and request timeouts, and errors in each API's own shape.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "frugal/core/status.h"
#include "frugal/engine/engine.h"
#include "frugal/server/api.h"
#include "frugal/server/metrics.h"

namespace frugal::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                 // 0: any free port (see HttpServer::port())
  std::string api_key;             // empty: no key needed
  size_t max_body_bytes = 8 << 20;
  int timeout_s = 600;             // socket read/write timeout and the longest a request may run
  int threads_http = 0;            // connections served at once; 0: 4 x parallel + 64
};

class HttpServer {
 public:
  HttpServer(Engine& engine, const ServedModel& model, Metrics& metrics, ServerOptions opts);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the socket; kIo naming host and port on failure.
  Status bind();
  int port() const;
  // Serves until stop() (from another thread or a signal watcher).
  void run();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Deepest nesting of arrays and objects in a JSON text (strings skipped), without parsing it;
// bodies are checked with it before the parser sees them, and refused (400) past kMaxJsonNesting.
int json_nesting_depth(std::string_view text);
inline constexpr int kMaxJsonNesting = 64;

}  // namespace frugal::server
