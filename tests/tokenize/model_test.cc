// The real vocabularies (stories260K: SPM; vocab-qwen2: byte-level BPE, qwen2 pre-tokenizer)
// against ids recorded from llama.cpp (tests/data/README.md), plus round trips, streaming
// detokenization and load/encode speed.
#include <time.h>

#include <fstream>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "frugal/format/gguf.h"
#include "frugal/tokenize/tokenizer.h"
#include "frugal/tokenize/unicode.h"

namespace frugal {
namespace {

struct Loaded {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tok;
};

const Loaded& load(const std::string& name) {
  static std::map<std::string, Loaded> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  Loaded l;
  auto f = GgufFile::open(std::string(FRUGAL_SHARED_MODELS_DIR) + "/" + name);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  if (f.ok()) {
    l.file = std::move(f).value();
    auto t = Tokenizer::from_gguf(*l.file);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    if (t.ok()) l.tok = std::move(t).value();
  }
  return cache.emplace(name, std::move(l)).first->second;
}

const Tokenizer& stories() {
  const Loaded& l = load("stories260K.gguf");
  if (!l.tok) throw std::runtime_error("stories260K.gguf did not load");
  return *l.tok;
}

const Tokenizer& qwen2() {
  const Loaded& l = load("vocab-qwen2.gguf");
  if (!l.tok) throw std::runtime_error("vocab-qwen2.gguf did not load");
  return *l.tok;
}

std::vector<TokenId> enc(const Tokenizer& t, std::string_view s, bool add_special, bool parse_special) {
  auto r = t.encode(s, TokenizeOptions{add_special, parse_special});
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::vector<TokenId>{};
}

std::string detok(const Tokenizer& t, const std::vector<TokenId>& ids, bool special) {
  Detokenizer d(t, special);
  std::string out;
  for (TokenId id : ids) out += d.push(id);
  return out + d.finish();
}

void check_reference_file(const Tokenizer& tok, const std::string& file) {
  std::ifstream in(std::string(FRUGAL_SOURCE_DIR) + "/tests/data/" + file);
  ASSERT_TRUE(in) << file;
  const auto j = nlohmann::json::parse(in);
  ASSERT_GE(j["cases"].size(), 50u);
  for (const auto& c : j["cases"]) {
    const std::string text = c["text"];
    SCOPED_TRACE(nlohmann::json(text).dump());
    const auto ids = [&](const char* key) { return c[key].get<std::vector<TokenId>>(); };
    EXPECT_EQ(enc(tok, text, true, false), ids("ids_add_special"));
    EXPECT_EQ(enc(tok, text, false, false), ids("ids_no_special"));
    EXPECT_EQ(enc(tok, text, true, true), ids("ids_add_special_parse_special"));
    EXPECT_EQ(enc(tok, text, false, true), ids("ids_no_special_parse_special"));
    // llama_detokenize(remove_special=false) strips the add_space_prefix space from the first
    // piece. With remove_special=true it drops the BOS instead and keeps the space, which is what
    // streaming the BOS as an empty piece gives too.
    EXPECT_EQ(detok(tok, ids("ids_no_special"), false), c["detok_no_special"].get<std::string>());
    EXPECT_EQ(detok(tok, ids("ids_add_special"), false), c["detok_add_special_remove_special"].get<std::string>());
    EXPECT_EQ(detok(tok, ids("ids_add_special_parse_special"), true),
              c["detok_add_special_parse_special_unparse"].get<std::string>());
    EXPECT_EQ(tok.detokenize(ids("ids_no_special")), c["detok_no_special"].get<std::string>());
    EXPECT_EQ(tok.detokenize(ids("ids_add_special"), true), c["detok_add_special_remove_special"].get<std::string>());
    EXPECT_EQ(tok.detokenize(ids("ids_add_special_parse_special"), false, true),
              c["detok_add_special_parse_special_unparse"].get<std::string>());
  }
}

TEST(Stories260K, MatchesLlamaCpp) { check_reference_file(stories(), "stories260K_tokenize.json"); }
TEST(Qwen2, MatchesLlamaCpp) { check_reference_file(qwen2(), "qwen2_tokenize.json"); }

// More strings, tokenized (add_special=false, parse_special=false) by the same llama.cpp build
// with llama_tokenize: a character new in Unicode 15.1 next to a letter, digits of several
// scripts, Unicode white space, CR/LF runs, upper-case contractions, a long mixed paragraph,
// combining marks and a ZWJ emoji sequence.
struct Extra {
  const char* text;
  std::vector<TokenId> stories, qwen2;
};

const std::vector<Extra>& extra_cases() {
  static const std::vector<Extra> cases = {
      {"a\U0002EBF0\U0002EBF1 b", {261, 243, 177, 178, 179, 243, 177, 178, 180, 268}, {64, 172, 106, 107, 108, 172, 106, 107, 109, 293}},
      {"The year 1234567890 \u0663\u0664\u0665 \u2167!",
       {291, 348, 411, 295, 410, 475, 479, 472, 484, 480, 490, 491, 487, 483, 477, 410, 220, 166, 220, 167, 220, 168, 410, 229, 136, 170, 443},
       {785, 1042, 220, 16, 17, 18, 19, 20, 21, 22, 23, 24, 15, 220, 149, 96, 149, 97, 149, 98, 220, 70467, 100, 0}},
      {"a\u0085b\u3000c\u2028d", {261, 197, 136, 430, 230, 131, 131, 429, 229, 131, 171, 418}, {64, 126, 227, 65, 22441, 66, 378, 101, 67}},
      {"\r\n\r\n  x\t\t\n", {410, 16, 13, 16, 13, 410, 410, 444, 12, 12, 13}, {871, 220, 856, 2394}},
      {"YOU'LL SEE IT'S 'RE'D", {410, 452, 441, 471, 439, 438, 438, 301, 459, 459, 359, 434, 439, 437, 410, 439, 461, 459, 439, 455},
       {56389, 6, 4086, 26103, 8700, 13272, 364, 787, 27705}},
      {"Once upon a time, Lily met a \U0001F408 named M\u00e9lanie. \u300c\u3053\u3093\u306b\u3061\u306f\u300d she said; "
       "\u0417\u0434\u0440\u0430\u0432\u0441\u0442\u0432\u0443\u0439\u0442\u0435!\n\n\tThe end   ",
       {403, 407, 261, 378, 432, 317, 284, 316, 261, 410, 243, 162, 147, 139, 395, 392, 485, 421, 303, 417, 411, 426, 410, 230, 131,
        143, 230, 132, 150, 230, 133, 150, 230, 132, 174, 230, 132, 164, 230, 132, 178, 230, 131, 144, 358, 336, 474, 410, 211, 154,
        211, 183, 212, 131, 211, 179, 211, 181, 212, 132, 212, 133, 211, 181, 212, 134, 211, 188, 212, 133, 211, 184, 443, 13, 13, 12,
        434, 260, 344, 264, 410, 410, 410},
       {12522, 5193, 264, 882, 11, 47290, 2270, 264, 11162, 238, 230, 6941, 42931, 10715, 645, 13, 44531, 89015, 10429, 1340, 1053,
        26, 52577, 6949, 26988, 20200, 82580, 50527, 2219, 31926, 835, 262}},
      {"e\u0301t\u00e9 \u1100\u1161\u11a8 \U0001F469\u200d\U0001F4bb",
       {344, 207, 132, 413, 485, 410, 228, 135, 131, 228, 136, 164, 228, 137, 171, 410, 243, 162, 148, 172, 229, 131, 144, 243, 162,
        149, 190},
       {68, 53839, 128294, 86089, 226, 222, 146679, 147979, 61804, 102, 378, 235, 145851}},
  };
  return cases;
}

TEST(Stories260K, ExtraCases) {
  for (const Extra& e : extra_cases()) EXPECT_EQ(enc(stories(), e.text, false, false), e.stories) << e.text;
}
TEST(Qwen2, ExtraCases) {
  for (const Extra& e : extra_cases()) EXPECT_EQ(enc(qwen2(), e.text, false, false), e.qwen2) << e.text;
}

TEST(Stories260K, SpecialTokenIds) {
  const Tokenizer& t = stories();
  EXPECT_EQ(t.n_vocab(), 512);
  EXPECT_EQ(t.bos(), 1);
  EXPECT_EQ(t.eos(), 2);
  EXPECT_EQ(t.eot(), -1);
  EXPECT_TRUE(t.add_bos());
  EXPECT_TRUE(t.add_space_prefix());
  for (TokenId id = 0; id < t.n_vocab(); ++id) EXPECT_EQ(t.is_eog(id), id == 2) << id;
  EXPECT_TRUE(t.is_control(1));
  EXPECT_FALSE(t.is_control(0));  // <unk> is the unknown type, not control
  EXPECT_EQ(t.piece(13), "\n");   // <0x0A>
  EXPECT_EQ(t.piece(410), " ");   // ▁
  EXPECT_EQ(t.piece(1), "");
  EXPECT_EQ(t.piece(1, true), "<s>");
  EXPECT_EQ(t.piece(0, true), "<unk>");
}

TEST(Qwen2, SpecialTokenIds) {
  const Tokenizer& t = qwen2();
  EXPECT_EQ(t.n_vocab(), 151936);
  EXPECT_EQ(t.bos(), 151643);
  EXPECT_EQ(t.eos(), 151645);
  EXPECT_EQ(t.eot(), 151645);
  EXPECT_FALSE(t.add_bos());
  EXPECT_FALSE(t.add_space_prefix());
  EXPECT_TRUE(t.is_eog(151643));
  EXPECT_TRUE(t.is_eog(151645));
  EXPECT_FALSE(t.is_eog(151644));
  EXPECT_TRUE(t.is_control(151644));
  EXPECT_EQ(t.piece(198), "\n");
  EXPECT_EQ(t.piece(151644), "");
  EXPECT_EQ(t.piece(151644, true), "<|im_start|>");
  auto kind = detect_chat_template(t.chat_template());
  ASSERT_TRUE(kind.ok()) << kind.status().to_string();
  EXPECT_EQ(*kind, ChatTemplateKind::kChatml);
}

TEST(Qwen2, SpecialTokenParsingOnAndOff) {
  const std::string text = "<|im_start|>user\nhi<|im_end|>";
  EXPECT_EQ(enc(qwen2(), text, true, true), (std::vector<TokenId>{151644, 872, 198, 6023, 151645}));
  const auto plain = enc(qwen2(), text, true, false);
  EXPECT_GT(plain.size(), 5u);
  for (TokenId id : plain) EXPECT_LT(id, 151643);
  EXPECT_EQ(detok(qwen2(), plain, false), text);
}

// Random text from several scripts (seeded), including white space, controls, marks and emoji.
std::string random_text(std::mt19937& rng) {
  static const std::pair<uint32_t, uint32_t> kRanges[] = {
      {0x20, 0x7E},     {0x20, 0x7E},     {0x09, 0x0D},    {0xA0, 0x24F},   {0x300, 0x36F},  {0x370, 0x3FF},
      {0x400, 0x4FF},   {0x590, 0x6FF},   {0x900, 0x97F},  {0xE00, 0xE7F},  {0x1100, 0x11FF}, {0x2000, 0x206F},
      {0x3000, 0x30FF}, {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0xFF00, 0xFFEF}, {0x1F300, 0x1F64F}, {0x20000, 0x2A6DF},
      {0x0, 0x1F},      {0x80, 0x9F},     {0xE000, 0xE0FF}, {0x2EBF0, 0x2EE5D},
  };
  std::uniform_int_distribution<int> len(0, 40), pick(0, std::size(kRanges) - 1), rep(1, 3);
  std::string s;
  const int n = len(rng);
  for (int i = 0; i < n; ++i) {
    const auto [lo, hi] = kRanges[pick(rng)];
    uint32_t c = std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
    if (c >= 0xD800 && c <= 0xDFFF) c = 'x';
    for (int k = rep(rng); k > 0; --k) unicode::append_utf8(s, c);
  }
  return s;
}

void check_round_trip(const Tokenizer& tok, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int i = 0; i < 300; ++i) {
    const std::string text = random_text(rng);
    const auto ids = enc(tok, text, false, false);
    ASSERT_EQ(detok(tok, ids, false), text) << nlohmann::json(text).dump();
  }
}

TEST(Stories260K, RandomRoundTrip) { check_round_trip(stories(), 1234); }
TEST(Qwen2, RandomRoundTrip) { check_round_trip(qwen2(), 5678); }

TEST(Encode, RejectsInvalidUtf8OnRealVocabularies) {
  for (const Tokenizer* t : {&stories(), &qwen2()}) {
    auto r = t->encode("fine text \xF0\x9F\x98 cut");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("byte offset 10"), std::string::npos) << r.status().message();
  }
}

