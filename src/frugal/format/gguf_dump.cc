#include "frugal/format/gguf_dump.h"

#include <algorithm>

#include "frugal/format/gguf_internal.h"

namespace frugal {

namespace {

// Quoted with control bytes escaped so a template's newlines keep the dump one line per key.
std::string show_string(const std::string& s, size_t max_bytes) {
  std::string out = "\"";
  const size_t n = std::min(s.size(), max_bytes);
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
        else out += static_cast<char>(c);  // UTF-8 passes through
    }
  }
  out += "\"";
  if (s.size() > max_bytes) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

std::string show_scalar(GgufType t, int64_t i, double f) {
  if (t == GgufType::kBool) return i ? "true" : "false";
  // f32 values print at float precision: 1e-05, not 9.999999747378752e-06.
  if (t == GgufType::kF32) return fmt::format("{}", static_cast<float>(f));
  if (t == GgufType::kF64) return fmt::format("{}", f);
  return fmt::format("{}", i);
}

}  // namespace

std::string format_gguf_value(const GgufValue& v, const GgufDumpOptions& opts) {
  if (v.type == GgufType::kString) return show_string(v.s, opts.max_string_bytes);
  if (v.type != GgufType::kArray) return show_scalar(v.type, v.i, v.f);
  const size_t n = v.array_size();
  std::string out = fmt::format("[{} items]", n);
  const size_t shown = std::min(n, opts.max_array_items);
  for (size_t j = 0; j < shown; ++j) {
    out += j == 0 ? " " : ", ";
    if (v.elem_type == GgufType::kString) out += show_string(v.strings[j], opts.max_string_bytes);
    else if (gguf_internal::is_float(v.elem_type)) out += show_scalar(v.elem_type, 0, v.floats[j]);
    else out += show_scalar(v.elem_type, v.ints[j], 0);
  }
  if (shown < n) out += ", ...";
  return out;
}

std::string gguf_dump(const GgufFile& file, const GgufDumpOptions& opts) {
  std::string out = fmt::format("{}: GGUF v{}, {} bytes, {} metadata keys, {} tensors, alignment {}, data at {}\n",
                                file.path(), file.version(), file.file_size(), file.metadata().size(),
                                file.tensors().size(), file.alignment(), file.data_offset());
  for (const auto& [key, v] : file.metadata()) {
    out += fmt::format("  {}: {} = {}\n", key, gguf_internal::type_description(v), format_gguf_value(v, opts));
  }
  if (!opts.tensors) return out;
  uint64_t total = 0;
  for (const GgufTensorInfo& t : file.tensors()) {
    std::string dims = "[";
    for (size_t d = 0; d < t.dims.size(); ++d) dims += fmt::format("{}{}", d ? ", " : "", t.dims[d]);
    dims += "]";
    out += fmt::format("  {:<40} {:<7} {:<22} {:>12} elems {:>12} bytes @{}\n", t.name, dtype_name(t.type), dims,
                       t.n_elements(), t.nbytes, t.offset);
    total += t.nbytes;
  }
  out += fmt::format("  total tensor bytes: {}\n", total);
  return out;
}

}  // namespace frugal
