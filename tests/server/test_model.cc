#include "test_model.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "frugal/format/gguf.h"
#include "frugal/synth/random_model.h"

namespace frugal::testing {

namespace {
constexpr const char* kChatml =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
}

Status write_tiny_chat_model(const std::string& path, const std::string& preset, const std::string& weight_type) {
  FRUGAL_ASSIGN_OR_RETURN(synth::RandomModelOptions o, synth::random_model_preset(preset, FRUGAL_SHARED_MODELS_DIR));
  if (!weight_type.empty()) o.weight_type = weight_type;
  o.n_threads = preset == "tiny-llama" ? 1 : 0;
  const std::string raw = path + ".raw";
  FRUGAL_RETURN_IF_ERROR(synth::write_random_model(o, raw));
  {
    FRUGAL_ASSIGN_OR_RETURN(auto file, GgufFile::open(raw));
    GgufWriter w;
    for (const auto& [key, value] : file->metadata()) {
      if (key == "general.alignment") {
        w.set_alignment(static_cast<uint32_t>(value.i));
      } else {
        w.set_value(key, value);
      }
    }
    w.set_string("tokenizer.chat_template", kChatml);
    for (const auto& t : file->tensors()) {
      FRUGAL_RETURN_IF_ERROR(w.add_tensor(t.name, t.type, t.dims, t.data, t.nbytes));
    }
    FRUGAL_RETURN_IF_ERROR(w.write(path));
  }
  std::filesystem::remove(raw);
  return ok_status();
}

const std::string& tiny_chat_model_path() {
  static const std::string path = [] {
    const auto p = std::filesystem::temp_directory_path() / ("frugal_server_tiny_" + std::to_string(getpid()) + ".gguf");
    const Status st = write_tiny_chat_model(p.string());
    if (!st.ok()) {
      std::fprintf(stderr, "cannot write the test model: %s\n", st.to_string().c_str());
      std::abort();
    }
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove(std::filesystem::temp_directory_path() /
                                  ("frugal_server_tiny_" + std::to_string(getpid()) + ".gguf"),
                              ec);
    });
    return p.string();
  }();
  return path;
}

}  // namespace frugal::testing
