#include "frugal/attention/tilemix/tilemix.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace frugal::tilemix {

std::vector<std::string> option_names() { return {"tilemix-int8", "tilemix-min-blocks"}; }

bool is_option(const std::string& name) {
  const auto names = option_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

Status set_option(TileMixOptions& o, const std::string& name, const std::string& value, const std::string& label) {
  const char* end = value.data() + value.size();
  if (name == "tilemix-int8") {
    double v = 0;
    const auto [p, ec] = std::from_chars(value.data(), end, v);
    if (value.empty() || ec != std::errc() || p != end || !std::isfinite(v)) {
      return error(ErrorCode::kInvalidArgument, "{}: '{}' is not a number (a fraction of tiles in [0, 1])", label,
                   value);
    }
    if (v < 0 || v > 1) return error(ErrorCode::kInvalidArgument, "{}: {} is not in [0, 1]", label, value);
    o.int8_fraction = v;
    return ok_status();
  }
  if (name == "tilemix-min-blocks") {
    int32_t v = 0;
    const auto [p, ec] = std::from_chars(value.data(), end, v);
    if (value.empty() || ec != std::errc() || p != end) {
      return error(ErrorCode::kInvalidArgument, "{}: '{}' is not an integer", label, value);
    }
    if (v < 1 || v > (1 << 30)) return error(ErrorCode::kInvalidArgument, "{}: {} is not in [1, {}]", label, v, 1 << 30);
    o.min_blocks = v;
    return ok_status();
  }
  return error(ErrorCode::kInvalidArgument, "{}: not a TileMix option", label);
}

int64_t int8_tile_count(double fraction, int64_t n) {
  if (n <= 0 || fraction <= 0) return 0;
  if (fraction >= 1) return n;
  return std::min<int64_t>(n, static_cast<int64_t>(std::floor(fraction * static_cast<double>(n) + 0.5)));
}

}  // namespace frugal::tilemix
