// One task example as one JSON line: {"family", "split", "seed", "length", "tokens", "prompt",
// "answer", "final_answer"}. Keys in this order; strings escaped per RFC 8259.
#pragma once

#include <string>
#include <string_view>

#include "frugal/eval/task.h"

namespace frugal::eval {

std::string json_escape(std::string_view text);  // with the surrounding quotes
std::string example_to_json(const TaskExample& ex);  // no trailing newline

}  // namespace frugal::eval
