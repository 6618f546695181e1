// Chat-template detection and rendering on arbitrary template text and conversations. Input: byte
// 0 picks the template kind, byte 1 bit 0 asks for the generation prompt; the rest is split at NUL
// bytes into the template text to detect, then role, content, role, content, ...
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "frugal/tokenize/tokenizer.h"

namespace {

// The kinds the header lists; kMistralV7 is the last one appended.
constexpr int kKinds = static_cast<int>(frugal::ChatTemplateKind::kMistralV7) + 1;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace frugal;
  if (size < 2) return 0;
  const auto kind = static_cast<ChatTemplateKind>(data[0] % kKinds);
  const bool add_generation_prompt = (data[1] & 1) != 0;
  std::vector<std::string_view> fields;
  const std::string_view rest(reinterpret_cast<const char*>(data + 2), size - 2);
  for (size_t start = 0;;) {
    const size_t end = rest.find('\0', start);
    fields.push_back(rest.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }

  auto detected = detect_chat_template(fields[0]);
  if (detected.ok()) {
    const int k = static_cast<int>(detected.value());
    if (k < 0 || k >= kKinds) std::abort();
    // A detected kind's own name must detect as that kind again.
    auto again = detect_chat_template(chat_template_name(detected.value()));
    if (!again.ok() || again.value() != detected.value()) {
      std::fprintf(stderr, "'%s' does not detect as itself\n", chat_template_name(detected.value()));
      std::abort();
    }
  }

  std::vector<ChatMessage> messages;
  for (size_t i = 1; i + 1 < fields.size(); i += 2) {
    messages.push_back({std::string(fields[i]), std::string(fields[i + 1])});
  }
  const std::string text = apply_chat_template(kind, messages, add_generation_prompt, "<s>", "</s>");
  (void)text;
  return 0;
}
