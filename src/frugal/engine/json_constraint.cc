#include "frugal/engine/json_constraint.h"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

namespace frugal {

using Kind = JsonSchema::Kind;
using json = nlohmann::ordered_json;

class SchemaCompiler {
 public:
  explicit SchemaCompiler(JsonSchema& s) : s_(s) {}

  void add_builtins() {
    s_.any_value_ = add({});
    JsonSchema::Node obj;
    obj.kind = Kind::kObject;
    s_.any_object_ = add(obj);
    JsonSchema::Node str;
    str.kind = Kind::kString;
    s_.any_string_ = add(str);
    JsonSchema::Node num;
    num.kind = Kind::kNumber;
    s_.any_number_ = add(num);
    JsonSchema::Node lit;
    lit.kind = Kind::kLiteral;
    lit.literals = {"true", "false", "null"};
    s_.any_literal_ = add(lit);
  }

  // Compiles `j` into node `at` (already allocated), so the root is always node 0.
  Status compile(const json& j, int32_t at, const std::string& path, int depth) {
    if (depth > kMaxDepth) return error(ErrorCode::kInvalidArgument, "{}: schema nested deeper than {}", path, kMaxDepth);
    if (s_.nodes_.size() > kMaxNodes) {
      return error(ErrorCode::kInvalidArgument, "{}: schema has more than {} sub-schemas", path, kMaxNodes);
    }
    if (j.is_boolean()) {
      if (!j.get<bool>()) return error(ErrorCode::kInvalidArgument, "{}: the schema 'false' accepts nothing", path);
      return ok_status();  // true: any value (the node is already kAny)
    }
    if (!j.is_object()) {
      return error(ErrorCode::kInvalidArgument, "{}: a schema must be a JSON object or boolean, not {}", path,
                   j.type_name());
    }
    for (const auto& [key, value] : j.items()) {
      if (!known_keyword(key)) {
        return error(ErrorCode::kInvalidArgument, "{}: schema keyword '{}' is not supported", path, key);
      }
    }
    if (j.contains("enum") || j.contains("const")) return compile_literals(j, at, path);
    if (j.contains("anyOf") || j.contains("oneOf")) return compile_union(j, at, path, depth);
    std::vector<std::string> types;
    if (j.contains("type")) {
      const json& t = j["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const auto& e : t) {
          if (!e.is_string()) return error(ErrorCode::kInvalidArgument, "{}.type: list entries must be strings", path);
          types.push_back(e.get<std::string>());
        }
      } else {
        return error(ErrorCode::kInvalidArgument, "{}.type: must be a string or a non-empty list of strings, not {}",
                     path, t.dump());
      }
    } else if (j.contains("properties") || j.contains("required")) {
      types.push_back("object");
    } else if (j.contains("items") || j.contains("minItems") || j.contains("maxItems")) {
      types.push_back("array");
    } else {
      return ok_status();  // no constraint on the type: any value
    }
    if (types.size() == 1) return compile_typed(j, types[0], at, path, depth);
    std::vector<int32_t> alts;
    for (const auto& t : types) {
      const int32_t n = add({});
      FRUGAL_RETURN_IF_ERROR(compile_typed(j, t, n, path, depth));
      alts.push_back(n);
    }
    s_.nodes_[static_cast<size_t>(at)].kind = Kind::kUnion;
    s_.nodes_[static_cast<size_t>(at)].alternatives = std::move(alts);
    return ok_status();
  }

  int32_t add(const JsonSchema::Node& n) {
    s_.nodes_.push_back(n);
    return static_cast<int32_t>(s_.nodes_.size() - 1);
  }

 private:
  static constexpr size_t kMaxNodes = 4096;

  static bool known_keyword(const std::string& k) {
    static const std::set<std::string> ok = {
        "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
        "minLength", "maxLength", "enum", "const", "anyOf", "oneOf", "title", "description", "default",
        "examples", "$schema", "$id", "$comment", "strict", "name", "readOnly", "writeOnly", "deprecated"};
    return ok.count(k) > 0;
  }

  JsonSchema::Node& at(int32_t i) { return s_.nodes_[static_cast<size_t>(i)]; }

