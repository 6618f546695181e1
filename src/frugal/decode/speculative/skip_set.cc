#include "frugal/decode/speculative/skip_set.h"

#include "frugal/model/model.h"

namespace frugal::speculative {

std::string format_skip_set(const std::vector<uint8_t>& skip) {
  static constexpr char kLetters[] = {'-', 'a', 'm', 'x'};
  std::string out;
  for (const uint8_t s : skip) out += s <= Batch::kSkipLayer ? kLetters[s] : '?';
  return out;
}

Result<std::vector<uint8_t>> parse_skip_set(const std::string& text, int32_t n_layer) {
  if (static_cast<int64_t>(text.size()) != n_layer) {
    return error(ErrorCode::kInvalidArgument, "skip set '{}' has {} letters for a model of {} layers", text,
                 text.size(), n_layer);
  }
  std::vector<uint8_t> skip(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    switch (text[i]) {
      case '-': skip[i] = 0; break;
      case 'a': skip[i] = Batch::kSkipAttention; break;
      case 'm': skip[i] = Batch::kSkipMlp; break;
      case 'x': skip[i] = Batch::kSkipLayer; break;
      default:
        return error(ErrorCode::kInvalidArgument,
                     "skip set '{}': letter {} is '{}', not - (runs), a (attention skipped), m (MLP skipped) or x "
                     "(both)",
                     text, i, text[i]);
    }
  }
  return skip;
}

int32_t skipped_sublayers(const std::vector<uint8_t>& skip) {
  int32_t n = 0;
  for (const uint8_t s : skip) n += ((s & Batch::kSkipAttention) ? 1 : 0) + ((s & Batch::kSkipMlp) ? 1 : 0);
  return n;
}

}  // namespace frugal::speculative
