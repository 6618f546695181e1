// Built-in chat templates: detection from the Jinja text and rendering, following the rules of
// llama.cpp's llm_chat_detect_template / llm_chat_apply_template for the families below.
#include <string>
#include <string_view>

#include "frugal/tokenize/tokenizer.h"

namespace frugal {
namespace {

struct NamedKind {
  const char* name;
  ChatTemplateKind kind;
};

constexpr NamedKind kNames[] = {
    {"chatml", ChatTemplateKind::kChatml},
    {"llama2", ChatTemplateKind::kMistral},
    {"llama2-sys", ChatTemplateKind::kLlama2},
    {"llama2-sys-bos", ChatTemplateKind::kLlama2SysBos},
    {"llama2-sys-strip", ChatTemplateKind::kLlama2SysStrip},
    {"mistral-v1", ChatTemplateKind::kMistralV1},
    {"mistral-v3", ChatTemplateKind::kMistralV3},
    {"mistral-v3-tekken", ChatTemplateKind::kMistralV3Tekken},
    {"mistral-v7", ChatTemplateKind::kMistralV7},
    {"zephyr", ChatTemplateKind::kZephyr},
    {"llama3", ChatTemplateKind::kLlama3},
};

// Families llama.cpp recognises that frugal does not render, in llama.cpp's order of tests, so
// that a template of one of them is reported by name instead of being mistaken for a later one.
struct Marker {
  const char* a;
  const char* b;  // nullptr: only `a` is needed
  const char* family;
};

std::string_view trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\v\f\r";
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

ChatTemplateKind detect_inst(std::string_view t) {
  auto has = [&](std::string_view x) { return t.find(x) != std::string_view::npos; };
  if (has("[SYSTEM_PROMPT]")) return ChatTemplateKind::kMistralV7;
  if (has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]")) {
    if (has(" [INST]")) return ChatTemplateKind::kMistralV1;
    if (has("\"[INST]\"")) return ChatTemplateKind::kMistralV3Tekken;
    return ChatTemplateKind::kMistralV3;
  }
  if (has("content.strip()")) return ChatTemplateKind::kLlama2SysStrip;
  if (has("bos_token + '[INST]")) return ChatTemplateKind::kLlama2SysBos;
  if (has("<<SYS>>")) return ChatTemplateKind::kLlama2;
  return ChatTemplateKind::kMistral;
}

void render_llama2(ChatTemplateKind kind, const std::vector<ChatMessage>& messages, std::string_view bos,
                   std::string_view eos, std::string& out) {
  const bool system_block = kind != ChatTemplateKind::kMistral;
  const bool bos_inside = kind == ChatTemplateKind::kLlama2SysBos;
  const bool strip = kind == ChatTemplateKind::kLlama2SysStrip;
  bool inside_turn = true;  // the first [INST] is written up front, without BOS
  out += "[INST] ";
  for (const ChatMessage& m : messages) {
    const std::string_view content = strip ? trim(m.content) : std::string_view(m.content);
    if (!inside_turn) {
      inside_turn = true;
      if (bos_inside) out += bos;
      out += "[INST] ";
    }
    if (m.role == "system") {
      if (system_block) {
        out += "<<SYS>>\n";
        out += content;
        out += "\n<</SYS>>\n\n";
      } else {
        out += content;
        out += "\n";
      }
    } else if (m.role == "user") {
      out += content;
      out += " [/INST]";
    } else {
      out += content;
      out += eos;
      inside_turn = false;
    }
  }
}

void render_mistral(ChatTemplateKind kind, const std::vector<ChatMessage>& messages, std::string_view eos,
                    std::string& out) {
  const std::string_view lead = kind == ChatTemplateKind::kMistralV1 ? " " : "";
  const std::string_view trail = kind == ChatTemplateKind::kMistralV3Tekken ? "" : " ";
  const bool trim_assistant = kind == ChatTemplateKind::kMistralV3;
  bool inside_turn = false;
  for (const ChatMessage& m : messages) {
    if (!inside_turn) {
      out += lead;
      out += "[INST]";
      out += trail;
      inside_turn = true;
    }
    if (m.role == "system") {
      out += m.content;
      out += "\n\n";
    } else if (m.role == "user") {
      out += m.content;
      out += lead;
      out += "[/INST]";
    } else {
      out += trail;
      out += trim_assistant ? trim(m.content) : std::string_view(m.content);
      out += eos;
      inside_turn = false;
    }
  }
}

void render_mistral_v7(const std::vector<ChatMessage>& messages, std::string_view eos, std::string& out) {
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      out += "[SYSTEM_PROMPT] " + m.content + "[/SYSTEM_PROMPT]";
    } else if (m.role == "user") {
      out += "[INST] " + m.content + "[/INST]";
    } else {
      out += " " + m.content;
      out += eos;
    }
  }
}

}  // namespace