  Result<int32_t> read_count(const json& j, const char* key, const std::string& path) {
    if (!j.contains(key)) return -1;
    const json& v = j[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (1 << 30)) {
      return error(ErrorCode::kInvalidArgument, "{}.{}: must be a non-negative integer, not {}", path, key, v.dump());
    }
    return static_cast<int32_t>(v.get<int64_t>());
  }

  Status compile_typed(const json& j, const std::string& type, int32_t n, const std::string& path, int depth) {
    if (type == "object") return compile_object(j, n, path, depth);
    if (type == "array") {
      at(n).kind = Kind::kArray;
      FRUGAL_ASSIGN_OR_RETURN(int32_t mn, read_count(j, "minItems", path));
      FRUGAL_ASSIGN_OR_RETURN(int32_t mx, read_count(j, "maxItems", path));
      at(n).min_items = std::max(mn, 0);
      at(n).max_items = mx;
      if (mx >= 0 && mx < at(n).min_items) {
        return error(ErrorCode::kInvalidArgument, "{}: maxItems {} is below minItems {}", path, mx, mn);
      }
      if (j.contains("items")) {
        if (j["items"].is_array()) {
          return error(ErrorCode::kInvalidArgument, "{}.items: tuple schemas (a list) are not supported", path);
        }
        const int32_t item = add({});
        at(n).items = item;
        FRUGAL_RETURN_IF_ERROR(compile(j["items"], item, path + ".items", depth + 1));
      }
      return ok_status();
    }
    if (type == "string") {
      at(n).kind = Kind::kString;
      FRUGAL_ASSIGN_OR_RETURN(int32_t mn, read_count(j, "minLength", path));
      FRUGAL_ASSIGN_OR_RETURN(int32_t mx, read_count(j, "maxLength", path));
      at(n).min_length = std::max(mn, 0);
      at(n).max_length = mx;
      if (mx >= 0 && mx < at(n).min_length) {
        return error(ErrorCode::kInvalidArgument, "{}: maxLength {} is below minLength {}", path, mx, mn);
      }
      return ok_status();
    }
    if (type == "number" || type == "integer") {
      at(n).kind = type == "number" ? Kind::kNumber : Kind::kInteger;
      return ok_status();
    }
    if (type == "boolean" || type == "null") {
      at(n).kind = Kind::kLiteral;
      at(n).literals = type == "boolean" ? std::vector<std::string>{"true", "false"} : std::vector<std::string>{"null"};
      return ok_status();
    }
    return error(ErrorCode::kInvalidArgument,
                 "{}.type: '{}' is not a JSON type (object, array, string, number, integer, boolean, null)", path, type);
  }

