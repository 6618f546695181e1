// Qwen3: no QKV biases; an RMSNorm over each head of Q and K before RoPE; head_dim from
// attention.key_length (128 even where n_embd / n_head differs); NEOX RoPE.
#include "frugal/model/architecture.h"

namespace frugal {
namespace {
Status read(const GgufFile& f, ModelConfig& c) {
  FRUGAL_RETURN_IF_ERROR(read_llama_like_config(f, c));
  c.rope.neox = true;
  c.qk_norm = true;
  return ok_status();
}
}  // namespace

extern const Architecture kArchQwen3 = {"qwen3", read, bind_llama_like_weights};

}  // namespace frugal
