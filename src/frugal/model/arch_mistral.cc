// Files that name the architecture "mistral": the llama block with sliding-window attention
// (mistral.attention.sliding_window), NORM RoPE.
#include "frugal/model/architecture.h"

namespace frugal {
namespace {
Status read(const GgufFile& f, ModelConfig& c) {
  FRUGAL_RETURN_IF_ERROR(read_llama_like_config(f, c));
  c.rope.neox = false;
  return ok_status();
}
}  // namespace

extern const Architecture kArchMistral = {"mistral", read, bind_llama_like_weights};

}  // namespace frugal
