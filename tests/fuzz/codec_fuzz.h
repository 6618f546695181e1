// What the API codec targets share: the server tests' tiny random chat model served once per
// process, and one request body checked the way the HTTP layer would hand it over. Input: byte 0
// picks the endpoint, the rest is the body.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string_view>

#include "frugal/model/model.h"
#include "frugal/server/codec.h"
#include "frugal/server/http_server.h"
#include "server/test_model.h"

namespace frugal::fuzz {

[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "property violated: %s\n", what);
  std::abort();
}

inline const server::ServedModel& served_model() {
  static const auto* served = [] {
    auto model = Model::load(testing::tiny_chat_model_path());
    if (!model.ok()) {
      std::fprintf(stderr, "cannot load the tiny chat model: %s\n", model.status().message().c_str());
      std::exit(1);
    }
    auto tok = Tokenizer::from_gguf(model.value()->gguf());
    if (!tok.ok()) {
      std::fprintf(stderr, "cannot build its tokenizer: %s\n", tok.status().message().c_str());
      std::exit(1);
    }
    // Alive for the whole process, as in `frugal serve`.
    return new server::ServedModel(*std::move(model).value().release(), *std::move(tok).value().release(), "tiny",
                                   testing::tiny_chat_model_path(), 128);
  }();
  return *served;
}

// The body goes through what the server does before a codec sees it (the nesting limit, parsing,
// "must be an object"); then the codec must either fill a spec whose prompts are real token ids or
// refuse with a 4xx. An exception would reach the server's handler as a 500: also a finding.
inline void check_codec(server::GenerationCodec& codec, std::string_view body_text) {
  if (server::json_nesting_depth(body_text) > server::kMaxJsonNesting) return;
  const auto body = server::json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) return;
  server::GenSpec spec;
  std::optional<server::ApiError> err;
  try {
    err = codec.parse(body, spec);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parse threw: %s\n", e.what());
    fail("a request body made the codec throw (a 500, not a 4xx)");
  }
  if (err) {
    if (err->status < 400 || err->status >= 500) fail("a bad request got a status outside 4xx");
    if (err->message.empty()) fail("an error without a message");
    (void)server::dump(server::error_json(codec.api(), *err));
    return;
  }
  if (spec.n < 1) fail("a spec with no choices");
  const int32_t n_vocab = served_model().tokenizer().n_vocab();
  for (const auto& prompt : spec.prompts) {
    for (TokenId id : prompt) {
      if (id < 0 || id >= n_vocab) fail("a prompt token out of the vocabulary");
    }
  }
  (void)codec.stream_begin(spec);
}

}  // namespace frugal::fuzz
