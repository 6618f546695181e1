// Deterministic synthetic vocabularies for random models, laid out like the real ones so that
// the tokenizers have real work to do (see ../shared/reference/quantization.md section 2.6):
//   SPM ("llama"): 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then pieces learned by BPE
//     training on a small built-in English text (score -rank), then pieces made by joining two
//     existing pieces (when the text runs out of pairs), then the single characters.
//   BPE ("gpt2"): 0..255 the byte-level alphabet in GPT-2's order, then one token per merge
//     (learned from the same text, then synthesized), then control tokens at the end.
// Every piece can be reached by merging pieces that exist, as in a trained vocabulary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "frugal/core/status.h"
#include "frugal/format/gguf.h"

namespace frugal::synth {

struct SynthVocab {
  std::string model;  // tokenizer.ggml.model: "llama" or "gpt2"
  std::string pre;    // tokenizer.ggml.pre (gpt2 only)
  std::vector<std::string> tokens;
  std::vector<float> scores;        // llama only
  std::vector<int32_t> token_types;  // 1 normal, 2 unknown, 3 control, 6 byte
  std::vector<std::string> merges;  // gpt2 only, "left right"
  int64_t bos_id = -1;
  int64_t eos_id = -1;
  int64_t eot_id = -1;
  int64_t unk_id = -1;
  int64_t pad_id = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;  // llama only
};

// n_vocab >= 260.
Result<SynthVocab> make_spm_vocab(int64_t n_vocab, uint64_t seed);
// pre is "qwen2" or "llama-bpe"; n_vocab >= 256 + the number of control tokens + 1.
Result<SynthVocab> make_bpe_vocab(int64_t n_vocab, const std::string& pre, uint64_t seed);

// Sets every tokenizer.* key of `vocab`.
void write_vocab(const SynthVocab& vocab, GgufWriter& writer);

// GPT-2's byte-level alphabet: the UTF-8 text of the code point standing for each byte.
const std::vector<std::string>& gpt2_byte_alphabet();

}  // namespace frugal::synth
