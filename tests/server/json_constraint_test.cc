// The JSON-schema matcher against an independent oracle (nlohmann's parser) on random documents
// and byte strings, plus hand-checked cases for every supported keyword.
#include "frugal/engine/json_constraint.h"

#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

namespace frugal {
namespace {

using json = nlohmann::ordered_json;

std::shared_ptr<const JsonSchema> schema(const char* text) {
  auto s = JsonSchema::compile(json::parse(text));
  EXPECT_TRUE(s.ok()) << text << ": " << s.status().message();
  return s.ok() ? *s : nullptr;
}

// Whole document accepted and complete.
// `head` followed by `n` copies of `c` (built by appending: GCC 12 warns, wrongly, on "x" + string).
std::string run_of(std::string head, char c, int n, const std::string& tail = "") {
  head.append(static_cast<size_t>(n), c);
  head.append(tail);
  return head;
}

bool accepts(const std::shared_ptr<const JsonSchema>& s, const std::string& doc) {
  JsonMatcher m(s);
  return m.feed(doc) && m.complete();
}

// Accepted as a prefix (maybe incomplete).
bool accepts_prefix(const std::shared_ptr<const JsonSchema>& s, const std::string& doc) {
  JsonMatcher m(s);
  return m.feed(doc);
}

json random_value(std::mt19937& rng, int depth) {
  std::uniform_int_distribution<int> kind(0, depth >= 3 ? 4 : 6);
  static const std::vector<std::string> words = {"", "a", "hello", "tab\there", "quote\"s", "back\\slash", "é ü",
                                                 "日本", "line\nbreak", "\x01"};
  switch (kind(rng)) {
    case 0: return nullptr;
    case 1: return std::uniform_int_distribution<int>(0, 1)(rng) == 1;
    case 2: return std::uniform_int_distribution<int64_t>(-100000, 100000)(rng);
    case 3: return std::uniform_real_distribution<double>(-1e6, 1e6)(rng);
    case 4: return words[std::uniform_int_distribution<size_t>(0, words.size() - 1)(rng)];
    case 5: {
      json a = json::array();
      for (int i = std::uniform_int_distribution<int>(0, 3)(rng); i > 0; --i) a.push_back(random_value(rng, depth + 1));
      return a;
    }
    default: {
      json o = json::object();
      for (int i = std::uniform_int_distribution<int>(0, 3)(rng); i > 0; --i) {
        o[words[std::uniform_int_distribution<size_t>(0, words.size() - 1)(rng)]] = random_value(rng, depth + 1);
      }
      return o;
    }
  }
}

TEST(JsonConstraint, AnyValueAcceptsWhatTheParserAccepts) {
  auto any = schema("true");
  std::mt19937 rng(1234);
  for (int i = 0; i < 400; ++i) {
    const json v = random_value(rng, 0);
    const std::string compact = v.dump();
    EXPECT_TRUE(accepts(any, compact)) << compact;
    const std::string pretty = v.dump(1);  // newline + one space per level: within the whitespace limit
    EXPECT_TRUE(accepts(any, pretty)) << pretty;
  }
}

TEST(JsonConstraint, AnyValueRejectsWhatTheParserRejects) {
  // Random strings over JSON's alphabet: whatever the matcher takes whole, the parser must take.
  auto any = schema("true");
  const std::string alphabet = "{}[],:\"\\0123456789-+.eEtrufalsn x";
  std::mt19937 rng(99);
  int agreed_valid = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    for (int n = std::uniform_int_distribution<int>(1, 12)(rng); n > 0; --n) {
      s.push_back(alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)]);
    }
    const bool parser = json::accept(s);
    const bool matcher = accepts(any, s);
    if (matcher) {
      EXPECT_TRUE(parser) << "matcher took invalid JSON: " << s;
      ++agreed_valid;
    }
    // The other direction holds except for trailing whitespace after a complete document, which the
    // matcher refuses on purpose (it only wants end-of-generation then).
    if (parser && !matcher && s.find_last_not_of(" ") == s.size() - 1 && s.front() != ' ') {
      ADD_FAILURE() << "matcher refused valid JSON: " << s;
    }
  }
  EXPECT_GT(agreed_valid, 20);
}

