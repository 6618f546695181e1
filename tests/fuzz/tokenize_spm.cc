// The SentencePiece-style tokenizer (stories260K's llama vocabulary, with byte fallback) on
// arbitrary bytes, with and without special-token parsing; see tokenizer_fuzz.h for the checks.
#include "tokenizer_fuzz.h"

namespace {

const frugal::Tokenizer& tokenizer() {
  static const auto tok = frugal::fuzz::load_tokenizer("stories260K.gguf");
  return *tok;
}

// Plain text comes back exactly, except U+2581, which SPM uses for the space and renders as one.
bool roundtrip(const frugal::TokenizeOptions& opts, std::string_view text) {
  return !opts.add_special && !opts.parse_special && text.find("\xE2\x96\x81") == std::string_view::npos;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  frugal::fuzz::check_tokenizer(tokenizer(), data, size, roundtrip);
  return 0;
}
