#include "frugal/eval/vocab.h"

namespace frugal::eval {

bool in_task_alphabet(char c) { return kTaskAlphabet.find(c) != std::string_view::npos; }

Status check_task_alphabet(std::string_view text, std::string_view what) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (!in_task_alphabet(text[i])) {
      return error(ErrorCode::kInvalidArgument,
                   "{}: character 0x{:02x} at offset {} is outside the task alphabet", what,
                   static_cast<unsigned>(static_cast<unsigned char>(text[i])), i);
    }
  }
  return ok_status();
}

}  // namespace frugal::eval