TEST(Encode, RandomBytesNeverCrash) {
  std::mt19937 rng(99);
  for (const Tokenizer* t : {&stories(), &qwen2()}) {
    for (int i = 0; i < 200; ++i) {
      std::string s(rng() % 64, '\0');
      for (char& c : s) c = static_cast<char>(rng() % 4 == 0 ? rng() % 0x80 : 0x80 + rng() % 0x80);
      auto r = t->encode(s, TokenizeOptions{true, (i & 1) != 0});
      if (!r.ok()) {
        EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
      }
    }
  }
}

TEST(Detokenizer, RandomIdsGiveValidUtf8) {
  std::mt19937 rng(7);
  for (const Tokenizer* t : {&stories(), &qwen2()}) {
    for (int i = 0; i < 50; ++i) {
      Detokenizer d(*t, (i & 1) != 0);
      std::string out;
      for (int k = 0; k < 40; ++k) out += d.push(static_cast<TokenId>(rng() % (t->n_vocab() + 2)) - 1);
      out += d.finish();
      EXPECT_EQ(unicode::find_invalid_utf8(out), std::string_view::npos);
    }
  }
}

// Ids whose piece is exactly one byte, by byte value.
std::map<uint8_t, TokenId> single_byte_tokens(const Tokenizer& t) {
  std::map<uint8_t, TokenId> m;
  for (TokenId id = 0; id < t.n_vocab(); ++id) {
    const std::string p = t.piece(id);
    if (p.size() == 1 && !m.count(static_cast<uint8_t>(p[0]))) m[static_cast<uint8_t>(p[0])] = id;
  }
  return m;
}

