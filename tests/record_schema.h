// A validator for the subset of JSON Schema that docs/record.schema.json uses: type (one or a
// list; "integer" is a number with no fraction), properties, required, additionalProperties: false,
// enum, minimum, items and "$ref": "#/$defs/NAME". Any other keyword in the schema is an error, so
// the schema cannot grow a rule this validator silently ignores.
#pragma once

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace frugal::schema_check {

class MiniSchema {
 public:
  explicit MiniSchema(nlohmann::json schema) : root_(std::move(schema)) {}
  static MiniSchema load(const std::string& path) {
    std::ifstream f(path);
    return MiniSchema(nlohmann::json::parse(f));
  }
  // "" when `v` is valid; else the first violation, as "PATH: what".
  std::string validate(const nlohmann::json& v) const { return check(root_, v, "$"); }

 private:
  static bool is_type(const nlohmann::json& v, const std::string& t) {
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "string") return v.is_string();
    if (t == "boolean") return v.is_boolean();
    if (t == "null") return v.is_null();
    if (t == "number") return v.is_number();
    if (t == "integer") return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    return false;
  }

  std::string check(const nlohmann::json& s, const nlohmann::json& v, const std::string& path) const {
    static const std::set<std::string> kKnown = {"$schema", "$id", "title", "description", "type", "properties",
                                                 "required", "additionalProperties", "enum", "minimum", "items",
                                                 "$ref", "$defs"};
    for (const auto& [k, _] : s.items()) {
      if (!kKnown.count(k)) return path + ": schema keyword '" + k + "' is not supported by this validator";
    }
    if (s.contains("$ref")) {
      const std::string ref = s["$ref"].get<std::string>();
      const std::string prefix = "#/$defs/";
      if (ref.rfind(prefix, 0) != 0 || !root_["$defs"].contains(ref.substr(prefix.size()))) {
        return path + ": unresolvable $ref " + ref;
      }
      return check(root_["$defs"][ref.substr(prefix.size())], v, path);
    }
    if (s.contains("type")) {
      bool ok = false;
      if (s["type"].is_string()) {
        ok = is_type(v, s["type"].get<std::string>());
      } else {
        for (const auto& t : s["type"]) ok = ok || is_type(v, t.get<std::string>());
      }
      if (!ok) return path + ": " + v.dump() + " is not of type " + s["type"].dump();
    }
    if (s.contains("enum")) {
      bool found = false;
      for (const auto& e : s["enum"]) found = found || e == v;
      if (!found) return path + ": " + v.dump() + " is not one of " + s["enum"].dump();
    }
    if (s.contains("minimum") && v.is_number() && v.get<double>() < s["minimum"].get<double>()) {
      return path + ": " + v.dump() + " is below the minimum " + s["minimum"].dump();
    }
    if (v.is_object()) {
      if (s.contains("required")) {
        for (const auto& r : s["required"]) {
          if (!v.contains(r.get<std::string>())) return path + ": required property '" + r.get<std::string>() + "' is missing";
        }
      }
      const bool closed = s.contains("additionalProperties") && s["additionalProperties"] == false;
      for (const auto& [k, x] : v.items()) {
        if (s.contains("properties") && s["properties"].contains(k)) {
          if (std::string e = check(s["properties"][k], x, path + "." + k); !e.empty()) return e;
        } else if (closed) {
          return path + ": property '" + k + "' is not in the schema";
        }
      }
    }
    if (v.is_array() && s.contains("items")) {
      for (size_t i = 0; i < v.size(); ++i) {
        if (std::string e = check(s["items"], v[i], path + "[" + std::to_string(i) + "]"); !e.empty()) return e;
      }
    }
    return "";
  }

  nlohmann::json root_;
};

}  // namespace frugal::schema_check
