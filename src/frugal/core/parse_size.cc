#include "frugal/core/parse_size.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

namespace frugal {

Result<uint64_t> parse_size(std::string_view text) {
  const std::string s(text);  // strtod needs a terminated string
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  std::string unit(end != nullptr ? end : "");
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double mul = 0;
  if (unit.empty() || unit == "b") mul = 1;
  if (unit == "k" || unit == "kb" || unit == "kib") mul = 1024.0;
  if (unit == "m" || unit == "mb" || unit == "mib") mul = 1024.0 * 1024;
  if (unit == "g" || unit == "gb" || unit == "gib") mul = 1024.0 * 1024 * 1024;
  if (end == s.c_str() || mul == 0 || !(v > 0) || !std::isfinite(v * mul) || v * mul > 1e18) {
    return error(ErrorCode::kInvalidArgument, "'{}' is not a size (e.g. 256MiB, 2G, 1048576)", s);
  }
  return static_cast<uint64_t>(v * mul);
}

}  // namespace frugal
