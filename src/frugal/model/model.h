// A decoder-only transformer loaded from GGUF: configuration read from metadata, weights bound
// zero-copy to the mapped file, and a forward pass over a ragged batch (several sequences, each
// token with its own position) written once against the Backend op set.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "frugal/backend/backend.h"
#include "frugal/core/status.h"
#include "frugal/core/token_id.h"
#include "frugal/format/gguf.h"
#include "frugal/kv/attention_observer.h"
#include "frugal/kv/kv_cache.h"

namespace frugal {

struct ModelConfig {
  std::string arch;         // general.architecture
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;     // key/value length per head
  int64_t n_ff = 0;
  int64_t n_ctx_train = 0;
  float rms_eps = 1e-5f;
  RopeParams rope;          // freq_factors bound at load when rope_freqs.weight exists
  int32_t sliding_window = 0;  // 0: full attention
  bool qkv_bias = false;    // qwen2
  bool qk_norm = false;     // qwen3: RMSNorm per head on Q and K before RoPE
  bool tied_embeddings = false;
};

struct LayerWeights {
  std::vector<float> attn_norm;        // [n_embd]
  WeightTensor wq, wk, wv, wo;         // [n_head*hd, n_embd], [n_kv*hd, n_embd] x2, [n_embd, n_head*hd]
  std::vector<float> bq, bk, bv;       // [n_head*hd], [n_kv*hd] x2 (qwen2) or empty
  std::vector<float> q_norm, k_norm;   // [head_dim] (qwen3) or empty
  std::vector<float> ffn_norm;         // [n_embd]
  WeightTensor w_gate, w_up, w_down;   // [n_ff, n_embd] x2, [n_embd, n_ff]
};

struct ModelWeights {
  WeightTensor token_embd;             // [n_vocab, n_embd]
  std::vector<float> output_norm;      // [n_embd]
  WeightTensor output;                 // [n_vocab, n_embd] (token_embd when tied)
  std::vector<float> rope_freqs;       // [n_rot/2] or empty
  std::vector<LayerWeights> layers;
  uint64_t bytes = 0;                  // bytes of all weight tensors
  // Of those, bytes rearranged at load for the CPU kernels (ModelLoadOptions::cpu_layouts). They
  // are rewritten in place: each repacked page replaces the file's page in memory, no copy is kept.
  uint64_t repacked_bytes = 0;
};

// One step's worth of tokens, possibly from several sequences. Tokens of one sequence must appear
// in increasing position order and continue that sequence's cache.
struct Batch {
  std::vector<TokenId> tokens;
  std::vector<int32_t> pos;
  std::vector<int32_t> seq;
  std::vector<uint8_t> want_logits;  // 1: write this token's logits to the output
  // Every token computed bit for bit as in a pass of its own (Backend::set_row_invariant): a
  // speculative verify pass, whose rows must be plain decoding's. Kept by clear().
  bool row_invariant = false;
  // [n_layer] sublayers the pass skips, per layer a sum of kSkipAttention and kSkipMlp (0: the
  // layer runs whole): the residual stream passes a skipped sublayer unchanged, and a layer whose
  // attention is skipped writes no K/V. The target as its own draft (self-speculative decoding).
  // Empty: every layer. Kept by clear().
  static constexpr uint8_t kSkipAttention = 1;
  static constexpr uint8_t kSkipMlp = 2;
  static constexpr uint8_t kSkipLayer = kSkipAttention | kSkipMlp;
  std::vector<uint8_t> skip_layers;
  void clear() { tokens.clear(); pos.clear(); seq.clear(); want_logits.clear(); }
  void add(TokenId t, int32_t p, int32_t s, bool logits) {
    tokens.push_back(t); pos.push_back(p); seq.push_back(s); want_logits.push_back(logits ? 1 : 0);
  }
  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  int64_t n_logits() const;
};

struct ModelLoadOptions {
  bool progress = false;  // draw a progress bar on stderr while touching the file
  // Repack weights in place where a CPU kernel reads another layout faster (backend/cpu/repack.h).
  // Only for a model run by the CPU backend: other backends read the file's layout.
  bool cpu_layouts = false;
};

class Model {
 public:
  static Result<std::unique_ptr<Model>> load(const std::string& path, const ModelLoadOptions& opts = {});
  ~Model();

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const GgufFile& gguf() const { return *file_; }
  // Names the weight types, e.g. "q4_K (most), q6_K (8 tensors), f32 (norms)".
  std::string describe_types() const;

  // KV cache options sized for this model.
  KvCacheOptions kv_options(int n_seq, int capacity, DType dtype = DType::kF16) const;

  // Runs the batch, appending every token's K/V to `kv`. Writes n_logits() rows of n_vocab floats
  // to `logits`, in batch order of the tokens that asked for them. One thread at a time: the
  // activations live in this object, so a second concurrent call is refused (kInvalidArgument)
  // rather than allowed to corrupt the first; load the model twice to run two loops at once.
  // `observer`, when given, sees every layer's queries around attention (scored KV policies); the
  // pass then runs op by op, since a backend that runs it whole (forward_model) shows no queries.
  Status forward(const Batch& batch, KvCache& kv, Backend& backend, float* logits,
                 AttentionObserver* observer = nullptr);
  // The same step, writing for each row that asked for logits only its greedy token
  // (core/greedy_token.h) to `tokens`, in the same order. The token is the one a
  // temperature-0 sampler without penalties picks from forward()'s logits; a backend that runs
  // the pass on a device (forward_model) picks it there and copies no logits back.
  Status forward_greedy(const Batch& batch, KvCache& kv, Backend& backend, int32_t* tokens,
                        AttentionObserver* observer = nullptr);

 private:
  Model() = default;
  struct Workspace;
  Status check_batch(const Batch& batch, const KvCache& kv) const;
  // forward() when `greedy` is null, else forward_greedy().
  Status run_forward(const Batch& batch, KvCache& kv, Backend& backend, float* logits, int32_t* greedy,
                     AttentionObserver* observer);
  // The pass on a backend that runs it whole, with the observer fed from the queries it copies back
  // (false: the backend runs passes op by op).
  Result<bool> forward_whole_observed(const Batch& batch, KvCache& kv, Backend& backend, float* logits,
                                      int32_t* greedy, AttentionObserver& observer);
  void ensure_workspace(int64_t n_tokens);
  struct LayerStep {  // what every layer of one forward step works on
    const Batch& batch;
    KvCache& kv;
    Backend& be;
    AttentionObserver* observer;
  };
  void layer_forward(int il, const LayerStep& step);

  std::unique_ptr<GgufFile> file_;
  ModelConfig config_;
  ModelWeights weights_;
  std::unique_ptr<Workspace> ws_;
  std::vector<float> captured_q_;  // forward_whole_observed: [n_layer][rows][n_head * head_dim]
  std::atomic<bool> in_forward_{false};
};

}  // namespace frugal
