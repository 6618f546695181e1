// A token: an index into the model's vocabulary, the one alias every module uses.
#pragma once

#include <cstdint>

namespace frugal {

using TokenId = int32_t;

}  // namespace frugal