TEST(JsonConstraint, EveryPrefixOfAValidDocumentIsAccepted) {
  auto obj = JsonSchema::any_json_object();
  const std::string doc = R"({"a": [1, -2.5e+3, true, null], "b": {"c": "x\u00e9\n"}, "d": false})";
  for (size_t n = 0; n < doc.size(); ++n) {
    JsonMatcher m(obj);
    EXPECT_TRUE(m.feed(doc.substr(0, n))) << n;
    EXPECT_FALSE(m.complete()) << n;
  }
  EXPECT_TRUE(accepts(obj, doc));
}

TEST(JsonConstraint, ObjectModeRejects) {
  auto obj = JsonSchema::any_json_object();
  for (const char* bad : {"[1]", "\"s\"", "{\"a\":}", "{\"a\" 1}", "{}x", "{} ", "{\"a\":01}", "{\"a\":1,}",
                          "{\"a\":tru }", "{\"a\":\"\x01\"}", "{\"a\":\"\\q\"}", "{,}", "{\"a\":-}"}) {
    EXPECT_FALSE(accepts(obj, bad)) << bad;
  }
}

TEST(JsonConstraint, PropertiesComeInSchemaOrderAndRequiredOnesCannotBeSkipped) {
  auto s = schema(R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                      "tags": {"type": "array", "items": {"type": "string"}}, "ok": {"type": "boolean"}},
                      "required": ["name", "age"]})");
  EXPECT_TRUE(accepts(s, R"({"name":"x","age":3})"));
  EXPECT_TRUE(accepts(s, R"({"name": "x", "age": -3, "ok": true})"));
  EXPECT_TRUE(accepts(s, R"({"name":"x","age":3,"tags":["a","b"],"ok":false})"));
  EXPECT_FALSE(accepts_prefix(s, R"({"age":3)"));           // name is required first
  EXPECT_FALSE(accepts_prefix(s, R"({"name":"x"})"));       // age missing at '}'
  EXPECT_FALSE(accepts_prefix(s, R"({"name":"x","age":3.5)"));  // integer
  EXPECT_FALSE(accepts_prefix(s, R"({"name":"x","age":3,"zzz")"));  // not a property
  EXPECT_FALSE(accepts_prefix(s, R"({"name":"x","age":3,"ok":true,"tags")"));  // order
  EXPECT_FALSE(accepts_prefix(s, R"({"name":1)"));
  EXPECT_FALSE(accepts_prefix(s, R"({"name":"x","age":3,"tags":[1)"));
  EXPECT_FALSE(accepts_prefix(s, R"({"name":"x","age":3,"ok":true,)"));  // nothing may follow the last
}

TEST(JsonConstraint, EnumsConstsAndUnions) {
  auto e = schema(R"({"enum": ["red", "green", 1, 12, null]})");
  for (const char* ok : {"\"red\"", "\"green\"", "1", "12", "null"}) EXPECT_TRUE(accepts(e, ok)) << ok;
  for (const char* bad : {"\"blue\"", "\"re\"", "2", "123", "true"}) EXPECT_FALSE(accepts(e, bad)) << bad;
  auto c = schema(R"({"const": {"a": [1]}})");
  EXPECT_TRUE(accepts(c, R"({"a":[1]})"));
  EXPECT_FALSE(accepts(c, R"({"a":[2]})"));
  auto u = schema(R"({"type": ["string", "null"]})");
  EXPECT_TRUE(accepts(u, "\"x\""));
  EXPECT_TRUE(accepts(u, "null"));
  EXPECT_FALSE(accepts(u, "1"));
  auto any_of = schema(R"({"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "boolean"}}]})");
  EXPECT_TRUE(accepts(any_of, "[true,false]"));
  EXPECT_TRUE(accepts(any_of, "-7"));
  EXPECT_FALSE(accepts(any_of, "[1]"));
}

