#include "frugal/eval/score.h"

namespace frugal::eval {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// Offset of the answer line's first character and its end (the newline or the end of text).
bool find_answer_line(std::string_view text, size_t* begin, size_t* end) {
  size_t line = 0;
  while (line <= text.size()) {
    size_t eol = text.find('\n', line);
    if (eol == std::string_view::npos) eol = text.size();
    size_t p = line;
    while (p < eol && (text[p] == ' ' || text[p] == '\t')) ++p;
    if (eol - p >= 2 && text[p] == 'A' && text[p + 1] == ':') {
      *begin = p;
      *end = eol;
      return true;
    }
    line = eol + 1;
  }
  return false;
}

}  // namespace

std::string extract_final_answer(std::string_view completion, bool* found) {
  size_t begin = 0, end = 0;
  const bool ok = find_answer_line(completion, &begin, &end);
  if (found != nullptr) *found = ok;
  if (!ok) return {};
  return std::string(trim(completion.substr(begin + 2, end - begin - 2)));
}

TaskScore score_completion(const TaskExample& example, std::string_view completion) {
  TaskScore s;
  s.extracted = extract_final_answer(completion, &s.found);
  s.correct = s.found && s.extracted == example.final_answer;
  if (s.found) {
    size_t begin = 0, end = 0;
    find_answer_line(completion, &begin, &end);
    s.full_match = trim(completion.substr(0, end)) == trim(example.answer);
  }
  return s;
}

}  // namespace frugal::eval
