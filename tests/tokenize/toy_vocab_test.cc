// SPM and BPE on small in-memory vocabularies, where every expected id follows by hand from the
// merge rules (quantization.md section 2.6): SPM merges the highest-scoring pair first, BPE the
// lowest-ranked merge, both leftmost first on ties.
#include <gtest/gtest.h>

#include "frugal/tokenize/unicode.h"
#include "frugal/tokenize/vocab.h"

namespace frugal {
namespace {

constexpr int kCtl = static_cast<int>(GgufTokenType::kControl);
constexpr int kNormal = static_cast<int>(GgufTokenType::kNormal);
constexpr int kByte = static_cast<int>(GgufTokenType::kByte);
constexpr int kUser = static_cast<int>(GgufTokenType::kUserDefined);

std::vector<TokenId> enc(const Tokenizer& t, std::string_view s, bool add_special = false, bool parse = false) {
  auto r = t.encode(s, TokenizeOptions{add_special, parse});
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::vector<TokenId>{};
}

// SPM: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then the normal pieces below.
struct SpmToy {
  static constexpr TokenId kByte0 = 3;
  std::vector<std::string> pieces = {"\xE2\x96\x81", "a", "b", "c", "ab", "bc", "abc", "aa", "\xE2\x96\x81" "a", "<i>"};
  std::vector<float> piece_scores = {-5, -3, -3, -3, -1, -0.5f, -0.1f, -1, -2, 0};
  TokenId id(std::string_view piece) const {
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (pieces[i] == piece) return kByte0 + 256 + static_cast<TokenId>(i);
    }
    ADD_FAILURE() << "no piece " << piece;
    return -1;
  }
  VocabSpec spec() const {
    VocabSpec s;
    s.model = "llama";
    s.tokens = {"<unk>", "<s>", "</s>"};
    s.token_types = {static_cast<int>(GgufTokenType::kUnknown), kCtl, kCtl};
    s.scores = {0, 0, 0};
    for (int b = 0; b < 256; ++b) {
      s.tokens.push_back(fmt::format("<0x{:02X}>", b));
      s.token_types.push_back(kByte);
      s.scores.push_back(0);
    }
    for (size_t i = 0; i < pieces.size(); ++i) {
      s.tokens.push_back(pieces[i]);
      s.token_types.push_back(pieces[i] == "<i>" ? kUser : kNormal);
      s.scores.push_back(piece_scores[i]);
    }
    return s;
  }
};

TEST(SpmToy, MergesByScoreNotPosition) {
  SpmToy toy;
  auto tok = make_tokenizer(toy.spec());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  // "▁abc": bc (-0.5) beats ab (-1) and ▁a (-2); then a+bc forms abc (-0.1); ▁+abc is no token.
  EXPECT_EQ(enc(**tok, "abc"), (std::vector<TokenId>{toy.id("\xE2\x96\x81"), toy.id("abc")}));
  // With BOS (SPM adds it by default): ab (-1) beats ▁a (-2); nothing merges across a space.
  EXPECT_EQ(enc(**tok, "ab c", true), (std::vector<TokenId>{1, toy.id("\xE2\x96\x81"), toy.id("ab"),
                                                              toy.id("\xE2\x96\x81"), toy.id("c")}));
}

TEST(SpmToy, TiesGoToTheLeftmostPair) {
  SpmToy toy;
  auto tok = make_tokenizer(toy.spec());
  ASSERT_TRUE(tok.ok());
  // "▁aaa": ▁a (-2) loses to both aa pairs (-1); the left aa merges first, leaving ▁, aa, a.
  EXPECT_EQ(enc(**tok, "aaa"), (std::vector<TokenId>{toy.id("\xE2\x96\x81"), toy.id("aa"), toy.id("a")}));
}

TEST(SpmToy, ByteFallbackForUnknownCharacters) {
  SpmToy toy;
  auto tok = make_tokenizer(toy.spec());
  ASSERT_TRUE(tok.ok());
  // é = C3 A9 is no piece: one byte token per UTF-8 byte.
  EXPECT_EQ(enc(**tok, "\xC3\xA9"),
            (std::vector<TokenId>{toy.id("\xE2\x96\x81"), SpmToy::kByte0 + 0xC3, SpmToy::kByte0 + 0xA9}));
  EXPECT_EQ((*tok)->piece(SpmToy::kByte0 + 0xC3), "\xC3");
  EXPECT_EQ((*tok)->piece(toy.id("\xE2\x96\x81" "a")), " a");
}

TEST(SpmToy, SpecialTokensAndSpacePrefix) {
  SpmToy toy;
  auto tok = make_tokenizer(toy.spec());
  ASSERT_TRUE(tok.ok());
  const TokenId sp = toy.id("\xE2\x96\x81");
  // Control text is plain text unless parse_special; after a parsed special token the next text
  // gets the space prefix again. User-defined tokens are cut out either way.
  EXPECT_EQ(enc(**tok, "a<s>a", false, true), (std::vector<TokenId>{toy.id("\xE2\x96\x81" "a"), 1,
                                                                    toy.id("\xE2\x96\x81" "a")}));
  EXPECT_EQ(enc(**tok, "a<i>a"), (std::vector<TokenId>{toy.id("\xE2\x96\x81" "a"), toy.id("<i>"),
                                                       toy.id("\xE2\x96\x81" "a")}));
  const std::vector<TokenId> plain = enc(**tok, "<s>");
  EXPECT_EQ(plain.front(), sp);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_EQ((*tok)->piece(1), "");
  EXPECT_EQ((*tok)->piece(1, true), "<s>");
  EXPECT_EQ((*tok)->piece(toy.id("<i>")), "<i>");
}

TEST(SpmToy, DefaultsAndEndOfGeneration) {
  SpmToy toy;
  auto tok = make_tokenizer(toy.spec());
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ((*tok)->bos(), 1);
  EXPECT_EQ((*tok)->eos(), 2);
  EXPECT_EQ((*tok)->eot(), -1);
  EXPECT_TRUE((*tok)->add_bos());
  EXPECT_TRUE((*tok)->add_space_prefix());
  EXPECT_TRUE((*tok)->is_eog(2));
  EXPECT_FALSE((*tok)->is_eog(1));
  EXPECT_TRUE((*tok)->is_control(1));
  EXPECT_FALSE((*tok)->is_control(toy.id("a")));
  EXPECT_EQ(enc(**tok, "", true), std::vector<TokenId>{1});
  EXPECT_EQ(enc(**tok, ""), std::vector<TokenId>{});

  VocabSpec s = toy.spec();
  s.add_bos = false;
  s.add_eos = true;
  s.add_space_prefix = false;
  auto t2 = make_tokenizer(std::move(s));
  ASSERT_TRUE(t2.ok());
  EXPECT_EQ(enc(**t2, "ab", true), (std::vector<TokenId>{toy.id("ab"), 2}));
}

// Byte-level BPE: ids 0..255 are the byte characters in byte order, then merged tokens.
struct BpeToy {
  std::vector<std::string> merged = {"\xC4\xA0" "h", "hi", "\xC4\xA0" "hi", "aa", "ll", "he", "hell", "hello"};
  std::vector<std::string> merges = {"\xC4\xA0 h", "h i", "\xC4\xA0h i", "a a", "l l", "h e", "he ll", "hell o"};
  static std::string byte_char(int b) {
    std::string s;
    unicode::append_utf8(s, byte_to_unicode(static_cast<uint8_t>(b)));
    return s;
  }
  TokenId id(std::string_view t) const {
    for (size_t i = 0; i < merged.size(); ++i) {
      if (merged[i] == t) return 256 + static_cast<TokenId>(i);
    }
    for (int b = 0; b < 256; ++b) {
      if (byte_char(b) == t) return b;
    }
    ADD_FAILURE() << "no token " << t;
    return -1;
  }
  VocabSpec spec(const char* pre) const {
    VocabSpec s;
    s.model = "gpt2";
    s.pre = pre;
    for (int b = 0; b < 256; ++b) s.tokens.push_back(byte_char(b));
    for (const auto& m : merged) s.tokens.push_back(m);
    s.tokens.push_back("<|endoftext|>");
    s.tokens.push_back("<|im_start|>");
    s.token_types.assign(s.tokens.size(), kNormal);
    s.token_types[s.tokens.size() - 1] = kCtl;
    s.merges = merges;
    return s;
  }
};

TEST(BpeToy, ByteMapIsGpt2s) {
  // Printable Latin-1 stands for itself; space is U+0120 'Ġ', newline U+010A 'Ċ', byte 0 U+0100.
  EXPECT_EQ(byte_to_unicode('a'), uint32_t('a'));
  EXPECT_EQ(byte_to_unicode(0xE9), 0xE9u);
  EXPECT_EQ(byte_to_unicode(' '), 0x120u);
  EXPECT_EQ(byte_to_unicode('\n'), 0x10Au);
  EXPECT_EQ(byte_to_unicode(0), 0x100u);
  EXPECT_EQ(byte_to_unicode(0xAD), 0x143u);  // soft hyphen is the last remapped byte
  for (int b = 0; b < 256; ++b) EXPECT_EQ(unicode_to_byte(byte_to_unicode(static_cast<uint8_t>(b))), b);
  EXPECT_EQ(unicode_to_byte(0x144), -1);
}

TEST(BpeToy, MergesByRank) {
  BpeToy toy;
  const auto s = toy.spec("gpt-2");
  auto tok = make_tokenizer(s);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  // " hi": Ġ h (rank 0) before h i (rank 1), then Ġh i (rank 2).
  EXPECT_EQ(enc(**tok, " hi"), std::vector<TokenId>{toy.id("\xC4\xA0" "hi")});
  // "hello": l l (4) and h e (5) before he ll (6) and hell o (7).
  EXPECT_EQ(enc(**tok, "hello hi"), (std::vector<TokenId>{toy.id("hello"), toy.id("\xC4\xA0" "hi")}));
  // "aaa": both a-a pairs have rank 3; the left one merges.
  EXPECT_EQ(enc(**tok, "aaa"), (std::vector<TokenId>{toy.id("aa"), 'a'}));
  // "hip": h i merges, p stays a byte character.
  EXPECT_EQ(enc(**tok, "hip"), (std::vector<TokenId>{toy.id("hi"), 'p'}));
  EXPECT_EQ((*tok)->piece(toy.id("\xC4\xA0" "hi")), " hi");
  EXPECT_EQ((*tok)->piece(0xE9), "\xE9");  // half a character: raw byte
}

TEST(BpeToy, IgnoreMergesTakesWholeWordTokens) {
  BpeToy toy;
  auto s = toy.spec("llama-bpe");
  // "hello" needs merges that are missing here; llama3 vocabularies look the word up first.
  s.tokens.push_back("hlo");
  s.token_types.push_back(kNormal);
  auto with = make_tokenizer(s);
  ASSERT_TRUE(with.ok()) << with.status().to_string();
  const TokenId hlo = static_cast<TokenId>(s.tokens.size()) - 1;
  EXPECT_EQ(enc(**with, "hlo"), std::vector<TokenId>{hlo});
  s.pre = "dbrx";  // the same regex, without ignore_merges
  auto without = make_tokenizer(s);
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(enc(**without, "hlo"), (std::vector<TokenId>{'h', 'l', 'o'}));
}

TEST(BpeToy, AddBosDependsOnThePreTokenizer) {
  BpeToy toy;
  auto s = toy.spec("llama-bpe");
  s.bos_id = 256 + 8;  // <|endoftext|>
  auto llama3 = make_tokenizer(s);
  ASSERT_TRUE(llama3.ok());
  EXPECT_TRUE((*llama3)->add_bos());
  EXPECT_EQ(enc(**llama3, "hi", true), (std::vector<TokenId>{256 + 8, toy.id("hi")}));
  s.pre = "qwen2";
  auto qwen = make_tokenizer(s);
  ASSERT_TRUE(qwen.ok());
  EXPECT_FALSE((*qwen)->add_bos());
  EXPECT_EQ(enc(**qwen, "hi", true), std::vector<TokenId>{toy.id("hi")});
  s.add_bos = true;
  auto forced = make_tokenizer(s);
  ASSERT_TRUE(forced.ok());
  EXPECT_EQ(enc(**forced, "hi", true), (std::vector<TokenId>{256 + 8, toy.id("hi")}));
}

TEST(BpeToy, EndOfGenerationTokensFoundByText) {
  BpeToy toy;
  auto tok = make_tokenizer(toy.spec("qwen2"));
  ASSERT_TRUE(tok.ok());
  const TokenId eot = 256 + 8;
  // <|endoftext|> is a normal token in this vocabulary; llama.cpp turns it into a control token,
  // the EOT and an end-of-generation token.
  EXPECT_EQ((*tok)->eot(), eot);
  EXPECT_TRUE((*tok)->is_eog(eot));
  EXPECT_TRUE((*tok)->is_control(eot));
  EXPECT_EQ((*tok)->piece(eot), "");
  EXPECT_EQ((*tok)->piece(eot, true), "<|endoftext|>");
  EXPECT_EQ(enc(**tok, "<|endoftext|>", false, true), std::vector<TokenId>{eot});
  EXPECT_FALSE((*tok)->is_eog(eot + 1));
}

TEST(BpeToy, MissingCharactersAreDropped) {
  BpeToy toy;
  auto s = toy.spec("gpt-2");
  s.tokens['z'] = "[no z]";  // the character for byte 'z' is not in the vocabulary
  auto tok = make_tokenizer(s);
  ASSERT_TRUE(tok.ok());
  // llama.cpp looks each byte up as a one-byte token as a last resort and drops it when absent.
  EXPECT_EQ(enc(**tok, "aza"), (std::vector<TokenId>{'a', 'a'}));
}

TEST(BpeToy, DetokenizeCleansSpacesLikeLlamaCpp) {
  BpeToy toy;
  auto tok = make_tokenizer(toy.spec("gpt-2"));  // gpt-2 vocabularies ask for the clean-up
  ASSERT_TRUE(tok.ok());
  // Expected strings are llama_detokenize's output for the same text (llama.cpp c392e50).
  const std::pair<const char*, const char*> cases[] = {
      {"Hello , world !", "Hello, world!"},
      {"a ' b", "a'b"},
      {"it 's John 're 'll 't 'm 've 'd", "it's John're 'll 't'm've 'd"},
      {" ' ' x", "'' x"},
      {"  ,  ?", " , ?"},
      {"x ' ' ' y", "x'''y"},
      {"end ' ", "end'"},
      {"' s", "' s"},
      {" 's", "'s"},
  };
  for (const auto& [text, expect] : cases) {
    std::vector<TokenId> ids;
    for (char c : std::string_view(text)) ids.push_back(static_cast<uint8_t>(c));  // ids 0..255 are bytes
    EXPECT_EQ((*tok)->detokenize(ids), expect) << text;
  }
  auto qwen = make_tokenizer(toy.spec("qwen2"));  // qwen2 does not
  ASSERT_TRUE(qwen.ok());
  EXPECT_EQ((*qwen)->detokenize({' ', ',', ' ', '\'', 's'}), " , 's");
}

TEST(VocabErrors, NameTheKey) {
  BpeToy toy;
  auto s = toy.spec("no-such-pre");
  auto r = make_tokenizer(s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kNotSupported);
  EXPECT_NE(r.status().message().find("tokenizer.ggml.pre"), std::string::npos);

  s = toy.spec("gpt-2");
  s.model = "t5";
  r = make_tokenizer(s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tokenizer.ggml.model"), std::string::npos);

  s = toy.spec("gpt-2");
  s.merges = {};
  r = make_tokenizer(s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tokenizer.ggml.merges"), std::string::npos);

  s = toy.spec("gpt-2");
  s.tokens[5] = s.tokens[6];
  r = make_tokenizer(s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(r.status().message().find("duplicate"), std::string::npos);

  s = toy.spec("gpt-2");
  s.token_types.resize(3);
  r = make_tokenizer(s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tokenizer.ggml.token_type"), std::string::npos);

  s = toy.spec("gpt-2");
  s.add_bos = true;
  s.tokens.resize(12);  // the default BOS id 11 is inside the vocabulary...
  s.token_types.resize(12);
  EXPECT_TRUE(make_tokenizer(s).ok());
  s.tokens.resize(11);  // ...and now it is not
  s.token_types.resize(11);
  r = make_tokenizer(s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("bos_token_id"), std::string::npos);
}

TEST(Encode, RejectsInvalidUtf8WithTheOffset) {
  SpmToy toy;
  auto tok = make_tokenizer(toy.spec());
  ASSERT_TRUE(tok.ok());
  auto r = (*tok)->encode("ab\xC3\x28zz");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("byte offset 2"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("0xC3"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace frugal
