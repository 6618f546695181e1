// What the two tokenizer targets share: a tokenizer loaded once from a real vocabulary, and the
// properties every input must keep. The first input byte holds the options (bit 0: add_special,
// bit 1: parse_special); the rest is the text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "frugal/format/gguf.h"
#include "frugal/tokenize/tokenizer.h"

namespace frugal::fuzz {

// Aborts (a finding) with the reason on stderr.
[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "property violated: %s\n", what);
  std::abort();
}

inline std::unique_ptr<Tokenizer> load_tokenizer(const std::string& file_name) {
  const std::string path = std::string(FRUGAL_SHARED_MODELS_DIR) + "/" + file_name;
  auto file = GgufFile::open(path);
  if (!file.ok()) {
    std::fprintf(stderr, "fuzz target needs %s: %s\n", path.c_str(), file.status().message().c_str());
    std::exit(1);
  }
  auto tok = Tokenizer::from_gguf(*file.value());
  if (!tok.ok()) {
    std::fprintf(stderr, "cannot build the tokenizer of %s: %s\n", path.c_str(), tok.status().message().c_str());
    std::exit(1);
  }
  // The tokenizer keeps what it needs from the file; the file may close.
  return std::move(tok).value();
}

// Strict UTF-8 (no overlong forms, surrogates or code points past U+10FFFF), written here rather
// than taken from tokenize/ so the check does not share a bug with the code it checks.
inline bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<uint8_t>(s[i]);
    size_t n;
    uint32_t cp;
    if (b0 < 0x80) { ++i; continue; }
    if (b0 >= 0xC2 && b0 <= 0xDF) n = 2, cp = b0 & 0x1F;
    else if (b0 >= 0xE0 && b0 <= 0xEF) n = 3, cp = b0 & 0x0F;
    else if (b0 >= 0xF0 && b0 <= 0xF4) n = 4, cp = b0 & 0x07;
    else return false;
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const auto b = static_cast<uint8_t>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n;
  }
  return true;
}

// `roundtrip`: whether detokenize(encode(text)) must give the text back for these options (the
// caller knows when its vocabulary promises that).
inline void check_tokenizer(const Tokenizer& tok, const uint8_t* data, size_t size,
                            bool (*roundtrip)(const TokenizeOptions&, std::string_view)) {
  if (size == 0) return;
  TokenizeOptions opts;
  opts.add_special = (data[0] & 1) != 0;
  opts.parse_special = (data[0] & 2) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  auto ids = tok.encode(text, opts);
  if (!ids.ok()) {
    // The only documented failure is invalid UTF-8.
    if (valid_utf8(text)) fail("encode refused valid UTF-8");
    return;
  }
  if (!valid_utf8(text)) fail("encode accepted invalid UTF-8");
  for (TokenId id : ids.value()) {
    if (id < 0 || id >= tok.n_vocab()) fail("token id out of range");
    (void)tok.piece(id, false);
    (void)tok.piece(id, true);
  }
  const std::string plain = tok.detokenize(ids.value(), /*remove_special=*/false, /*unparse_special=*/opts.parse_special);
  (void)tok.detokenize(ids.value(), /*remove_special=*/true, /*unparse_special=*/!opts.parse_special);
  if (roundtrip(opts, text) && plain != text) fail("detokenize(encode(text)) != text");

  // The streaming detokenizer: always valid UTF-8, and equal to the whole-sequence text whenever
  // that is valid UTF-8 itself.
  Detokenizer detok(tok, /*render_special=*/opts.parse_special);
  std::string streamed;
  for (TokenId id : ids.value()) streamed += detok.push(id);
  streamed += detok.finish();
  if (!valid_utf8(streamed)) fail("Detokenizer produced invalid UTF-8");
  if (valid_utf8(plain) && streamed != plain) fail("Detokenizer output differs from detokenize()");
  // And on arbitrary ids (a model may sample anything), including ids out of range.
  Detokenizer raw(tok, true);
  std::string any;
  for (size_t i = 1; i + 1 < size; i += 2) {
    const TokenId id = static_cast<TokenId>((data[i] | (data[i + 1] << 8)) % tok.n_vocab());
    any += raw.push(id);
  }
  any += raw.finish();
  if (!valid_utf8(any)) fail("Detokenizer produced invalid UTF-8 from arbitrary ids");
}

}  // namespace frugal::fuzz
