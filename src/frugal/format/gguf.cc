// GGUF pieces shared by the reader and the writer: type names, value helpers and the typed
// metadata getters of GgufFile.
#include "frugal/format/gguf.h"

#include "frugal/format/gguf_internal.h"

namespace frugal {

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kU8: return "u8";
    case GgufType::kI8: return "i8";
    case GgufType::kU16: return "u16";
    case GgufType::kI16: return "i16";
    case GgufType::kU32: return "u32";
    case GgufType::kI32: return "i32";
    case GgufType::kF32: return "f32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kU64: return "u64";
    case GgufType::kI64: return "i64";
    case GgufType::kF64: return "f64";
  }
  return "unknown";
}

size_t GgufValue::array_size() const {
  if (type != GgufType::kArray) return 0;
  if (elem_type == GgufType::kString) return strings.size();
  if (gguf_internal::is_float(elem_type)) return floats.size();
  return ints.size();
}

int64_t GgufTensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

namespace gguf_internal {

bool is_integer(GgufType t) {
  switch (t) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kU16: case GgufType::kI16:
    case GgufType::kU32: case GgufType::kI32: case GgufType::kU64: case GgufType::kI64:
      return true;
    default:
      return false;
  }
}

bool is_float(GgufType t) { return t == GgufType::kF32 || t == GgufType::kF64; }

bool is_known_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kF64); }

uint64_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: return 1;
    case GgufType::kU16: case GgufType::kI16: return 2;
    case GgufType::kU32: case GgufType::kI32: case GgufType::kF32: return 4;
    case GgufType::kU64: case GgufType::kI64: case GgufType::kF64: return 8;
    default: return 0;
  }
}

bool int_fits(GgufType t, int64_t v) {
  switch (t) {
    case GgufType::kU8: return v >= 0 && v <= UINT8_MAX;
    case GgufType::kI8: return v >= INT8_MIN && v <= INT8_MAX;
    case GgufType::kU16: return v >= 0 && v <= UINT16_MAX;
    case GgufType::kI16: return v >= INT16_MIN && v <= INT16_MAX;
    case GgufType::kU32: return v >= 0 && v <= UINT32_MAX;
    case GgufType::kI32: return v >= INT32_MIN && v <= INT32_MAX;
    case GgufType::kU64: return v >= 0;
    case GgufType::kI64: return true;
    case GgufType::kBool: return v == 0 || v == 1;
    default: return false;
  }
}

std::string quote(std::string_view s) {
  constexpr size_t kMaxShown = 96;
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\\' || c == '\'') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  if (s.size() > kMaxShown) out += fmt::format("...' ({} bytes)", s.size());
  else out += "'";
  return out;
}

std::string type_description(const GgufValue& v) {
  if (v.type == GgufType::kArray) return fmt::format("array of {}", gguf_type_name(v.elem_type));
  return gguf_type_name(v.type);
}

}  // namespace gguf_internal

using gguf_internal::is_float;
using gguf_internal::is_integer;
using gguf_internal::quote;

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

Status not_found(const std::string& path, std::string_view key) {
  return error(ErrorCode::kNotFound, "{}: key {} not found", path, quote(key));
}

Status wrong_type(const std::string& path, std::string_view key, const char* expected, const GgufValue& v) {
  return error(ErrorCode::kCorrupt, "{}: key {} has type {}, expected {}", path, quote(key),
               gguf_internal::type_description(v), expected);
}

}  // namespace

Result<std::string> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return not_found(path_, key);
  if (v->type != GgufType::kString) return wrong_type(path_, key, "string", *v);
  return v->s;
}

Result<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return not_found(path_, key);
  // Values always fit: the reader rejects u64 values above INT64_MAX.
  if (!is_integer(v->type)) return wrong_type(path_, key, "an integer", *v);
  return v->i;
}

Result<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return not_found(path_, key);
  if (is_float(v->type)) return v->f;
  if (is_integer(v->type)) return static_cast<double>(v->i);
  return wrong_type(path_, key, "a number", *v);
}

Result<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return not_found(path_, key);
  if (v->type != GgufType::kBool) return wrong_type(path_, key, "bool", *v);
  return v->i != 0;
}

Result<std::vector<std::string>> GgufFile::get_string_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return not_found(path_, key);
  if (v->type != GgufType::kArray || v->elem_type != GgufType::kString) {
    return wrong_type(path_, key, "array of string", *v);
  }
  return v->strings;
}

Result<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return not_found(path_, key);
  if (v->type != GgufType::kArray || !is_integer(v->elem_type)) {
    return wrong_type(path_, key, "array of integers", *v);
  }
  return v->ints;
}

Result<std::vector<double>> GgufFile::get_float_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return not_found(path_, key);
  if (v->type == GgufType::kArray && is_float(v->elem_type)) return v->floats;
  if (v->type == GgufType::kArray && is_integer(v->elem_type)) {
    return std::vector<double>(v->ints.begin(), v->ints.end());
  }
  return wrong_type(path_, key, "array of numbers", *v);
}

Result<std::string> GgufFile::get_string_or(std::string_view key, std::string def) const {
  if (!has(key)) return def;
  return get_string(key);
}

Result<int64_t> GgufFile::get_int_or(std::string_view key, int64_t def) const {
  if (!has(key)) return def;
  return get_int(key);
}

Result<double> GgufFile::get_float_or(std::string_view key, double def) const {
  if (!has(key)) return def;
  return get_float(key);
}

Result<bool> GgufFile::get_bool_or(std::string_view key, bool def) const {
  if (!has(key)) return def;
  return get_bool(key);
}

}  // namespace frugal
