// Tokenizers built from GGUF metadata: SentencePiece-style (tokenizer.ggml.model = "llama", with
// byte fallback) and byte-level BPE ("gpt2", pre-tokenizers llama3 / qwen2 / default). Token for
// token identical to llama.cpp's llama_tokenize / llama_token_to_piece.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "frugal/core/status.h"
#include "frugal/core/token_id.h"

namespace frugal {

class GgufFile;

struct TokenizeOptions {
  bool add_special = true;     // add BOS (and EOS) as the metadata says
  bool parse_special = false;  // recognise special-token text such as "<|im_start|>" in the input
};

class Tokenizer {
 public:
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& file);
  virtual ~Tokenizer() = default;

  // Rejects invalid UTF-8 input with kInvalidArgument naming the byte offset.
  virtual Result<std::vector<TokenId>> encode(std::string_view text, const TokenizeOptions& opts = {}) const = 0;
  // The bytes of one token as llama.cpp's token_to_piece renders them (special tokens rendered
  // when `special` is true). May be a partial UTF-8 sequence (byte tokens).
  virtual std::string piece(TokenId id, bool special = false) const = 0;
  virtual int32_t n_vocab() const = 0;
  // The text of a whole sequence as llama.cpp's llama_detokenize gives it: with remove_special,
  // a leading BOS and trailing EOS (when the vocabulary adds them) are dropped; the add_space_prefix
  // space is stripped from the first piece unless a BOS was dropped; and vocabularies that ask for
  // it get llama.cpp's clean-up of spaces before punctuation and contractions (" ," -> ",",
  // " 's" -> "'s", ...). Raw bytes, not necessarily valid UTF-8; use Detokenizer to stream.
  virtual std::string detokenize(const std::vector<TokenId>& ids, bool remove_special = false,
                                 bool unparse_special = false) const = 0;

  TokenId bos() const { return bos_; }
  TokenId eos() const { return eos_; }
  TokenId eot() const { return eot_; }  // -1 when absent
  bool add_bos() const { return add_bos_; }
  // SPM vocabularies put a space before the text (tokenizer.ggml.add_space_prefix); the
  // Detokenizer strips it again from the first piece, as llama.cpp's detokenize does.
  bool add_space_prefix() const { return add_space_prefix_; }
  // True for EOS, EOT and other end-of-generation tokens.
  virtual bool is_eog(TokenId id) const = 0;
  virtual bool is_control(TokenId id) const = 0;
  // tokenizer.chat_template (empty when absent).
  const std::string& chat_template() const { return chat_template_; }

 protected:
  TokenId bos_ = -1, eos_ = -1, eot_ = -1;
  bool add_bos_ = false;
  bool add_space_prefix_ = false;
  std::string chat_template_;
};

// Turns a stream of tokens into text that is always valid UTF-8: bytes of an incomplete
// character are held back until the character completes (or flushed as U+FFFD at finish()), and
// ill-formed bytes become U+FFFD. The concatenated output equals llama_detokenize(ids,
// remove_special=false, unparse_special=render_special) wherever that is valid UTF-8: with
// add_space_prefix, the first piece loses one leading space (a BOS, rendered or not, is that
// first piece). Pass strip_space_prefix = false when streaming a continuation, e.g. generated
// tokens after a prompt: llama.cpp's CLI and server print those pieces unchanged.
class Detokenizer {
 public:
  explicit Detokenizer(const Tokenizer& tok, bool render_special = false, bool strip_space_prefix = true)
      : tok_(tok), special_(render_special), strip_first_(strip_space_prefix), first_(strip_space_prefix) {}
  // Returns the text that became complete with this token (possibly empty).
  std::string push(TokenId id);
  // Ends the stream (the next push starts a new one) and returns what was held back.
  std::string finish();

 private:
  const Tokenizer& tok_;
  bool special_;
  bool strip_first_;
  bool first_;
  std::string pending_;
};

// Chat templates for the common families, chosen from tokenizer.chat_template.
struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

// Each kind renders exactly as llama.cpp's built-in template of the name chat_template_name()
// gives. The [INST] family has several: kLlama2 is the Llama 2 format with a <<SYS>> block;
// kMistral is the plain [INST] format without one (Mistral-7B-Instruct v0.1/v0.2 templates, which
// llama.cpp calls "llama2"); the others are the variants llama.cpp tells apart by markers in the
// template text. Values are stable; new kinds are appended.
enum class ChatTemplateKind {
  kChatml,
  kLlama2,
  kLlama3,
  kMistral,
  kZephyr,
  kLlama2SysBos,    // <<SYS>>, and <s> before every later [INST]
  kLlama2SysStrip,  // <<SYS>>, message contents trimmed
  kMistralV1,
  kMistralV3,
  kMistralV3Tekken,
  kMistralV7,
};

// llama.cpp's name of the template ("chatml", "llama2-sys", "llama2", "mistral-v3", ...).
const char* chat_template_name(ChatTemplateKind kind);

// Chooses the family from the template text (or its name) with llama.cpp's rules;
// kNotSupported when nothing matches or the family is one frugal does not render.
Result<ChatTemplateKind> detect_chat_template(std::string_view template_text);
// Renders the conversation; `add_generation_prompt` appends the assistant header (the [INST]
// formats have none). `bos_text` / `eos_text` stand where llama.cpp's [INST] templates write <s>
// and </s>.
std::string apply_chat_template(ChatTemplateKind kind, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt, std::string_view bos_text,
                                std::string_view eos_text);

}  // namespace frugal
