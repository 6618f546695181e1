// Ollama request bodies: byte 0 even -> /api/generate, odd -> /api/chat. See codec_fuzz.h for the
// checks.
#include "codec_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace frugal;
  if (size == 0) return 0;
  const auto& m = fuzz::served_model();
  auto codec = data[0] % 2 == 0 ? server::make_ollama_generate_codec(m) : server::make_ollama_chat_codec(m);
  fuzz::check_codec(*codec, std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
  return 0;
}
