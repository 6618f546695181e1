// Chat templates. Expected prompts are written from the published formats: ChatML
// (<|im_start|>role\n...<|im_end|>\n), Llama 3 (<|start_header_id|>role<|end_header_id|>\n\n
// content<|eot_id|>, contents trimmed), Llama 2 ([INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST]
// answer</s>), Mistral's [INST] variants and Zephyr (<|role|>\n...<|endoftext|>\n), in the form
// llama.cpp's built-in templates give them.
#include <gtest/gtest.h>

#include "frugal/tokenize/tokenizer.h"

namespace frugal {
namespace {

const std::vector<ChatMessage> kChat = {
    {"system", "You are terse."},
    {"user", "Hi there "},
    {"assistant", " Hello."},
    {"user", "Bye"},
};

std::string render(ChatTemplateKind k, bool gen = true, const std::vector<ChatMessage>& chat = kChat) {
  return apply_chat_template(k, chat, gen, "<s>", "</s>");
}

TEST(ChatTemplate, Chatml) {
  EXPECT_EQ(render(ChatTemplateKind::kChatml),
            "<|im_start|>system\nYou are terse.<|im_end|>\n"
            "<|im_start|>user\nHi there <|im_end|>\n"
            "<|im_start|>assistant\n Hello.<|im_end|>\n"
            "<|im_start|>user\nBye<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(render(ChatTemplateKind::kChatml, false, {{"user", "x"}}), "<|im_start|>user\nx<|im_end|>\n");
}

TEST(ChatTemplate, Llama3TrimsContents) {
  EXPECT_EQ(render(ChatTemplateKind::kLlama3),
            "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, Llama2WithSystemBlock) {
  // No BOS at the start (the tokenizer adds it) and no assistant header.
  EXPECT_EQ(render(ChatTemplateKind::kLlama2),
            "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi there  [/INST] Hello.</s>[INST] Bye [/INST]");
  EXPECT_EQ(render(ChatTemplateKind::kLlama2SysBos),
            "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi there  [/INST] Hello.</s><s>[INST] Bye [/INST]");
  EXPECT_EQ(render(ChatTemplateKind::kLlama2SysStrip),
            "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi there [/INST]Hello.</s>[INST] Bye [/INST]");
}

TEST(ChatTemplate, MistralFamily) {
  // Plain [INST] templates have no system block: the system text opens the first turn.
  EXPECT_EQ(render(ChatTemplateKind::kMistral), "[INST] You are terse.\nHi there  [/INST] Hello.</s>[INST] Bye [/INST]");
  EXPECT_EQ(render(ChatTemplateKind::kMistralV1),
            " [INST] You are terse.\n\nHi there  [/INST]  Hello.</s> [INST] Bye [/INST]");
  EXPECT_EQ(render(ChatTemplateKind::kMistralV3), "[INST] You are terse.\n\nHi there [/INST] Hello.</s>[INST] Bye[/INST]");
  EXPECT_EQ(render(ChatTemplateKind::kMistralV3Tekken),
            "[INST]You are terse.\n\nHi there [/INST] Hello.</s>[INST]Bye[/INST]");
  EXPECT_EQ(render(ChatTemplateKind::kMistralV7),
            "[SYSTEM_PROMPT] You are terse.[/SYSTEM_PROMPT][INST] Hi there [/INST]  Hello.</s>[INST] Bye[/INST]");
}

TEST(ChatTemplate, Zephyr) {
  EXPECT_EQ(render(ChatTemplateKind::kZephyr),
            "<|system|>\nYou are terse.<|endoftext|>\n<|user|>\nHi there <|endoftext|>\n"
            "<|assistant|>\n Hello.<|endoftext|>\n<|user|>\nBye<|endoftext|>\n<|assistant|>\n");
}

TEST(ChatTemplate, EosTextIsTheModels) {
  EXPECT_EQ(apply_chat_template(ChatTemplateKind::kMistral, {{"user", "a"}, {"assistant", "b"}}, true, "<BOS>", "<EOS>"),
            "[INST] a [/INST]b<EOS>");
}

TEST(ChatTemplate, DetectFromJinja) {
  struct Case {
    const char* text;
    ChatTemplateKind kind;
  };
  const Case cases[] = {
      // Qwen2-style ChatML
      {"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
       "'\\n'}}{% endfor %}",
       ChatTemplateKind::kChatml},
      // Llama 3
      {"{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | "
       "trim + '<|eot_id|>' %}",
       ChatTemplateKind::kLlama3},
      // Llama 2 chat (strips contents)
      {"{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
       "'\\n<</SYS>>\\n\\n' + message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + "
       "content.strip() + ' [/INST]' }}",
       ChatTemplateKind::kLlama2SysStrip},
      {"{{ bos_token + '[INST] ' + '<<SYS>>\\n' + content + ' [/INST]' }}", ChatTemplateKind::kLlama2SysBos},
      {"[INST] <<SYS>>\\n{{ system }}\\n<</SYS>>\\n\\n{{ user }} [/INST]", ChatTemplateKind::kLlama2},
      // Mistral-7B-Instruct v0.1/v0.2
      {"{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + "
       "' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% endif %}{% endfor %}",
       ChatTemplateKind::kMistral},
      {"{%- if tools is not none %}[AVAILABLE_TOOLS]{%- endif %}{{- '[INST] ' + message['content'] + '[/INST]' }}",
       ChatTemplateKind::kMistralV3},
      {"[AVAILABLE_TOOLS]{{- \"[INST]\" + message[\"content\"] + \"[/INST]\" }}", ChatTemplateKind::kMistralV3Tekken},
      {"{{ ' [INST] ' + system_message }}", ChatTemplateKind::kMistralV1},
      {"[SYSTEM_PROMPT]{{ system }}[/SYSTEM_PROMPT][INST]", ChatTemplateKind::kMistralV7},
      // StableLM-Zephyr
      {"{% for message in messages %}{% if message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + "
       "'<|endoftext|>'}}{% endif %}{% endfor %}",
       ChatTemplateKind::kZephyr},
      // Names work too.
      {"chatml", ChatTemplateKind::kChatml},
      {"llama2", ChatTemplateKind::kMistral},
      {"llama2-sys", ChatTemplateKind::kLlama2},
      {"llama3", ChatTemplateKind::kLlama3},
      {"zephyr", ChatTemplateKind::kZephyr},
      {"mistral-v7", ChatTemplateKind::kMistralV7},
  };
  for (const Case& c : cases) {
    auto k = detect_chat_template(c.text);
    ASSERT_TRUE(k.ok()) << c.text << ": " << k.status().to_string();
    EXPECT_EQ(*k, c.kind) << c.text << " -> " << chat_template_name(*k);
  }
}

TEST(ChatTemplate, UnknownOrUnsupportedFamilies) {
  for (const char* t : {"", "{{ messages }}", "<start_of_turn>user\n", "<|user|>\n<|assistant|>\n<|end|>",
                        "<|im_start|>user<|im_sep|>"}) {
    auto k = detect_chat_template(t);
    ASSERT_FALSE(k.ok()) << t;
    EXPECT_EQ(k.status().code(), ErrorCode::kNotSupported);
  }
}

TEST(ChatTemplate, NamesRoundTrip) {
  for (int i = 0; i <= static_cast<int>(ChatTemplateKind::kMistralV7); ++i) {
    const auto kind = static_cast<ChatTemplateKind>(i);
    auto back = detect_chat_template(chat_template_name(kind));
    ASSERT_TRUE(back.ok()) << chat_template_name(kind);
    EXPECT_EQ(*back, kind);
  }
}

}  // namespace
}  // namespace frugal