  Status compile_object(const json& j, int32_t n, const std::string& path, int depth) {
    at(n).kind = Kind::kObject;
    const bool has_props = j.contains("properties");
    if (j.contains("additionalProperties")) {
      const json& ap = j["additionalProperties"];
      const bool allows = !(ap.is_boolean() && !ap.get<bool>());
      if (allows && has_props) {
        return error(ErrorCode::kInvalidArgument,
                     "{}.additionalProperties: only false is supported together with properties", path);
      }
      if (!ap.is_boolean() && !(ap.is_object() && ap.empty())) {
        return error(ErrorCode::kInvalidArgument, "{}.additionalProperties: a schema here is not supported", path);
      }
    }
    if (!has_props) {
      if (j.contains("required") && !j["required"].empty()) {
        return error(ErrorCode::kInvalidArgument, "{}.required: names properties but the schema has no 'properties'",
                     path);
      }
      at(n).open = true;
      return ok_status();
    }
    const json& props = j["properties"];
    if (!props.is_object()) {
      return error(ErrorCode::kInvalidArgument, "{}.properties: must be an object, not {}", path, props.type_name());
    }
    at(n).open = false;
    std::set<std::string> required;
    if (j.contains("required")) {
      const json& r = j["required"];
      if (!r.is_array()) return error(ErrorCode::kInvalidArgument, "{}.required: must be a list of names", path);
      for (const auto& e : r) {
        if (!e.is_string()) return error(ErrorCode::kInvalidArgument, "{}.required: entries must be strings", path);
        if (!props.contains(e.get<std::string>())) {
          return error(ErrorCode::kInvalidArgument, "{}.required: '{}' is not in properties", path, e.get<std::string>());
        }
        required.insert(e.get<std::string>());
      }
    }
    for (const auto& [name, sub] : props.items()) {
      for (char c : name) {
        if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) {
          return error(ErrorCode::kInvalidArgument, "{}.properties: the name '{}' needs escaping, which is not supported",
                       path, name);
        }
      }
      const int32_t child = add({});
      FRUGAL_RETURN_IF_ERROR(compile(sub, child, path + ".properties." + name, depth + 1));
      at(n).prop_names.push_back(name);
      at(n).prop_nodes.push_back(child);
      at(n).prop_required.push_back(required.count(name) ? 1 : 0);
    }
    return ok_status();
  }

  Status compile_literals(const json& j, int32_t n, const std::string& path) {
    at(n).kind = Kind::kLiteral;
    if (j.contains("const")) {
      at(n).literals.push_back(j["const"].dump());
    } else {
      const json& e = j["enum"];
      if (!e.is_array() || e.empty()) {
        return error(ErrorCode::kInvalidArgument, "{}.enum: must be a non-empty list", path);
      }
      for (const auto& v : e) at(n).literals.push_back(v.dump());
    }
    return ok_status();
  }

  Status compile_union(const json& j, int32_t n, const std::string& path, int depth) {
    const char* key = j.contains("anyOf") ? "anyOf" : "oneOf";
    const json& list = j[key];
    if (!list.is_array() || list.empty()) {
      return error(ErrorCode::kInvalidArgument, "{}.{}: must be a non-empty list of schemas", path, key);
    }
    std::vector<int32_t> alts;
    for (size_t i = 0; i < list.size(); ++i) {
      const int32_t child = add({});
      FRUGAL_RETURN_IF_ERROR(compile(list[i], child, fmt::format("{}.{}[{}]", path, key, i), depth + 1));
      alts.push_back(child);
    }
    at(n).kind = Kind::kUnion;
    at(n).alternatives = std::move(alts);
    return ok_status();
  }

  JsonSchema& s_;
};

Result<std::shared_ptr<const JsonSchema>> JsonSchema::compile(const json& schema) {
  auto s = std::make_shared<JsonSchema>();
  SchemaCompiler c(*s);
  const int32_t root = c.add({});
  c.add_builtins();
  FRUGAL_RETURN_IF_ERROR(c.compile(schema, root, "schema", 0));
  return std::shared_ptr<const JsonSchema>(std::move(s));
}

std::shared_ptr<const JsonSchema> JsonSchema::any_json_object() {
  auto s = std::make_shared<JsonSchema>();
  SchemaCompiler c(*s);
  JsonSchema::Node root;
  root.kind = Kind::kObject;
  c.add(root);
  c.add_builtins();
  return s;
}

// ---------------------------------------------------------------------------------------------
// Matcher

namespace {
bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// Object states.
constexpr uint8_t kObjStart = 0, kObjColon = 1, kObjAfterValue = 2, kObjComma = 3;
// Array states.
constexpr uint8_t kArrStart = 0, kArrAfterValue = 1, kArrComma = 2;
// String states: 0 plain, 1 after backslash, 2..5 inside \uXXXX.
constexpr uint8_t kStrPlain = 0, kStrEscape = 1, kStrHex0 = 2;  // kStrHex0 + i: i digits of \uXXXX read
// A string must stay text a JSON parser accepts: well-formed UTF-8 (no overlong forms, surrogates
// or code points past U+10FFFF, RFC 3629) and \u escapes whose surrogates come in pairs.
constexpr uint8_t kStrHexD = 6;                           // \uD read: the next digit tells a surrogate
constexpr uint8_t kStrHigh2 = 7, kStrHigh3 = 8;           // \uD8.. - \uDB..: a high surrogate
constexpr uint8_t kStrLowBackslash = 9, kStrLowU = 10;    // its low half must follow: "\u"
constexpr uint8_t kStrLowD = 11, kStrLowC = 12;           // then 'D' and one of C-F
constexpr uint8_t kStrCont1 = 13, kStrCont2 = 14, kStrCont3 = 15;  // continuation bytes 80-BF left
constexpr uint8_t kStrAfterE0 = 16, kStrAfterED = 17, kStrAfterF0 = 18, kStrAfterF4 = 19;  // narrower first
// Number states; terminal ones can end the number.
// The exponent's sign picks its digit limit: kNumExp after 'e' or 'e+', kNumExpNeg after 'e-'.
enum : uint8_t { kNumStart, kNumMinus, kNumZero, kNumInt, kNumDot, kNumFrac, kNumE, kNumESign, kNumExp, kNumENeg, kNumExpNeg };
bool number_terminal(uint8_t s) {
  return s == kNumZero || s == kNumInt || s == kNumFrac || s == kNumExp || s == kNumExpNeg;
}
}  // namespace

