// The JSON-schema constraint: compiling arbitrary schemas, then matching arbitrary bytes against
// what compiled. Input: the first line is the schema (JSON), the rest the generated text.
// Checks: compile fails only with a message; accepts() agrees with feeding a copy; a document the
// matcher calls complete is valid JSON (what the client will parse).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "frugal/engine/json_constraint.h"

namespace {

[[noreturn]] void fail(const char* what, std::string_view doc) {
  std::fprintf(stderr, "property violated: %s (text: %.*s)\n", what, static_cast<int>(doc.size()), doc.data());
  std::abort();
}

void match(const std::shared_ptr<const frugal::JsonSchema>& schema, std::string_view text) {
  frugal::JsonMatcher m(schema), scratch(schema);
  size_t fed = 0;
  // Token-sized steps (1 to 4 bytes), as the engine asks about a token's bytes before feeding them.
  for (size_t step = 1; fed < text.size(); step = step % 4 + 1) {
    const std::string_view piece = text.substr(fed, step);
    const bool would = m.accepts(piece, scratch);
    frugal::JsonMatcher copy = m;
    if (copy.feed(piece) != would) fail("accepts() differs from feed()", text.substr(0, fed + piece.size()));
    if (!would) break;
    m = copy;
    fed += piece.size();
  }
  if (m.failed()) fail("matcher failed without rejecting a byte", text.substr(0, fed));
  if (m.complete()) {
    const std::string_view doc = text.substr(0, fed);
    if (!nlohmann::json::accept(doc)) fail("complete document is not valid JSON", doc);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nl = input.find('\n');
  const std::string_view schema_text = input.substr(0, nl);
  const std::string_view text = nl == std::string_view::npos ? std::string_view() : input.substr(nl + 1);

  match(frugal::JsonSchema::any_json_object(), text);
  const auto schema_json = nlohmann::ordered_json::parse(schema_text, nullptr, /*allow_exceptions=*/false);
  if (schema_json.is_discarded()) return 0;
  auto schema = frugal::JsonSchema::compile(schema_json);
  if (!schema.ok()) {
    if (schema.status().message().empty()) std::abort();
    return 0;
  }
  match(schema.value(), text);
  return 0;
}