TEST(Detokenizer, HoldsBackIncompleteCharacters) {
  for (const Tokenizer* t : {&stories(), &qwen2()}) {
    auto bytes = single_byte_tokens(*t);
    ASSERT_TRUE(bytes.count(0xF0) && bytes.count(0x9F) && bytes.count(0x98) && bytes.count(0x80) && bytes.count('a'));
    Detokenizer d(*t);
    d.push(bytes['a']);  // past the first piece, so no leading-space handling below
    // U+1F600 in four byte tokens: nothing comes out until the last one.
    EXPECT_EQ(d.push(bytes[0xF0]), "");
    EXPECT_EQ(d.push(bytes[0x9F]), "");
    EXPECT_EQ(d.push(bytes[0x98]), "");
    EXPECT_EQ(d.push(bytes[0x80]), "\xF0\x9F\x98\x80");
    // A character cut short by a complete one: U+FFFD for the fragment, then the character.
    EXPECT_EQ(d.push(bytes[0xF0]), "");
    EXPECT_EQ(d.push(bytes['a']), "\xEF\xBF\xBD" "a");
    // A stray continuation byte is replaced at once.
    EXPECT_EQ(d.push(bytes[0x80]), "\xEF\xBF\xBD");
    // An incomplete character at the end of the stream is flushed as U+FFFD.
    EXPECT_EQ(d.push(bytes[0xF0]), "");
    EXPECT_EQ(d.push(bytes[0x9F]), "");
    EXPECT_EQ(d.finish(), "\xEF\xBF\xBD");
    EXPECT_EQ(d.finish(), "");
  }
}

