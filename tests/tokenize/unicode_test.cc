// Character classes and UTF-8 handling. Expected classes are Unicode facts (general category and
// White_Space from the Unicode 15.1 character database), not values read back from our table.
#include "frugal/tokenize/unicode.h"

#include <gtest/gtest.h>

namespace frugal::unicode {
namespace {

TEST(UnicodeFlags, GeneralCategories) {
  struct Case {
    uint32_t cpt;
    uint8_t expect;
  };
  const Case cases[] = {
      {'A', kLetter},           {'z', kLetter},           {0x00E9, kLetter},  // é
      {0x00AA, kLetter},        // ª (Lo)
      {0x4E2D, kLetter},        // 中
      {0xAC00, kLetter},        // 가
      {0x2EBF0, kLetter},       // CJK Extension I, new in Unicode 15.1
      {'7', kNumber},           {0x0663, kNumber},        // Arabic-Indic three
      {0x216B, kNumber},        // Roman numeral twelve (Nl)
      {0x00BD, kNumber},        // ½ (No)
      {'!', kPunctuation},      {'_', kPunctuation},      {0x3001, kPunctuation},  // 、
      {'$', kSymbol},           {'+', kSymbol},           {'`', kSymbol},    {0x20AC, kSymbol},  // €
      {0x1F600, kSymbol},       // 😀
      {0x0301, kMark},          // combining acute
      {0x0000, kOther},         {0x001F, kOther},         {0x200B, kOther},  // zero width space (Cf)
      {0xE000, kOther},         // private use
      {0x0378, kOther},         // unassigned
      {0x10FFFF, kOther},
  };
  for (const Case& c : cases) EXPECT_EQ(flags(c.cpt), c.expect) << std::hex << "U+" << c.cpt;
}

TEST(UnicodeFlags, WhiteSpaceIsThePropertyNotTheCategory) {
  for (uint32_t c : {0x09u, 0x0Au, 0x0Bu, 0x0Cu, 0x0Du, 0x85u}) {
    EXPECT_EQ(flags(c), kOther | kWhitespace) << std::hex << c;
  }
  for (uint32_t c : {0x20u, 0xA0u, 0x1680u, 0x2000u, 0x200Au, 0x202Fu, 0x205Fu, 0x3000u}) {
    EXPECT_EQ(flags(c), kSeparator | kWhitespace) << std::hex << c;
  }
  EXPECT_EQ(flags(0x2028), kSeparator | kWhitespace);
  EXPECT_EQ(flags(0x2029), kSeparator | kWhitespace);
  // Information separators are \s to Python's str.isspace but not White_Space.
  EXPECT_EQ(flags(0x1C), kOther);
  EXPECT_EQ(flags(0x180E), kOther);  // Mongolian vowel separator left White_Space in Unicode 6.3
}

TEST(UnicodeFlags, OutOfRange) { EXPECT_EQ(flags(0x110000), 0); }

TEST(Utf8, FindInvalid) {
  EXPECT_EQ(find_invalid_utf8(""), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("plain"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("abc\xC3"), 3u);               // truncated
  EXPECT_EQ(find_invalid_utf8("ab\x80z"), 2u);               // lone continuation byte
  EXPECT_EQ(find_invalid_utf8("\xC0\x80"), 0u);              // overlong NUL
  EXPECT_EQ(find_invalid_utf8("x\xE0\x80\xAF"), 1u);         // overlong '/'
  EXPECT_EQ(find_invalid_utf8("xy\xED\xA0\x80"), 2u);        // surrogate U+D800
  EXPECT_EQ(find_invalid_utf8("\xF4\x90\x80\x80"), 0u);      // above U+10FFFF
  EXPECT_EQ(find_invalid_utf8("\xF5\x80\x80\x80"), 0u);
  EXPECT_EQ(find_invalid_utf8("ok\xE2\x82"), 2u);
  EXPECT_EQ(find_invalid_utf8("\xE2\x82\xAC\xFF"), 3u);
}

TEST(Utf8, NextStepMaximalSubparts) {
  size_t len = 0;
  EXPECT_EQ(next_utf8("\xE2\x82\xAC!", len), Utf8Step::kComplete);
  EXPECT_EQ(len, 3u);
  EXPECT_EQ(next_utf8("\xE2\x82", len), Utf8Step::kIncomplete);
  EXPECT_EQ(len, 2u);
  EXPECT_EQ(next_utf8("\xF0\x9F\x98", len), Utf8Step::kIncomplete);
  EXPECT_EQ(len, 3u);
  // An ill-formed sequence is replaced by one U+FFFD per maximal subpart (Unicode 3.9 / D93b).
  EXPECT_EQ(next_utf8("\xE2\x82x", len), Utf8Step::kInvalid);
  EXPECT_EQ(len, 2u);
  EXPECT_EQ(next_utf8("\xED\xA0\x80", len), Utf8Step::kInvalid);
  EXPECT_EQ(len, 1u);
  EXPECT_EQ(next_utf8("\x80", len), Utf8Step::kInvalid);
  EXPECT_EQ(len, 1u);
}

TEST(Utf8, EncodeDecodeRoundTrip) {
  for (uint32_t c : {0x0u, 0x41u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFFu, 0x10000u, 0x10FFFFu}) {
    std::string s;
    append_utf8(s, c);
    ASSERT_EQ(find_invalid_utf8(s), std::string_view::npos) << std::hex << c;
    const char* p = s.data();
    EXPECT_EQ(decode_utf8(p), c);
    EXPECT_EQ(p, s.data() + s.size());
  }
}

}  // namespace
}  // namespace frugal::unicode