JsonMatcher::JsonMatcher(std::shared_ptr<const JsonSchema> schema) : schema_(std::move(schema)) {
  stack_.reserve(kMaxDepth + 4);
  buf_.reserve(64);
  stack_.push_back({F::kValue, 0, schema_->root(), 0});
}

bool JsonMatcher::feed(std::string_view bytes) {
  for (char c : bytes) {
    if (!feed(c)) return false;
  }
  return true;
}

bool JsonMatcher::feed(char c) {
  if (failed_) return false;
  if (!step(c)) {
    failed_ = true;
    return false;
  }
  return true;
}

bool JsonMatcher::accepts(std::string_view bytes, JsonMatcher& scratch) const {
  scratch.schema_ = schema_;
  scratch.stack_.assign(stack_.begin(), stack_.end());
  scratch.buf_.assign(buf_);
  scratch.ws_run_ = ws_run_;
  scratch.was_ws_ = was_ws_;
  scratch.done_ = done_;
  scratch.failed_ = failed_;
  return !bytes.empty() && scratch.feed(bytes);
}

bool JsonMatcher::complete() const {
  if (failed_) return false;
  if (done_) return true;
  if (stack_.size() != 1) return false;
  const Frame& f = stack_.back();
  if (f.kind == F::kNumber) return number_terminal(f.state);
  if (f.kind == F::kLiteral) {
    const auto& lits = node(f.node).literals;
    return std::find(lits.begin(), lits.end(), buf_) != lits.end();
  }
  return false;
}

bool JsonMatcher::whitespace(char c) {
  if (!is_ws(c) || ws_run_ >= kMaxWhitespace) return false;
  ++ws_run_;
  was_ws_ = true;
  return true;
}

bool JsonMatcher::push(F kind, int32_t n, uint8_t state, int32_t a) {
  if ((kind == F::kObject || kind == F::kArray) && static_cast<int>(stack_.size()) >= kMaxDepth) return false;
  stack_.push_back({kind, state, n, a});
  return true;
}

void JsonMatcher::pop() {
  stack_.pop_back();
  if (stack_.empty()) done_ = true;
}

bool JsonMatcher::step(char c) {
  if (done_) return false;  // a complete document takes nothing but end-of-generation
  was_ws_ = false;
  for (int guard = 0; guard < kMaxDepth + 4; ++guard) {
    const R r = dispatch(c);
    if (r == R::kReject) return false;
    if (r == R::kAccept) {
      if (!was_ws_) ws_run_ = 0;
      return true;
    }
    pop();  // kEndRefeed: the frame ended just before `c`; its parent reads `c`
    if (done_) return false;
  }
  return false;
}

JsonMatcher::R JsonMatcher::dispatch(char c) {
  Frame& f = stack_.back();
  switch (f.kind) {
    case F::kValue: {
      if (whitespace(c)) return R::kAccept;
      const int32_t n = f.node;
      stack_.pop_back();
      return start_kind(c, n) ? R::kAccept : R::kReject;
    }
    case F::kObject: return object_step(c);
    case F::kKey: return key_step(c);
    case F::kArray: return array_step(c);
    case F::kString: return string_step(c);
    case F::kNumber: return number_step(c);
    case F::kLiteral: return literal_step(c);
  }
  return R::kReject;
}