TEST(Detokenizer, StreamsWhatEncodeProduced) {
  // Pieces split inside characters reassemble, and every chunk is valid UTF-8.
  const std::string text = "\u4e2d\u6587\u6d4b\u8bd5 na\u00efve \U0001F44D\U0001F3FD \u0645\u0631\u062D\u0628\u0627";
  for (const Tokenizer* t : {&stories(), &qwen2()}) {
    const auto ids = enc(*t, text, false, false);
    Detokenizer d(*t);
    std::string out;
    for (TokenId id : ids) {
      const std::string chunk = d.push(id);
      EXPECT_EQ(unicode::find_invalid_utf8(chunk), std::string_view::npos);
      out += chunk;
    }
    out += d.finish();
    EXPECT_EQ(out, text);
  }
}

TEST(Detokenizer, StripsTheSpacePrefixOnlyFromTheFirstPiece) {
  const Tokenizer& t = stories();
  const auto ids = enc(t, "Hello world", false, false);
  EXPECT_EQ(detok(t, ids, false), "Hello world");
  // After a BOS the first real piece keeps its space, as in llama_detokenize.
  auto with_bos = ids;
  with_bos.insert(with_bos.begin(), t.bos());
  EXPECT_EQ(detok(t, with_bos, false), " Hello world");
  EXPECT_EQ(detok(t, with_bos, true), "<s> Hello world");
}

