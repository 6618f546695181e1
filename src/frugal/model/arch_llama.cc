// Llama 1/2/3 (and Mistral-7B, which GGUF files declare as "llama"): RMSNorm, NORM-style RoPE
// on adjacent pairs (the converter permutes Q/K rows into that layout), GQA, SwiGLU; llama-3
// long-context scaling through the rope_freqs.weight tensor; an optional sliding window when the
// metadata declares one.
#include "frugal/model/architecture.h"

namespace frugal {
namespace {
Status read(const GgufFile& f, ModelConfig& c) {
  FRUGAL_RETURN_IF_ERROR(read_llama_like_config(f, c));
  c.rope.neox = false;
  return ok_status();
}
}  // namespace

extern const Architecture kArchLlama = {"llama", read, bind_llama_like_weights};

}  // namespace frugal