TEST(JsonConstraint, Numbers) {
  auto num = schema(R"({"type": "number"})");
  for (const char* ok : {"0", "-0", "1.5", "-0.5e+10", "2E-3", "123"}) EXPECT_TRUE(accepts(num, ok)) << ok;
  for (const char* bad : {"01", "-", "1.", ".5", "1e", "+1", "1.5.2", "--1"}) EXPECT_FALSE(accepts(num, bad)) << bad;
  auto integer = schema(R"({"type": "integer"})");
  EXPECT_TRUE(accepts(integer, "-42"));
  EXPECT_FALSE(accepts_prefix(integer, "4.2"));
  EXPECT_FALSE(accepts_prefix(integer, "4e2"));
  EXPECT_TRUE(accepts(integer, std::string(kMaxIntegerDigits, '9')));
  EXPECT_FALSE(accepts_prefix(integer, std::string(kMaxIntegerDigits + 1, '9')));
  EXPECT_TRUE(accepts(num, run_of("1.", '5', kMaxFractionDigits, run_of("e-", '1', kMaxExponentDigits))));
  EXPECT_FALSE(accepts_prefix(num, run_of("1e-", '1', kMaxExponentDigits + 1)));
  // A positive exponent stops where a double could overflow: every accepted number parses as a
  // finite double (found by fuzzing: 777e427 is valid grammar that JSON parsers refuse).
  EXPECT_TRUE(accepts(num, run_of("", '9', kMaxIntegerDigits, run_of("e+", '9', kMaxPositiveExponentDigits))));
  EXPECT_TRUE(accepts(num, run_of("1E", '9', kMaxPositiveExponentDigits)));
  EXPECT_FALSE(accepts_prefix(num, "777e427"));
  EXPECT_FALSE(accepts_prefix(num, run_of("1e+", '0', kMaxPositiveExponentDigits + 1)));
  EXPECT_TRUE(nlohmann::json::parse(run_of("", '9', kMaxIntegerDigits, run_of(".", '9', kMaxFractionDigits, run_of("e", '9', kMaxPositiveExponentDigits)))).is_number_float());
  EXPECT_FALSE(accepts_prefix(num, run_of("0.", '5', kMaxFractionDigits + 1)));
}

TEST(JsonConstraint, StringAndArrayLengths) {
  auto s = schema(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_FALSE(accepts(s, "\"a\""));
  EXPECT_TRUE(accepts(s, "\"ab\""));
  EXPECT_TRUE(accepts(s, "\"aé\\n\""));  // three characters: a, é (two bytes), an escape
  EXPECT_FALSE(accepts_prefix(s, "\"abcd"));
  auto a = schema(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2})");
  EXPECT_FALSE(accepts(a, "[]"));
  EXPECT_TRUE(accepts(a, "[1]"));
  EXPECT_TRUE(accepts(a, "[1, 2]"));
  EXPECT_FALSE(accepts_prefix(a, "[1,2,"));
}

// Found by tests/fuzz/json_schema.cc: string bytes were taken one by one, so a model could close
// a string after a stray byte such as 0xC0 and "complete" a document no JSON parser accepts. Every
// case is checked against nlohmann's parser as well.
TEST(JsonConstraint, StringsStayValidUtf8) {
  auto obj = JsonSchema::any_json_object();
  const auto doc = [](const std::string& inner) { return "{\"name\": \"" + inner + "\", \"age\": 43}"; };
  // The fuzzer's input, reduced: a 0xC0 byte at the end of a string.
  EXPECT_FALSE(accepts_prefix(obj, doc("Ann\xC0")));
  for (const std::string good : {"\xC3\xA9", "\xE6\x97\xA5\xE6\x9C\xAC", "\xF0\x9F\x99\x82", "\xED\x9F\xBF",
                                 "\xEE\x80\x80", "\xF4\x8F\xBF\xBF", "\xE0\xA0\x80", "\xF0\x90\x80\x80"}) {
    EXPECT_TRUE(accepts(obj, doc(good))) << good;
    EXPECT_TRUE(json::accept(doc(good))) << good;
  }
  for (const std::string bad : {"\x80", "\xBF", "\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xED\xA0\x80",
                                "\xF0\x80\x80\x80", "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xFF",
                                "\xC3", "\xE6\x97", "\xF0\x9F\x99", "\xC3\x41"}) {
    EXPECT_FALSE(accepts(obj, doc(bad))) << ::testing::PrintToString(bad);
    EXPECT_FALSE(json::accept(doc(bad))) << ::testing::PrintToString(bad);
  }
  // A character may arrive split over several tokens.
  JsonMatcher m(obj);
  ASSERT_TRUE(m.feed("{\"a\": \"\xF0\x9F"));
  ASSERT_TRUE(m.feed("\x99"));
  JsonMatcher scratch(obj);
  EXPECT_FALSE(m.accepts("\"", scratch));  // not before the last byte
  ASSERT_TRUE(m.feed("\x82\"}"));
  EXPECT_TRUE(m.complete());
}

