// Qwen2 / Qwen2.5: the llama block with biases on Q, K and V, NEOX RoPE (weights are not
// permuted by the converter), and tied embeddings in the small sizes.
#include "frugal/model/architecture.h"

namespace frugal {
namespace {
Status read(const GgufFile& f, ModelConfig& c) {
  FRUGAL_RETURN_IF_ERROR(read_llama_like_config(f, c));
  c.rope.neox = true;
  c.qkv_bias = true;
  return ok_status();
}
}  // namespace

extern const Architecture kArchQwen2 = {"qwen2", read, bind_llama_like_weights};

}  // namespace frugal