// Starts a value of schema node `n` whose first byte is `c` (not whitespace).
bool JsonMatcher::start_kind(char c, int32_t n) {
  const JsonSchema::Node& nd = node(n);
  switch (nd.kind) {
    case Kind::kAny:
      if (c == '{') return push(F::kObject, schema_->any_object(), kObjStart, -1);
      if (c == '[') return push(F::kArray, -1, kArrStart, 0);
      if (c == '"') return push(F::kString, schema_->any_string(), kStrPlain, 0);
      if (c == '-' || is_digit(c)) return start_kind(c, schema_->any_number());
      return start_kind(c, schema_->any_literal());
    case Kind::kObject: return c == '{' && push(F::kObject, n, kObjStart, -1);
    case Kind::kArray: return c == '[' && push(F::kArray, n, kArrStart, 0);
    case Kind::kString: return c == '"' && push(F::kString, n, kStrPlain, 0);
    case Kind::kNumber:
    case Kind::kInteger:
      if (!push(F::kNumber, n, kNumStart, 0)) return false;
      return number_step(c) == R::kAccept;
    case Kind::kLiteral:
      if (!push(F::kLiteral, n)) return false;
      buf_.clear();
      return literal_step(c) == R::kAccept;
    case Kind::kUnion: {
      const size_t depth = stack_.size();
      const std::string saved = buf_;
      for (int32_t alt : nd.alternatives) {
        if (start_kind(c, alt)) return true;
        stack_.resize(depth);
        buf_ = saved;
      }
      return false;
    }
  }
  return false;
}

JsonMatcher::R JsonMatcher::object_step(char c) {
  Frame& f = stack_.back();
  const JsonSchema::Node& obj = node(f.node);
  const auto remaining_required = [&](int32_t after) {
    for (size_t i = static_cast<size_t>(after + 1); i < obj.prop_names.size(); ++i) {
      if (obj.prop_required[i]) return true;
    }
    return false;
  };
  const auto start_key = [&]() {
    f.state = kObjColon;
    buf_.clear();
    if (obj.open) return push(F::kString, schema_->any_string(), kStrPlain, 0);
    // A closed object needs at least one property that may still come.
    if (static_cast<size_t>(f.a + 1) >= obj.prop_names.size()) return false;
    return push(F::kKey, f.node);
  };
  if (whitespace(c)) return R::kAccept;
  switch (f.state) {
    case kObjStart:
      if (c == '}') {
        if (obj.open || !remaining_required(-1)) {
          pop();
          return R::kAccept;
        }
        return R::kReject;
      }
      return c == '"' && start_key() ? R::kAccept : R::kReject;
    case kObjColon: {
      if (c != ':') return R::kReject;
      f.state = kObjAfterValue;
      const int32_t value = obj.open ? schema_->any_value() : obj.prop_nodes[static_cast<size_t>(f.a)];
      stack_.push_back({F::kValue, 0, value, 0});
      return R::kAccept;
    }
    case kObjAfterValue:
      if (c == ',') {
        if (!obj.open && static_cast<size_t>(f.a + 1) >= obj.prop_names.size()) return R::kReject;
        f.state = kObjComma;
        return R::kAccept;
      }
      if (c == '}' && (obj.open || !remaining_required(f.a))) {
        pop();
        return R::kAccept;
      }
      return R::kReject;
    case kObjComma: return c == '"' && start_key() ? R::kAccept : R::kReject;
    default: return R::kReject;
  }
}

// A property name of a closed object: properties come in schema order, optional ones may be skipped
// but a required one may not.
JsonMatcher::R JsonMatcher::key_step(char c) {
  Frame& parent = stack_[stack_.size() - 2];
  const JsonSchema::Node& obj = node(stack_.back().node);
  const bool closing = c == '"';
  if (!closing) {
    if (c == '\\' || static_cast<unsigned char>(c) < 0x20) return R::kReject;
    buf_.push_back(c);
  }
  for (size_t i = static_cast<size_t>(parent.a + 1); i < obj.prop_names.size(); ++i) {
    const std::string& name = obj.prop_names[i];
    const bool match = closing ? name == buf_ : name.compare(0, buf_.size(), buf_) == 0 && name.size() >= buf_.size();
    if (match) {
      if (closing) {
        parent.a = static_cast<int32_t>(i);
        pop();
      }
      return R::kAccept;
    }
    if (obj.prop_required[i]) break;
  }
  return R::kReject;
}

