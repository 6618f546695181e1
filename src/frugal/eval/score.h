// Exact-match scoring of a model's completion against a task example.
//
// Rules (case-sensitive throughout):
//  1. The answer line is the first line of the completion that starts with "A:" once its leading
//     spaces and tabs are removed. The extracted answer is the rest of that line with leading and
//     trailing whitespace (space, tab, CR) removed; spaces inside it must match exactly.
//  2. Everything after the answer line's newline is ignored: a model that goes on writing after
//     its answer is not penalised. Text after the answer on the same line is not ignored
//     ("A: 42 or 43" is wrong for 42).
//  3. With no answer line the completion is wrong and the extracted answer is empty; lines before
//     the answer line do not matter for `correct`.
//  4. `full_match` additionally requires the scratchpad: the completion up to the end of the
//     answer line, with leading and trailing whitespace of the whole removed, must equal the
//     expected answer exactly (inner lines and spaces included).
#pragma once

#include <string>
#include <string_view>

#include "frugal/eval/task.h"

namespace frugal::eval {

struct TaskScore {
  bool found = false;       // an answer line exists
  bool correct = false;     // extracted == example.final_answer
  bool full_match = false;  // scratchpad and answer as expected (rule 4)
  std::string extracted;
};

// Rule 1-3: the final answer of a completion; `found` is set when an answer line exists.
std::string extract_final_answer(std::string_view completion, bool* found = nullptr);

TaskScore score_completion(const TaskExample& example, std::string_view completion);

}  // namespace frugal::eval
