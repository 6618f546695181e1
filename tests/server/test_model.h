// The tiny random model the server tests run: synth's "tiny-llama" plus a ChatML chat template,
// so chat endpoints and `frugal run --chat` render prompts the same way.
#pragma once

#include <string>

#include "frugal/core/status.h"

namespace frugal::testing {

// Writes the model to `path`: synth preset `preset` with every matrix in `weight_type` (the tiny
// model by default), plus the chat template.
Status write_tiny_chat_model(const std::string& path, const std::string& preset = "tiny-llama",
                             const std::string& weight_type = "");
// A copy written once per test process into the temporary directory.
const std::string& tiny_chat_model_path();

}  // namespace frugal::testing