JsonMatcher::R JsonMatcher::array_step(char c) {
  Frame& f = stack_.back();
  const int32_t min_items = f.node >= 0 ? node(f.node).min_items : 0;
  const int32_t max_items = f.node >= 0 ? node(f.node).max_items : -1;
  const int32_t item = f.node >= 0 && node(f.node).items >= 0 ? node(f.node).items : schema_->any_value();
  if (whitespace(c)) return R::kAccept;
  const auto start_item = [&]() {
    if (max_items >= 0 && f.a >= max_items) return false;
    ++f.a;
    f.state = kArrAfterValue;
    return start_kind(c, item);
  };
  switch (f.state) {
    case kArrStart:
      if (c == ']') {
        if (min_items > 0) return R::kReject;
        pop();
        return R::kAccept;
      }
      return start_item() ? R::kAccept : R::kReject;
    case kArrAfterValue:
      if (c == ',') {
        if (max_items >= 0 && f.a >= max_items) return R::kReject;
        f.state = kArrComma;
        return R::kAccept;
      }
      if (c == ']' && f.a >= min_items) {
        pop();
        return R::kAccept;
      }
      return R::kReject;
    case kArrComma: return start_item() ? R::kAccept : R::kReject;
    default: return R::kReject;
  }
}

JsonMatcher::R JsonMatcher::string_step(char c) {
  Frame& f = stack_.back();
  const JsonSchema::Node& nd = node(f.node);
  const auto count_char = [&]() {
    if (nd.max_length >= 0 && f.a >= nd.max_length) return false;
    ++f.a;
    return true;
  };
  const auto u = static_cast<unsigned char>(c);
  const auto to = [&](uint8_t next) {
    f.state = next;
    return R::kAccept;
  };
  const auto cont = [&](unsigned char lo, unsigned char hi, uint8_t next) {
    return u >= lo && u <= hi ? to(next) : R::kReject;
  };
  switch (f.state) {
    case kStrPlain:
      if (c == '"') {
        if (f.a < nd.min_length) return R::kReject;
        pop();
        return R::kAccept;
      }
      if (u < 0x20) return R::kReject;
      if (u < 0x80 || (u >= 0xC2 && u <= 0xF4)) {
        // The lead byte counts the character; its continuation bytes belong to it.
        if (!count_char()) return R::kReject;
      }
      if (c == '\\') return to(kStrEscape);
      if (u < 0x80) return R::kAccept;
      if (u >= 0xC2 && u <= 0xDF) return to(kStrCont1);
      if (u == 0xE0) return to(kStrAfterE0);
      if (u == 0xED) return to(kStrAfterED);
      if (u >= 0xE1 && u <= 0xEF) return to(kStrCont2);
      if (u == 0xF0) return to(kStrAfterF0);
      if (u == 0xF4) return to(kStrAfterF4);
      if (u >= 0xF1 && u <= 0xF3) return to(kStrCont3);
      return R::kReject;  // a stray continuation byte, C0/C1 (overlong) or F5-FF
    case kStrCont1: return cont(0x80, 0xBF, kStrPlain);
    case kStrCont2: return cont(0x80, 0xBF, kStrCont1);
    case kStrCont3: return cont(0x80, 0xBF, kStrCont2);
    case kStrAfterE0: return cont(0xA0, 0xBF, kStrCont1);  // below A0: overlong
    case kStrAfterED: return cont(0x80, 0x9F, kStrCont1);  // above 9F: a surrogate
    case kStrAfterF0: return cont(0x90, 0xBF, kStrCont2);  // below 90: overlong
    case kStrAfterF4: return cont(0x80, 0x8F, kStrCont2);  // above 8F: past U+10FFFF
    case kStrEscape:
      if (c == 'u') return to(kStrHex0);
      if (std::string_view("\"\\/bfnrt").find(c) == std::string_view::npos) return R::kReject;
      return to(kStrPlain);
    case kStrHex0:
      if (c == 'd' || c == 'D') return to(kStrHexD);
      return is_hex(c) ? to(kStrHex0 + 1) : R::kReject;
    case kStrHexD:
      if (c >= '0' && c <= '7') return to(kStrHex0 + 2);
      if (std::string_view("89abAB").find(c) != std::string_view::npos) return to(kStrHigh2);
      return R::kReject;  // a low surrogate without its high half (or not a digit)
    case kStrHigh2: return is_hex(c) ? to(kStrHigh3) : R::kReject;
    case kStrHigh3: return is_hex(c) ? to(kStrLowBackslash) : R::kReject;
    case kStrLowBackslash: return c == '\\' ? to(kStrLowU) : R::kReject;  // same character: not counted
    case kStrLowU: return c == 'u' ? to(kStrLowD) : R::kReject;
    case kStrLowD: return c == 'd' || c == 'D' ? to(kStrLowC) : R::kReject;
    case kStrLowC: return std::string_view("cdefCDEF").find(c) != std::string_view::npos ? to(kStrHex0 + 2) : R::kReject;
    default:  // kStrHex0 + 1 .. kStrHex0 + 3
      if (!is_hex(c)) return R::kReject;
      return to(f.state == kStrHex0 + 3 ? kStrPlain : static_cast<uint8_t>(f.state + 1));
  }
}

