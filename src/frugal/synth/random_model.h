// Random-weight GGUF models of a chosen architecture and shape: tiny ones for tests, full-size
// shapes (TinyLlama-1.1B, Qwen2.5-0.5B, Llama-3.1-8B) for speed benchmarks. Files follow the
// llama.cpp conventions (tensor names, metadata keys, quantization mixes) closely enough that
// llama.cpp itself can load them; see ../shared/reference/quantization.md section 1.
//
// Architectures:
//   llama    NORM rope, optional rope_freqs.weight (Llama 3.x).
//   mistral  written as general.architecture = "llama" (that is how llama.cpp stores Mistral-7B)
//            plus `llama.attention.sliding_window`. llama.cpp's llama architecture does not read
//            that key (it runs Mistral-7B without a window), so the file still loads there; frugal
//            reads it. The window counts the current token: query i sees keys j with
//            i - window < j <= i (llama.cpp's LLAMA_SWA_TYPE_STANDARD, HF Mistral's mask).
//   qwen2    NEOX rope, Q/K/V biases, usually tied embeddings.
//   qwen3    NEOX rope, per-head RMSNorm of Q and K (attn_q_norm / attn_k_norm), head_dim set
//            independently of n_embd / n_head (written as attention.key_length / value_length).
//
// Weight types: any single type with a reference quantizer (F32, F16, BF16, Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL) applied to every 2-D weight ("pure"), or the
// mix "Q4_K_M" with llama.cpp's rules (src/llama-quant.cpp, llama_tensor_get_type):
//   output.weight (token_embd.weight when tied): Q6_K, or Q8_0 when n_embd % 256 != 0;
//   attn_v and ffn_down: Q6_K on layers where use_more_bits(i, n) holds
//     (i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2), Q4_K elsewhere; everything else Q4_K.
// For every type, a tensor whose row length is not a multiple of the type's block size falls
// back as llama-quantize does (Q2_K/Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0,
// then F16 if still not divisible). 1-D tensors (norms, biases, rope_freqs) are always F32.
//
// Determinism: the bytes depend only on the options (seed included), never on the thread count.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "frugal/core/dtype.h"
#include "frugal/core/status.h"

namespace frugal::synth {

enum class VocabKind {
  kSpm,   // tokenizer.ggml.model "llama": <unk> <s> </s>, <0x00>..<0xFF>, scored pieces
  kBpe,   // tokenizer.ggml.model "gpt2": byte-level alphabet, merges, control tokens at the end
  kCopy,  // every tokenizer.* key copied from another GGUF (copy_from)
};

struct VocabOptions {
  VocabKind kind = VocabKind::kSpm;
  std::string bpe_pre = "qwen2";  // kBpe: tokenizer.ggml.pre, "qwen2" or "llama-bpe"
  std::string copy_from;          // kCopy: path of a GGUF holding the vocabulary
};

struct RandomModelOptions {
  std::string arch = "llama";  // llama | mistral | qwen2 | qwen3
  std::string name = "random";  // general.name
  int64_t n_embd = 256;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_head_kv = 2;
  int64_t head_dim = 0;  // 0: n_embd / n_head
  int64_t n_ff = 512;
  int64_t n_vocab = 512;  // 0 with VocabKind::kCopy: the copied vocabulary's size
  int64_t n_ctx = 2048;   // {arch}.context_length
  double rope_theta = 10000.0;
  double rms_eps = 1e-5;
  int64_t sliding_window = 0;  // llama or mistral; 0 = no window key
  // Llama-3 rope_freqs.weight (head_dim / 2 factors), from the converter's llama3 formula.
  bool rope_freqs = false;
  double rope_scaling_factor = 8.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int64_t rope_original_ctx = 8192;
  bool tied_embeddings = false;  // no output.weight; the LM head reuses token_embd.weight
  std::string weight_type = "F32";  // a type name ("Q4_K", "q8_0", ...) or "Q4_K_M"
  // Matrices and biases ~ N(0, std), norm weights ~ 1 + N(0, 0.1); "N" is the Irwin-Hall sum of
  // four uniforms: the normal's mean and variance, bell-shaped, bounded by 3.46 deviations.
  double weight_std = 0.02;
  uint64_t seed = 1;
  VocabOptions vocab;
  int n_threads = 0;  // 0: all hardware threads
};

// Writes the model to `path` (atomically, through GgufWriter). Peak memory is about the file
// size plus one tensor: GgufWriter keeps tensor bytes until write().
Status write_random_model(const RandomModelOptions& options, const std::string& path);

// Presets: "tinyllama-1.1b", "qwen2.5-0.5b", "llama3.1-8b" (full shapes; the Qwen one copies its
// vocabulary from `shared_models_dir`/vocab-qwen2.gguf) and "tiny-llama", "tiny-mistral",
// "tiny-qwen2", "tiny-qwen3" (a few MB; every row length a multiple of 256 so that every
// weight type applies without fallback).
Result<RandomModelOptions> random_model_preset(std::string_view name,
                                               const std::string& shared_models_dir = "../shared/models");
const std::vector<std::string>& random_model_preset_names();

// The type a weight tensor gets under `weight_type` (see the rules above). `layer` is the block
// index (-1 for global tensors), `n_dims` the tensor's number of dimensions, `ncols` its dims[0].
Result<DType> weight_type_for_tensor(const RandomModelOptions& options, const std::string& name,
                                     int layer, int n_dims, int64_t ncols);

// llama.cpp's general.file_type (LLAMA_FTYPE_*) for a weight_type string.
Result<uint32_t> llama_file_type(std::string_view weight_type);

}  // namespace frugal::synth
