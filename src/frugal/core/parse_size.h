// Sizes written by people: "256MiB", "1.5G", "64k", "1048576" (binary units, case-insensitive).
// The one parser of memory sizes, so --kv-memory, --max-body and `--set kv-memory=` agree.
#pragma once

#include <cstdint>
#include <string_view>

#include "frugal/core/status.h"

namespace frugal {

// Bytes; kInvalidArgument ("'12X' is not a size (e.g. 256MiB, 2G, 1048576)") for anything that is
// not a positive number with an optional unit b, k, kb, kib, m, mb, mib, g, gb, gib, or that is
// over 10^18 bytes. Callers add the option's name as context.
Result<uint64_t> parse_size(std::string_view text);

}  // namespace frugal
