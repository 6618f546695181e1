#include "frugal/eval/jsonl.h"

#include <fmt/format.h>

namespace frugal::eval {

std::string json_escape(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

std::string example_to_json(const TaskExample& ex) {
  return fmt::format(
      "{{\"family\":{},\"split\":\"{}\",\"seed\":{},\"length\":{},\"tokens\":{},\"prompt\":{},"
      "\"answer\":{},\"final_answer\":{}}}",
      json_escape(ex.family), split_name(ex.split), ex.seed, ex.length, ex.n_tokens(),
      json_escape(ex.prompt), json_escape(ex.answer), json_escape(ex.final_answer));
}

}  // namespace frugal::eval
