// A temporary folder holding a small random model (tiny-llama shape cut to 2 layers, F32 weights)
// for the CLI tests, which run the real binary on it; the folder goes with the object.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "frugal/synth/random_model.h"

namespace frugal {

struct TinyModelDir {
  // `tag` names the folder (with the process id); `file` the model inside it.
  explicit TinyModelDir(const std::string& tag, const std::string& file = "tiny.gguf")
      : dir(std::filesystem::temp_directory_path() / (tag + std::to_string(getpid()))),
        model((dir / file).string()) {
    std::filesystem::create_directories(dir);
    auto opts = synth::random_model_preset("tiny-llama", FRUGAL_SHARED_MODELS_DIR);
    EXPECT_TRUE(opts.ok()) << opts.status().to_string();
    if (!opts.ok()) return;
    opts->n_layer = 2;
    opts->weight_type = "F32";
    const Status st = synth::write_random_model(*opts, model);
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  ~TinyModelDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  TinyModelDir(const TinyModelDir&) = delete;
  TinyModelDir& operator=(const TinyModelDir&) = delete;

  std::filesystem::path dir;
  std::string model;
};

}  // namespace frugal
