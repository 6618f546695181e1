// Human-readable rendering of a GGUF file's metadata and tensor table (for `frugal info`).
#pragma once

#include <cstddef>
#include <string>

#include "frugal/format/gguf.h"

namespace frugal {

struct GgufDumpOptions {
  size_t max_array_items = 8;    // arrays show "[n items] first, few, ..."
  size_t max_string_bytes = 120;  // longer strings (chat templates) are cut with "..."
  bool tensors = true;            // include the tensor table
};

// One value as text: 64, 1e-05, "llama", true, [512 items] "<unk>", "<s>", ...
std::string format_gguf_value(const GgufValue& v, const GgufDumpOptions& opts = {});

// Header line, one "key: type = value" line per metadata entry, then one line per tensor:
// "name  type  [d0, d1]  n_elements  nbytes  @offset".
std::string gguf_dump(const GgufFile& file, const GgufDumpOptions& opts = {});

}  // namespace frugal
