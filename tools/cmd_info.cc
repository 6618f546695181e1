// frugal info: metadata and tensor table of a GGUF file, and the configuration frugal reads
// from it.
#include <cstdio>
#include <map>

#include "command.h"
#include "common.h"
#include "frugal/format/gguf.h"

namespace frugal::cli {
namespace {

std::string scalar_text(const GgufValue& v) {
  switch (v.type) {
    case GgufType::kString: return "\"" + (v.s.size() > 120 ? v.s.substr(0, 120) + "..." : v.s) + "\"";
    case GgufType::kF32:
    case GgufType::kF64: return fmt::format("{}", v.f);
    case GgufType::kBool: return v.i ? "true" : "false";
    default: return std::to_string(v.i);
  }
}

std::string value_text(const GgufValue& v) {
  if (v.type != GgufType::kArray) return scalar_text(v);
  std::string s = fmt::format("[{} x {}]", v.array_size(), gguf_type_name(v.elem_type));
  const size_t show = std::min<size_t>(v.array_size(), 6);
  std::string items;
  for (size_t i = 0; i < show; ++i) {
    if (i) items += ", ";
    if (!v.strings.empty()) items += "\"" + v.strings[i] + "\"";
    else if (!v.floats.empty()) items += fmt::format("{}", v.floats[i]);
    else if (!v.ints.empty()) items += std::to_string(v.ints[i]);
  }
  return s + " " + items + (v.array_size() > show ? ", ..." : "");
}

int info(const std::string& model_arg, bool no_tensors) {
  const std::string cmd = "info";
  auto path = resolve_model_path(model_arg);
  if (!path.ok()) return fail(cmd, path.status().message());
  auto file = GgufFile::open(*path);
  if (!file.ok()) return fail(cmd, file.status().message());
  const GgufFile& f = **file;
  std::printf("file: %s\nGGUF version %u, %llu bytes, alignment %llu, data at %llu\n", path->c_str(), f.version(),
              static_cast<unsigned long long>(f.file_size()), static_cast<unsigned long long>(f.alignment()),
              static_cast<unsigned long long>(f.data_offset()));
  std::printf("\nmetadata (%zu keys):\n", f.metadata().size());
  for (const auto& [key, v] : f.metadata()) {
    std::printf("  %-48s %-8s %s\n", key.c_str(), gguf_type_name(v.type), value_text(v).c_str());
  }
  std::map<std::string, std::pair<int, uint64_t>> by_type;
  uint64_t total = 0;
  if (!no_tensors) std::printf("\ntensors (%zu):\n", f.tensors().size());
  for (const auto& t : f.tensors()) {
    std::string dims;
    for (size_t i = 0; i < t.dims.size(); ++i) dims += (i ? " x " : "") + std::to_string(t.dims[i]);
    if (!no_tensors) {
      std::printf("  %-40s %-7s %-22s %12llu bytes\n", t.name.c_str(), std::string(dtype_name(t.type)).c_str(),
                  dims.c_str(), static_cast<unsigned long long>(t.nbytes));
    }
    auto& e = by_type[std::string(dtype_name(t.type))];
    e.first++;
    e.second += t.nbytes;
    total += t.nbytes;
  }
  std::printf("\ntensor bytes: %llu (%.1f MiB)", static_cast<unsigned long long>(total), total / 1048576.0);
  for (const auto& [name, e] : by_type) {
    std::printf("; %s: %d tensors, %.1f MiB", name.c_str(), e.first, e.second / 1048576.0);
  }
  std::printf("\n");
  if (!f.tensors().empty()) {
    auto m = Model::load(*path);
    if (!m.ok()) {
      std::printf("\nfrugal cannot run this file: %s\n", m.status().message().c_str());
      return 0;
    }
    const ModelConfig& c = (*m)->config();
    std::printf("\nmodel: arch %s, vocab %lld, embd %lld, layers %lld, heads %lld (kv %lld, dim %lld), ffn %lld, "
                "ctx %lld, rope %s base %g dims %d%s%s%s%s\n",
                c.arch.c_str(), (long long)c.n_vocab, (long long)c.n_embd, (long long)c.n_layer, (long long)c.n_head,
                (long long)c.n_head_kv, (long long)c.head_dim, (long long)c.n_ff, (long long)c.n_ctx_train,
                c.rope.neox ? "neox" : "norm", c.rope.freq_base, c.rope.n_rot,
                c.sliding_window ? fmt::format(", sliding window {}", c.sliding_window).c_str() : "",
                c.qkv_bias ? ", qkv bias" : "", c.qk_norm ? ", q/k norm" : "", c.tied_embeddings ? ", tied embeddings" : "");
  }
  return 0;
}

RunFn setup(CLI::App& app) {
  auto model = std::make_shared<std::string>();
  auto no_tensors = std::make_shared<bool>(false);
  app.add_option("-m,--model", *model, "GGUF file");
  app.add_flag("--no-tensors", *no_tensors, "omit the per-tensor table");
  return [model, no_tensors]() { return info(*model, *no_tensors); };
}

}  // namespace

FRUGAL_COMMAND("info", "Show the metadata and tensor table of a GGUF file", setup);

}  // namespace frugal::cli