JsonMatcher::R JsonMatcher::number_step(char c) {
  Frame& f = stack_.back();
  const bool integer = node(f.node).kind == Kind::kInteger;
  const auto digit = [&](uint8_t next) {
    const int limit = next == kNumFrac     ? kMaxFractionDigits
                      : next == kNumExp    ? kMaxPositiveExponentDigits
                      : next == kNumExpNeg ? kMaxExponentDigits
                                           : kMaxIntegerDigits;
    if (f.a >= limit) return R::kReject;
    ++f.a;
    f.state = next;
    return R::kAccept;
  };
  const auto part = [&](uint8_t next) {  // '.', 'e' or an exponent sign: a new part begins
    if (next != kNumESign && next != kNumENeg) f.a = 0;
    f.state = next;
    return R::kAccept;
  };
  switch (f.state) {
    case kNumStart:
      if (c == '-') {
        f.state = kNumMinus;
        return R::kAccept;
      }
      [[fallthrough]];
    case kNumMinus:
      if (c == '0') return digit(kNumZero);
      if (is_digit(c)) return digit(kNumInt);
      return R::kReject;
    case kNumZero:
    case kNumInt:
      if (is_digit(c) && f.state == kNumInt) return digit(kNumInt);
      if (!integer && c == '.') return part(kNumDot);
      if (!integer && (c == 'e' || c == 'E')) return part(kNumE);
      return is_digit(c) ? R::kReject : R::kEndRefeed;
    case kNumDot: return is_digit(c) ? digit(kNumFrac) : R::kReject;
    case kNumFrac:
      if (is_digit(c)) return digit(kNumFrac);
      if (c == 'e' || c == 'E') return part(kNumE);
      return R::kEndRefeed;
    case kNumE:
      if (c == '+') return part(kNumESign);
      if (c == '-') return part(kNumENeg);
      [[fallthrough]];
    case kNumESign: return is_digit(c) ? digit(kNumExp) : R::kReject;
    case kNumENeg: return is_digit(c) ? digit(kNumExpNeg) : R::kReject;
    case kNumExp: return is_digit(c) ? digit(kNumExp) : R::kEndRefeed;
    case kNumExpNeg: return is_digit(c) ? digit(kNumExpNeg) : R::kEndRefeed;
    default: return R::kReject;
  }
}

JsonMatcher::R JsonMatcher::literal_step(char c) {
  const auto& lits = node(stack_.back().node).literals;
  bool extends = false, exact = false, longer = false;
  for (const auto& l : lits) {
    if (l.size() > buf_.size() && l.compare(0, buf_.size(), buf_) == 0 && l[buf_.size()] == c) {
      extends = true;
      if (l.size() == buf_.size() + 1) exact = true; else longer = true;
    }
  }
  if (!extends) {
    // The literal may already be whole (enum [1, 12] after "1"): then `c` belongs to the parent.
    return std::find(lits.begin(), lits.end(), buf_) != lits.end() ? R::kEndRefeed : R::kReject;
  }
  buf_.push_back(c);
  if (exact && !longer) pop();
  return R::kAccept;
}

}  // namespace frugal
