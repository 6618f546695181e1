// Byte-level BPE pre-tokenizers: the regex splits llama.cpp applies before merging, written as
// hand matchers over code points (internal to tokenize/). Each matcher reproduces the leftmost-
// first alternation semantics of its regex exactly; see pretokenize.cc.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace frugal {

enum class PreTokenizerKind {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
  kGpt2,
  // (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  //  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // as kLlama3 with \p{N} (single digits) instead of \p{N}{1,3}
  kQwen2,
  // llama.cpp's fallback for BPE vocabularies without a known pre-tokenizer: four regexes
  // applied in turn, each splitting the pieces of the previous one:
  // [\p{P}\$\+<=>\^~\|]+ , the kGpt2 regex, \p{N}+ , [0-9][0-9][0-9]
  kDefault,
};

// Splits the code points `cpts` (with their unicode::flags in `flags`) into words and appends
// the end index (exclusive, in code points) of each word to `ends`. Words cover all input.
void pretokenize(PreTokenizerKind kind, std::span<const uint32_t> cpts, std::span<const uint8_t> flags,
                 std::vector<uint32_t>& ends);

}  // namespace frugal