TEST(Detokenizer, ContinuationKeepsLeadingSpaces) {
  // Generated text as llama.cpp prints it: llama_token_to_piece of each generated token, no
  // stripping (tests/data/stories260K_greedy.json). Prompt tokens match llama_tokenize too.
  std::ifstream in(std::string(FRUGAL_SOURCE_DIR) + "/tests/data/stories260K_greedy.json");
  ASSERT_TRUE(in);
  const auto j = nlohmann::json::parse(in);
  ASSERT_FALSE(j["cases"].empty());
  for (const auto& c : j["cases"]) {
    const std::string prompt = c["prompt"];
    EXPECT_EQ(enc(stories(), prompt, true, false), c["prompt_tokens"].get<std::vector<TokenId>>()) << prompt;
    Detokenizer d(stories(), false, /*strip_space_prefix=*/false);
    std::string out;
    for (TokenId id : c["generated"].get<std::vector<TokenId>>()) out += d.push(id);
    out += d.finish();
    EXPECT_EQ(out, c["generated_text"].get<std::string>()) << prompt;
  }
  const auto ids = enc(stories(), "Hello world", false, false);
  EXPECT_EQ(detok(stories(), ids, false), "Hello world");
  Detokenizer d(stories(), false, false);
  std::string out;
  for (TokenId id : ids) out += d.push(id);
  EXPECT_EQ(out + d.finish(), " Hello world");
}

std::string big_text(size_t bytes) {
  static const char* kWords[] = {"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "Hello", "world",
                                 "it's", "12345", "na\u00efve", "caf\u00e9", "\u65e5\u672c\u8a9e", "\u4e2d\u6587",
                                 "\u0440\u0443\u0441\u0441\u043a\u0438\u0439", "\u0627\u0644\u0639\u0631\u0628\u064a\u0629",
                                 "\U0001F600", "foo_bar()", "{x: 1}", "  ", "\n", "\t"};
  static const char* kSeps[] = {" ", " ", " ", "\n", ", ", ". "};
  std::mt19937 rng(42);
  std::string s;
  while (s.size() < bytes) {
    s += kWords[rng() % std::size(kWords)];
    s += kSeps[rng() % std::size(kSeps)];
  }
  return s;
}

// CPU time of this thread, printed for whoever reads the log (the machine is shared, so wall time
// says little). Speed is not asserted: a unit test must not fail on a slow or busy machine; the
// benchmarks in bench/ are where speed is measured.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

TEST(Qwen2, LoadsAndRoundTrips100KB) {
  auto f = GgufFile::open(std::string(FRUGAL_SHARED_MODELS_DIR) + "/vocab-qwen2.gguf");
  ASSERT_TRUE(f.ok());
  const double t0 = thread_cpu_seconds();
  auto tok = Tokenizer::from_gguf(**f);
  ASSERT_TRUE(tok.ok());
  const double t1 = thread_cpu_seconds();
  const std::string text = big_text(100 * 1024);
  const double t2 = thread_cpu_seconds();
  auto ids = (*tok)->encode(text);
  ASSERT_TRUE(ids.ok());
  const double t3 = thread_cpu_seconds();
  std::printf("vocab-qwen2 (CPU time): tokenizer build %.3f s, encode %zu bytes -> %zu tokens %.3f s\n", t1 - t0,
              text.size(), ids->size(), t3 - t2);
  EXPECT_EQ(detok(**tok, *ids, false), text);
}

}  // namespace
}  // namespace frugal
