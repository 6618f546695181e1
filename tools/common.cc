#include "common.h"

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

namespace frugal::cli {

std::string default_model_path() {
  namespace fs = std::filesystem;
  std::error_code ec;
  // Next to the binary (build/bin/frugal -> models/default.gguf in the source tree) or installed.
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const fs::path& cand : {exe.parent_path() / "../../models/default.gguf",
                                 exe.parent_path() / "../share/frugal/default.gguf"}) {
      if (fs::exists(cand, ec)) return fs::weakly_canonical(cand, ec).string();
    }
  }
#ifdef FRUGAL_DEFAULT_MODEL
  if (fs::exists(FRUGAL_DEFAULT_MODEL, ec)) return FRUGAL_DEFAULT_MODEL;
#endif
  return "";
}

Result<std::string> resolve_model_path(const std::string& given) {
  if (!given.empty()) return given;
  std::string def = default_model_path();
  if (def.empty()) {
    return error(ErrorCode::kNotFound, "no model given and this build has no default model: pass -m MODEL.gguf");
  }
  return def;
}

Result<LoadedModel> load_model(const std::string& path, bool progress, const std::string& device) {
  LoadedModel lm;
  ModelLoadOptions mo;
  mo.progress = progress;
  mo.cpu_layouts = device == "cpu";
  FRUGAL_ASSIGN_OR_RETURN(lm.model, Model::load(path, mo));
  auto tok = Tokenizer::from_gguf(lm.model->gguf());
  if (!tok.ok()) return tok.status().with_context(path);
  lm.tokenizer = std::move(tok).value();
  if (lm.tokenizer->n_vocab() != lm.model->config().n_vocab) {
    return error(ErrorCode::kCorrupt, "{}: the tokenizer has {} tokens but token_embd.weight has {} rows", path,
                 lm.tokenizer->n_vocab(), lm.model->config().n_vocab);
  }
  return lm;
}

Result<std::string> read_prompt(const std::string& prompt, const std::string& file) {
  if (!prompt.empty()) return prompt;
  if (!file.empty()) {
    std::ifstream in(file, std::ios::binary);
    if (!in) return error(ErrorCode::kIo, "cannot open prompt file '{}'", file);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  if (!isatty(STDIN_FILENO)) {
    std::stringstream ss;
    ss << std::cin.rdbuf();
    return ss.str();
  }
  return std::string();
}

uint64_t peak_rss_bytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

int resolve_threads(int requested) {
  if (requested > 0) return requested;
  const unsigned hc = std::thread::hardware_concurrency();
  return hc > 0 ? static_cast<int>(hc) : 1;
}

}  // namespace frugal::cli
