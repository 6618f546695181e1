// Constrained decoding for structured output: a subset of JSON Schema compiled to a byte-level
// pushdown matcher. The engine asks, for a candidate token, whether its bytes keep the generated
// text a prefix of some document the schema accepts, and masks the logits of tokens that do not.
//
// Supported: "type" (object, array, string, number, integer, boolean, null, or a list of them),
// "properties" (emitted in the order the schema lists them; no other keys), "required",
// "additionalProperties" (false, or true/absent on an object without "properties"), "items",
// "minItems", "maxItems", "minLength", "maxLength", "enum", "const", "anyOf"/"oneOf" (the first
// alternative that accepts a byte wins) and annotations (title, description, ...). Anything else
// that would change what is valid ("$ref", "pattern", "allOf", ...) is refused when compiling,
// so a request never gets output that silently ignores part of its schema.
//
// To keep generation finite on any model, whitespace runs are limited to kMaxWhitespace bytes,
// the parts of a number to kMax{Integer,Fraction,Exponent}Digits digits and nesting to kMaxDepth levels; once the document is
// complete nothing but an end-of-generation token is accepted. A positive exponent gets at most
// kMaxPositiveExponentDigits digits so that every accepted number is a finite double: 777e427 is
// valid JSON grammar, but JSON parsers (nlohmann, Python's json with parse_float checks, most
// consumers of JSON mode) reject or mangle a number that overflows.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "frugal/core/status.h"

namespace frugal {

inline constexpr int kMaxWhitespace = 16;
inline constexpr int kMaxIntegerDigits = 18;   // the integer part fits an int64
inline constexpr int kMaxFractionDigits = 17;  // a double's precision
inline constexpr int kMaxExponentDigits = 3;          // a negative exponent: underflow to 0 is still finite
inline constexpr int kMaxPositiveExponentDigits = 2;  // 18 integer digits x 1e99 stays far below DBL_MAX
inline constexpr int kMaxDepth = 32;

class JsonSchema {
 public:
  // Values are frozen (they are compared in tests and logs).
  // boolean and null compile to kLiteral ("true"/"false", "null").
  enum class Kind : uint8_t { kAny, kObject, kArray, kString, kNumber, kInteger, kLiteral, kUnion };

  struct Node {
    Kind kind = Kind::kAny;
    std::vector<std::string> prop_names;  // kObject with properties: in schema order
    std::vector<int32_t> prop_nodes;
    std::vector<uint8_t> prop_required;
    bool open = true;                     // kObject: any keys (no "properties")
    int32_t items = -1;                   // kArray: node of every item (-1: any value)
    int32_t min_items = 0, max_items = -1;
    int32_t min_length = 0, max_length = -1;  // kString, in code points
    std::vector<std::string> literals;    // kLiteral: compact JSON texts (enum / const)
    std::vector<int32_t> alternatives;    // kUnion
  };

  // kInvalidArgument naming the schema path ("schema.properties.age.type: 'hiccup' is not a JSON
  // type") for invalid or unsupported schemas.
  static Result<std::shared_ptr<const JsonSchema>> compile(const nlohmann::ordered_json& schema);
  // Any JSON object (OpenAI response_format {"type": "json_object"}).
  static std::shared_ptr<const JsonSchema> any_json_object();

  const Node& node(int32_t i) const { return nodes_[static_cast<size_t>(i)]; }
  int32_t root() const { return 0; }
  size_t n_nodes() const { return nodes_.size(); }
  // Nodes every schema has, used for unconstrained parts ("any JSON value").
  int32_t any_value() const { return any_value_; }
  int32_t any_object() const { return any_object_; }
  int32_t any_string() const { return any_string_; }
  int32_t any_number() const { return any_number_; }
  int32_t any_literal() const { return any_literal_; }

 private:
  friend class SchemaCompiler;
  std::vector<Node> nodes_;
  int32_t any_value_ = -1, any_object_ = -1, any_string_ = -1, any_number_ = -1, any_literal_ = -1;
};

// Feeds bytes one at a time; a rejected byte leaves the matcher failed. Copying is cheap (a small
// stack and two short strings) and reuses capacity, so masking a vocabulary copies one scratch
// matcher per token without allocating.
class JsonMatcher {
 public:
  explicit JsonMatcher(std::shared_ptr<const JsonSchema> schema);

  bool feed(char c);
  bool feed(std::string_view bytes);
  // `bytes` would be accepted from the current state; `scratch` is overwritten.
  bool accepts(std::string_view bytes, JsonMatcher& scratch) const;

  bool failed() const { return failed_; }
  // A whole document has been read (a trailing number or literal counts once it could end here).
  bool complete() const;

 private:
  enum class F : uint8_t { kValue, kObject, kKey, kArray, kString, kNumber, kLiteral };
  // What a frame's handler did with a byte.
  enum class R : uint8_t { kAccept, kReject, kEndRefeed };
  struct Frame {
    F kind;
    uint8_t state;
    int32_t node;
    int32_t a;  // object: last property index emitted; array: items; string: length; number: digits of this part
  };

  bool step(char c);
  R dispatch(char c);
  bool start_kind(char c, int32_t node);
  R object_step(char c);
  R key_step(char c);
  R array_step(char c);
  R string_step(char c);
  R number_step(char c);
  R literal_step(char c);
  bool whitespace(char c);
  bool push(F kind, int32_t node, uint8_t state = 0, int32_t a = 0);
  void pop();
  const JsonSchema::Node& node(int32_t i) const { return schema_->node(i); }

  std::shared_ptr<const JsonSchema> schema_;
  std::vector<Frame> stack_;
  std::string buf_;  // the key or literal being matched (only the innermost frame uses it)
  int ws_run_ = 0;
  bool was_ws_ = false;
  bool done_ = false;
  bool failed_ = false;
};

}  // namespace frugal
