// Anthropic /v1/messages request bodies (byte 0 is ignored, so the corpus format matches the other
// codec targets). See codec_fuzz.h for the checks.
#include "codec_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace frugal;
  if (size == 0) return 0;
  auto codec = server::make_anthropic_codec(fuzz::served_model());
  fuzz::check_codec(*codec, std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
  return 0;
}
