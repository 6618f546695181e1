// UTF-8 and the Unicode character classes the pre-tokenizers need (internal to tokenize/).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace frugal::unicode {

// Class bits of one code point: exactly one general-category bit, plus kWhitespace for the
// White_Space property. Unassigned code points are kOther.
enum : uint8_t {
  kLetter = 1 << 0,       // \p{L}
  kNumber = 1 << 1,       // \p{N}
  kPunctuation = 1 << 2,  // \p{P}
  kSymbol = 1 << 3,       // \p{S}
  kMark = 1 << 4,         // \p{M}
  kSeparator = 1 << 5,    // \p{Z}
  kOther = 1 << 6,        // \p{C} and unassigned
  kWhitespace = 1 << 7,   // \s
};

struct FlagRange {
  uint32_t first;
  uint8_t flags;
};
extern const FlagRange kFlagRanges[];  // unicode_tables.cc
extern const size_t kFlagRangeCount;

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Flags of `cpt` (0 above U+10FFFF). O(1) after a one-time table build.
uint8_t flags(uint32_t cpt);

// Byte offset of the first byte that is not part of well-formed UTF-8 (RFC 3629: no overlong
// forms, no surrogates, nothing above U+10FFFF), or npos when the whole text is well formed.
size_t find_invalid_utf8(std::string_view text);

// Length of the UTF-8 sequence that `lead` starts (1 for bytes that cannot start one).
inline size_t utf8_len(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

// Decodes one code point of well-formed UTF-8 at `p` (caller validated) and advances `p`.
inline uint32_t decode_utf8(const char*& p) {
  const auto* s = reinterpret_cast<const uint8_t*>(p);
  if (s[0] < 0x80) {
    p += 1;
    return s[0];
  }
  if ((s[0] & 0xE0) == 0xC0) {
    p += 2;
    return (uint32_t(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
  }
  if ((s[0] & 0xF0) == 0xE0) {
    p += 3;
    return (uint32_t(s[0] & 0x0F) << 12) | (uint32_t(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
  }
  p += 4;
  return (uint32_t(s[0] & 0x07) << 18) | (uint32_t(s[1] & 0x3F) << 12) | (uint32_t(s[2] & 0x3F) << 6) |
         (s[3] & 0x3F);
}

void append_utf8(std::string& out, uint32_t cpt);

enum class Utf8Step { kComplete, kIncomplete, kInvalid };
// Classifies the bytes at the start of `s` (not empty): a complete well-formed character
// (`len` = its length), the start of one cut off by the end of `s` (`len` = s.size()), or an
// ill-formed sequence (`len` = its maximal subpart, at least 1, to be replaced by one U+FFFD).
Utf8Step next_utf8(std::string_view s, size_t& len);

}  // namespace frugal::unicode
