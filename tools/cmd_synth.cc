// frugal synth: write a random-weight GGUF of a named shape (presets from synth/random_model.h),
// for speed benchmarks and tests where the weights' values do not matter.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "command.h"
#include "frugal/synth/random_model.h"

namespace frugal::cli {
namespace {

// -1 (or empty) means "keep the preset's value".
struct SynthArgs {
  std::string preset;
  std::string type;
  std::string out;
  uint64_t seed = 1;
  const CLI::Option* seed_opt = nullptr;
  bool list = false;
  std::string shared_models;
  std::string name;
  int64_t layers = -1;
  int64_t embd = -1;
  int64_t heads = -1;
  int64_t kv_heads = -1;
  int64_t head_dim = -1;
  int64_t ffn = -1;
  int64_t vocab = -1;
  int64_t ctx = -1;
  int64_t window = -1;
  double weight_std = -1;
  int threads = 0;
};

// The Qwen preset copies its vocabulary from the shared models folder. Look for it in the order a
// person would expect: the flag, the environment, beside the working directory, beside the
// checkout the binary was built in (build/bin/frugal -> ../shared/models).
std::string find_shared_models_dir(const std::string& given) {
  namespace fs = std::filesystem;
  if (!given.empty()) return given;
  if (const char* env = std::getenv("FRUGAL_SHARED_MODELS_DIR"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  if (fs::is_directory("../shared/models", ec)) return "../shared/models";
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path cand = exe.parent_path() / "../../../shared/models";
    if (fs::is_directory(cand, ec)) return fs::weakly_canonical(cand, ec).string();
  }
  return "../shared/models";
}

int list_presets() {
  std::printf("%-16s %-7s %6s %6s %5s %4s %6s %7s  %s\n", "preset", "arch", "embd", "layers", "heads", "kv", "ffn",
              "vocab", "default type");
  for (const auto& name : synth::random_model_preset_names()) {
    auto o = synth::random_model_preset(name, find_shared_models_dir(""));
    if (!o.ok()) continue;
    const std::string vocab = o->n_vocab > 0 ? std::to_string(o->n_vocab) : "copied";
    std::printf("%-16s %-7s %6lld %6lld %5lld %4lld %6lld %7s  %s\n", name.c_str(), o->arch.c_str(),
                static_cast<long long>(o->n_embd), static_cast<long long>(o->n_layer),
                static_cast<long long>(o->n_head), static_cast<long long>(o->n_head_kv),
                static_cast<long long>(o->n_ff), vocab.c_str(), o->weight_type.c_str());
  }
  std::printf("\ntypes: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL, or the mix Q4_K_M\n");
  return 0;
}

void apply_overrides(const SynthArgs& a, synth::RandomModelOptions& o) {
  auto set = [](int64_t v, int64_t& field) {
    if (v >= 0) field = v;
  };
  set(a.layers, o.n_layer);
  set(a.embd, o.n_embd);
  set(a.heads, o.n_head);
  set(a.kv_heads, o.n_head_kv);
  set(a.head_dim, o.head_dim);
  set(a.ffn, o.n_ff);
  set(a.vocab, o.n_vocab);
  set(a.ctx, o.n_ctx);
  set(a.window, o.sliding_window);
  if (a.weight_std >= 0) o.weight_std = a.weight_std;
  if (!a.type.empty()) o.weight_type = a.type;
  if (!a.name.empty()) o.name = a.name;
  if (a.seed_opt != nullptr && a.seed_opt->count() > 0) o.seed = a.seed;
  o.n_threads = a.threads;
}

int synth_model(const SynthArgs& a) {
  const std::string cmd = "synth";
  if (a.list) return list_presets();
  if (a.preset.empty()) return fail(cmd, "pass --preset NAME (see --list)");
  if (a.out.empty()) return fail(cmd, "pass -o PATH for the GGUF file to write");
  auto preset = synth::random_model_preset(a.preset, find_shared_models_dir(a.shared_models));
  if (!preset.ok()) return fail(cmd, preset.status().message() + " (see --list)");
  synth::RandomModelOptions o = *preset;
  apply_overrides(a, o);
  if (o.vocab.kind == synth::VocabKind::kCopy && !std::filesystem::exists(o.vocab.copy_from)) {
    return fail(cmd, "preset '" + a.preset + "' copies its vocabulary from " + o.vocab.copy_from +
                         ", which does not exist: pass --shared-models DIR or set FRUGAL_SHARED_MODELS_DIR");
  }
  std::fprintf(stderr, "frugal synth: %s (%s, %lld layers, embd %lld), %s, seed %llu -> %s\n", a.preset.c_str(),
               o.arch.c_str(), static_cast<long long>(o.n_layer), static_cast<long long>(o.n_embd),
               o.weight_type.c_str(), static_cast<unsigned long long>(o.seed), a.out.c_str());
  const auto t0 = std::chrono::steady_clock::now();
  Status st = synth::write_random_model(o, a.out);
  if (!st.ok()) return fail(cmd, st.message());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(a.out, ec);
  std::fprintf(stderr, "frugal synth: wrote %s (%.1f MiB) in %.1f s\n", a.out.c_str(),
               ec ? 0.0 : static_cast<double>(bytes) / 1048576.0, s);
  return 0;
}

RunFn setup(CLI::App& app) {
  auto a = std::make_shared<SynthArgs>();
  app.add_option("--preset", a->preset, "model shape (see --list)");
  app.add_option("--type", a->type, "weight type: F16, Q8_0, Q4_0, Q4_K_M, ... (default: the preset's)");
  app.add_option("-o,--output", a->out, "GGUF file to write");
  a->seed_opt = app.add_option("--seed", a->seed, "random seed (the file's bytes depend only on the options)");
  app.add_flag("--list", a->list, "list the presets and exit");
  app.add_option("--shared-models", a->shared_models,
                 "folder holding vocab-qwen2.gguf (default: $FRUGAL_SHARED_MODELS_DIR, else ../shared/models)");
  app.add_option("--name", a->name, "general.name");
  app.add_option("--layers", a->layers, "override the number of blocks");
  app.add_option("--embd", a->embd, "override the hidden size");
  app.add_option("--heads", a->heads, "override the attention heads");
  app.add_option("--kv-heads", a->kv_heads, "override the KV heads");
  app.add_option("--head-dim", a->head_dim, "override the head size (0: embd / heads)");
  app.add_option("--ffn", a->ffn, "override the feed-forward size");
  app.add_option("--vocab", a->vocab, "override the vocabulary size (synthetic vocabularies only)");
  app.add_option("--ctx", a->ctx, "override the training context length");
  app.add_option("--sliding-window", a->window,
                 "attention window in tokens (llama and mistral shapes; 0: none); with --kv-heads equal to --heads "
                 "the shape is MHA, fewer KV heads GQA");
  app.add_option("--std", a->weight_std, "standard deviation of the matrices");
  app.add_option("-t,--threads", a->threads, "threads for quantizing (0: all cores)")->capture_default_str();
  return [a]() { return synth_model(*a); };
}

}  // namespace

FRUGAL_COMMAND("synth", "Write a random-weight GGUF model of a preset shape", setup);

}  // namespace frugal::cli
