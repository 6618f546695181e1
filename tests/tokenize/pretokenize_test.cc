// Pre-tokenizer splits. Expected words are worked out by hand from the regexes in pretokenize.h
// (leftmost-first alternation, greedy quantifiers with backtracking).
#include "frugal/tokenize/pretokenize.h"

#include <gtest/gtest.h>

#include "frugal/tokenize/unicode.h"

namespace frugal {
namespace {

std::vector<std::string> split(PreTokenizerKind kind, std::string_view text) {
  std::vector<uint32_t> cpts;
  std::vector<uint32_t> offsets;
  for (const char* p = text.data(); p < text.data() + text.size();) {
    offsets.push_back(static_cast<uint32_t>(p - text.data()));
    cpts.push_back(unicode::decode_utf8(p));
  }
  offsets.push_back(static_cast<uint32_t>(text.size()));
  std::vector<uint8_t> flags;
  for (uint32_t c : cpts) flags.push_back(unicode::flags(c));
  std::vector<uint32_t> ends;
  pretokenize(kind, cpts, flags, ends);
  std::vector<std::string> words;
  uint32_t b = 0;
  for (uint32_t e : ends) {
    EXPECT_GT(e, b) << "empty word";
    words.emplace_back(text.substr(offsets[b], offsets[e] - offsets[b]));
    b = e;
  }
  EXPECT_EQ(b, cpts.size()) << "words must cover the text";
  return words;
}

using Words = std::vector<std::string>;

TEST(PreTokenize, Gpt2) {
  const auto k = PreTokenizerKind::kGpt2;
  EXPECT_EQ(split(k, ""), Words{});
  EXPECT_EQ(split(k, "Hello world"), (Words{"Hello", " world"}));
  EXPECT_EQ(split(k, "I'm here"), (Words{"I", "'m", " here"}));
  EXPECT_EQ(split(k, "I'M"), (Words{"I", "'", "M"}));  // contractions are case-sensitive here
  EXPECT_EQ(split(k, "they'll"), (Words{"they", "'ll"}));
  EXPECT_EQ(split(k, "  hi"), (Words{" ", " hi"}));
  EXPECT_EQ(split(k, "a  \n b"), (Words{"a", "  \n", " b"}));
  EXPECT_EQ(split(k, "123abc"), (Words{"123", "abc"}));
  EXPECT_EQ(split(k, " 2024"), (Words{" 2024"}));
  EXPECT_EQ(split(k, "$$$ x!!"), (Words{"$$$", " x", "!!"}));
  EXPECT_EQ(split(k, "tail  "), (Words{"tail", "  "}));
  EXPECT_EQ(split(k, "\tx"), (Words{"\t", "x"}));
  EXPECT_EQ(split(k, "na\xC3\xAFve caf\xC3\xA9"), (Words{"na\xC3\xAFve", " caf\xC3\xA9"}));
}

TEST(PreTokenize, Llama3) {
  const auto k = PreTokenizerKind::kLlama3;
  EXPECT_EQ(split(k, "1234567"), (Words{"123", "456", "7"}));
  EXPECT_EQ(split(k, "Hello, world!\n\nBye"), (Words{"Hello", ",", " world", "!\n\n", "Bye"}));
  EXPECT_EQ(split(k, "I'M don't"), (Words{"I", "'M", " don", "'t"}));
  EXPECT_EQ(split(k, "WE'RE"), (Words{"WE", "'RE"}));
  EXPECT_EQ(split(k, " \t x"), (Words{" \t", " x"}));
  EXPECT_EQ(split(k, "a\n\n  b"), (Words{"a", "\n\n", " ", " b"}));
  EXPECT_EQ(split(k, "x  "), (Words{"x", "  "}));
  EXPECT_EQ(split(k, "\xD9\xA3\xD9\xA4\xD9\xA5\xD9\xA6"), (Words{"\xD9\xA3\xD9\xA4\xD9\xA5", "\xD9\xA6"}));
  // A non-newline, non-letter, non-digit character joins the letters that follow it.
  EXPECT_EQ(split(k, "\xC2\xA0word"), (Words{"\xC2\xA0word"}));
  EXPECT_EQ(split(k, "(hi)"), (Words{"(hi", ")"}));
  EXPECT_EQ(split(k, "x = 10;\r\n"), (Words{"x", " =", " ", "10", ";\r\n"}));
  EXPECT_EQ(split(k, " \r\n\tfoo"), (Words{" \r\n", "\tfoo"}));
}

TEST(PreTokenize, Qwen2SplitsEveryDigit) {
  const auto k = PreTokenizerKind::kQwen2;
  EXPECT_EQ(split(k, "12345"), (Words{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(split(k, "abc123 x"), (Words{"abc", "1", "2", "3", " x"}));
  EXPECT_EQ(split(k, "I'M"), (Words{"I", "'M"}));
}

TEST(PreTokenize, DefaultAppliesFourRegexesInTurn) {
  const auto k = PreTokenizerKind::kDefault;
  // [\p{P}$+<=>^~|]+ first, then the gpt2 words, then \p{N}+, then ASCII digit triples.
  EXPECT_EQ(split(k, "Hello, world 12345!"), (Words{"Hello", ",", " world", " ", "123", "45", "!"}));
  EXPECT_EQ(split(k, "a+=b"), (Words{"a", "+=", "b"}));
  EXPECT_EQ(split(k, "`x`"), (Words{"`", "x", "`"}));  // ` is a symbol: split by the gpt2 regex only
}

}  // namespace
}  // namespace frugal
