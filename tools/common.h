// Helpers shared by the subcommands: finding and loading the model, reading prompts, memory.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "frugal/backend/backend.h"
#include "frugal/core/status.h"
#include "frugal/model/model.h"
#include "frugal/tokenize/tokenizer.h"

namespace frugal::cli {

// The default model shipped in models/ (empty when this build has none).
std::string default_model_path();

// Resolves -m: the given path, or the default model; an error says what to pass.
Result<std::string> resolve_model_path(const std::string& given);

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};
// `device` is the backend that will run it: for "cpu" weights are repacked where the CPU kernels
// prefer another layout (ModelLoadOptions::cpu_layouts).
Result<LoadedModel> load_model(const std::string& path, bool progress, const std::string& device = "cpu");

// The prompt from -p, else -f FILE, else stdin when it is not a terminal.
Result<std::string> read_prompt(const std::string& prompt, const std::string& file);

// Peak resident set size of this process in bytes.
uint64_t peak_rss_bytes();

// Threads: 0 -> hardware concurrency.
int resolve_threads(int requested);

}  // namespace frugal::cli