// The same for \u escapes: nlohmann (like any strict parser) refuses a surrogate without its pair.
TEST(JsonConstraint, SurrogateEscapesComeInPairs) {
  auto obj = JsonSchema::any_json_object();
  const auto doc = [](const std::string& inner) { return "{\"s\": \"" + inner + "\"}"; };
  for (const std::string good : {"\\u00e9", "\\uD7FF", "\\uE000", "\\uD83D\\uDE00", "\\ud83d\\ude00", "\\uDBFF\\uDFFF"}) {
    EXPECT_TRUE(accepts(obj, doc(good))) << good;
    EXPECT_TRUE(json::accept(doc(good))) << good;
  }
  for (const std::string bad : {"\\uD83D", "\\uD83Dx", "\\uD83D\\n", "\\uD83D\\u0041", "\\uDE00", "\\uDFFF", "\\uD83D\\uD83D"}) {
    EXPECT_FALSE(accepts(obj, doc(bad))) << bad;
    EXPECT_FALSE(json::accept(doc(bad))) << bad;
  }
  // A pair is one character for maxLength, as is a multi-byte one.
  auto one = schema(R"({"type": "string", "maxLength": 1})");
  EXPECT_TRUE(accepts(one, "\"\\uD83D\\uDE00\""));
  EXPECT_TRUE(accepts(one, "\"\xF0\x9F\x99\x82\""));
  EXPECT_FALSE(accepts_prefix(one, "\"\\uD83D\\uDE00a"));
}

TEST(JsonConstraint, LimitsKeepGenerationFinite) {
  auto obj = JsonSchema::any_json_object();
  EXPECT_TRUE(accepts_prefix(obj, run_of("{", ' ', kMaxWhitespace)));
  EXPECT_FALSE(accepts_prefix(obj, run_of("{", ' ', kMaxWhitespace + 1)));
  std::string deep = "{\"a\":";
  for (int i = 0; i < kMaxDepth; ++i) deep += "[";
  EXPECT_FALSE(accepts_prefix(obj, deep));
  // A complete document takes nothing more, not even whitespace.
  JsonMatcher m(obj);
  ASSERT_TRUE(m.feed("{}"));
  EXPECT_TRUE(m.complete());
  JsonMatcher scratch(obj);
  EXPECT_FALSE(m.accepts(" ", scratch));
}

TEST(JsonConstraint, AcceptsLeavesTheMatcherUnchanged) {
  auto obj = JsonSchema::any_json_object();
  JsonMatcher m(obj), scratch(obj);
  ASSERT_TRUE(m.feed("{\"k\":"));
  EXPECT_TRUE(m.accepts("[1,2]", scratch));
  EXPECT_FALSE(m.accepts("}", scratch));
  EXPECT_TRUE(m.feed("true}"));
  EXPECT_TRUE(m.complete());
}

TEST(JsonConstraint, InvalidSchemasNameTheProblem) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {R"({"type": 123})", "schema.type"},
      {R"({"type": "hiccup"})", "'hiccup' is not a JSON type"},
      {"123", "must be a JSON object"},
      {R"({"$ref": "#/defs/x"})", "'$ref' is not supported"},
      {R"({"properties": {"a": {}}, "required": ["b"]})", "'b' is not in properties"},
      {R"({"type": "object", "properties": {"a": {"type": "strin"}}})", "schema.properties.a.type"},
      {R"({"type": "string", "maxLength": -1})", "maxLength"},
      {R"({"enum": []})", "enum"},
      {"false", "accepts nothing"},
  };
  for (const auto& [text, needle] : cases) {
    auto s = JsonSchema::compile(json::parse(text));
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_EQ(s.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(needle), std::string::npos) << text << " -> " << s.status().message();
  }
}

}  // namespace
}  // namespace frugal
