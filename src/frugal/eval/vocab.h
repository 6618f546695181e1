// The character set of every task text. The project's own models use a character-level vocabulary
// built from exactly these characters (train/ maps each to one token), so a prompt of n characters
// is n tokens plus BOS.
#pragma once

#include <string_view>

#include "frugal/core/status.h"

namespace frugal::eval {

// 82 characters: newline, space, digits, lower and upper case letters, 18 punctuation marks.
// Frozen: the trained models' token ids follow this order.
inline constexpr std::string_view kTaskAlphabet =
    "\n 0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.,:;=+-*?!()'\"/#>_";

bool in_task_alphabet(char c);
// kInvalidArgument naming `what` and the offset of the first character outside the alphabet.
Status check_task_alphabet(std::string_view text, std::string_view what);

}  // namespace frugal::eval