const char* chat_template_name(ChatTemplateKind kind) {
  for (const NamedKind& n : kNames) {
    if (n.kind == kind) return n.name;
  }
  return "unknown";
}

Result<ChatTemplateKind> detect_chat_template(std::string_view t) {
  for (const NamedKind& n : kNames) {
    if (t == n.name) return n.kind;
  }
  auto has = [&](const char* x) { return t.find(x) != std::string_view::npos; };
  if (has("<|im_start|>")) {
    if (has("<|im_sep|>")) return error(ErrorCode::kNotSupported, "chat template: phi4 templates are not supported");
    return ChatTemplateKind::kChatml;
  }
  if (t.starts_with("mistral") || has("[INST]")) return detect_inst(t);
  // Checked in llama.cpp's order: the first family whose markers appear decides.
  static constexpr Marker kBefore[] = {
      {"<|assistant|>", "<|end|>", "phi3"},
      {"<|assistant|>", "<|user|>", "falcon3/glmedge"},
  };
  for (const Marker& m : kBefore) {
    if (has(m.a) && (!m.b || has(m.b))) {
      return error(ErrorCode::kNotSupported, "chat template: {} templates are not supported", m.family);
    }
  }
  if (has("<|user|>") && has("<|endoftext|>")) return ChatTemplateKind::kZephyr;
  static constexpr Marker kBetween[] = {
      {"bos_token + message['role']", nullptr, "monarch"},
      {"<start_of_turn>", nullptr, "gemma"},
      {"'\\n\\nAssistant: ' + eos_token", nullptr, "orion"},
      {"GPT4 Correct ", nullptr, "openchat"},
      {"USER: ", "ASSISTANT: ", "vicuna"},
      {"### Instruction:", "<|EOT|>", "deepseek"},
      {"<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>", "command-r"},
  };
  for (const Marker& m : kBetween) {
    if (has(m.a) && (!m.b || has(m.b))) {
      return error(ErrorCode::kNotSupported, "chat template: {} templates are not supported", m.family);
    }
  }
  if (has("<|start_header_id|>") && has("<|end_header_id|>")) return ChatTemplateKind::kLlama3;
  return error(ErrorCode::kNotSupported,
               "chat template: not one of the supported families (chatml, llama2, mistral, llama3, zephyr)");
}

std::string apply_chat_template(ChatTemplateKind kind, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt, std::string_view bos_text, std::string_view eos_text) {
  std::string out;
  switch (kind) {
    case ChatTemplateKind::kChatml:
      for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      break;
    case ChatTemplateKind::kLlama3:
      for (const ChatMessage& m : messages) {
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
        out += trim(m.content);
        out += "<|eot_id|>";
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    case ChatTemplateKind::kZephyr:
      for (const ChatMessage& m : messages) out += "<|" + m.role + "|>\n" + m.content + "<|endoftext|>\n";
      if (add_generation_prompt) out += "<|assistant|>\n";
      break;
    case ChatTemplateKind::kLlama2:
    case ChatTemplateKind::kMistral:
    case ChatTemplateKind::kLlama2SysBos:
    case ChatTemplateKind::kLlama2SysStrip:
      // The [INST] formats have no assistant header: the prompt ends with [/INST] already.
      render_llama2(kind, messages, bos_text, eos_text, out);
      break;
    case ChatTemplateKind::kMistralV1:
    case ChatTemplateKind::kMistralV3:
    case ChatTemplateKind::kMistralV3Tekken:
      render_mistral(kind, messages, eos_text, out);
      break;
    case ChatTemplateKind::kMistralV7:
      render_mistral_v7(messages, eos_text, out);
      break;
  }
  return out;
}

}  // namespace frugal
