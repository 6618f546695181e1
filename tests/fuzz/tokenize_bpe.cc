// The byte-level BPE tokenizer (Qwen2's vocabulary and pre-tokenizer, ~150k tokens and their
// special tokens such as <|im_start|>) on arbitrary bytes, with and without special-token
// parsing; see tokenizer_fuzz.h for the checks.
#include "tokenizer_fuzz.h"

namespace {

const frugal::Tokenizer& tokenizer() {
  static const auto tok = frugal::fuzz::load_tokenizer("vocab-qwen2.gguf");
  return *tok;
}

// Byte-level BPE maps every byte to a token, and Qwen2's vocabulary asks for no clean-up of
// spaces, so any text comes back exactly; with special-token parsing on, the special tokens are
// rendered back as their text. BOS is never added by this vocabulary, so add_special changes
// nothing either.
bool roundtrip(const frugal::TokenizeOptions&, std::string_view) { return true; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  frugal::fuzz::check_tokenizer(tokenizer(), data, size, roundtrip);
  return 0;
}
