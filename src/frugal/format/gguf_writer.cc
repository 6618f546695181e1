// GGUF v3 writer: metadata and tensors are validated, laid out with alignment padding, written to
// a temporary file beside the target and renamed into place.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <unordered_set>

#include "frugal/format/gguf.h"
#include "frugal/format/gguf_internal.h"

namespace frugal {

using gguf_internal::quote;

namespace {

constexpr uint32_t kWriteVersion = 3;

GgufValue scalar_int(GgufType t, int64_t v) {
  GgufValue out;
  out.type = t;
  out.i = v;
  return out;
}

GgufValue scalar_float(GgufType t, double v) {
  GgufValue out;
  out.type = t;
  out.f = v;
  return out;
}

class ByteSink {
 public:
  std::vector<uint8_t>& bytes() { return b_; }
  template <typename T>
  void put(T v) {
    const size_t at = b_.size();
    b_.resize(at + sizeof(T));
    std::memcpy(b_.data() + at, &v, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    b_.insert(b_.end(), s.begin(), s.end());
  }
  void pad_to(uint64_t alignment) { b_.resize(gguf_internal::align_up(b_.size(), alignment), 0); }

 private:
  std::vector<uint8_t> b_;
};

void put_scalar(ByteSink& out, GgufType t, int64_t i, double f) {
  switch (t) {
    case GgufType::kU8: case GgufType::kBool: out.put(static_cast<uint8_t>(i)); break;
    case GgufType::kI8: out.put(static_cast<int8_t>(i)); break;
    case GgufType::kU16: out.put(static_cast<uint16_t>(i)); break;
    case GgufType::kI16: out.put(static_cast<int16_t>(i)); break;
    case GgufType::kU32: out.put(static_cast<uint32_t>(i)); break;
    case GgufType::kI32: out.put(static_cast<int32_t>(i)); break;
    case GgufType::kU64: out.put(static_cast<uint64_t>(i)); break;
    case GgufType::kI64: out.put(i); break;
    case GgufType::kF32: out.put(static_cast<float>(f)); break;
    case GgufType::kF64: out.put(f); break;
    default: break;  // validated before
  }
}

Status check_value(const std::string& key, const GgufValue& v) {
  auto bad = [&](std::string_view msg) {
    return error(ErrorCode::kInvalidArgument, "GGUF key {}: {}", quote(key), msg);
  };
  if (key.empty() || key.size() > gguf_internal::kMaxKeyBytes) return bad("key must be 1..65535 bytes");
  if (!gguf_internal::is_known_type(static_cast<uint32_t>(v.type))) return bad("unknown value type");
  if (v.type == GgufType::kString || gguf_internal::is_float(v.type)) return ok_status();
  if (v.type != GgufType::kArray) {
    if (!gguf_internal::int_fits(v.type, v.i)) {
      return bad(fmt::format("value {} does not fit type {}", v.i, gguf_type_name(v.type)));
    }
    return ok_status();
  }
  if (!gguf_internal::is_known_type(static_cast<uint32_t>(v.elem_type))) return bad("unknown array element type");
  if (v.elem_type == GgufType::kArray) return bad("nested arrays are not supported");
  if (v.elem_type == GgufType::kString || gguf_internal::is_float(v.elem_type)) return ok_status();
  for (size_t j = 0; j < v.ints.size(); ++j) {
    if (!gguf_internal::int_fits(v.elem_type, v.ints[j])) {
      return bad(fmt::format("array element {} = {} does not fit type {}", j, v.ints[j], gguf_type_name(v.elem_type)));
    }
  }
  return ok_status();
}

void put_value(ByteSink& out, const GgufValue& v) {
  out.put(static_cast<uint32_t>(v.type));
  if (v.type == GgufType::kString) {
    out.put_string(v.s);
    return;
  }
  if (v.type != GgufType::kArray) {
    put_scalar(out, v.type, v.i, v.f);
    return;
  }
  out.put(static_cast<uint32_t>(v.elem_type));
  out.put<uint64_t>(v.array_size());
  if (v.elem_type == GgufType::kString) {
    for (const std::string& s : v.strings) out.put_string(s);
  } else if (gguf_internal::is_float(v.elem_type)) {
    for (double f : v.floats) put_scalar(out, v.elem_type, 0, f);
  } else {
    for (int64_t i : v.ints) put_scalar(out, v.elem_type, i, 0);
  }
}

Status write_all(int fd, const uint8_t* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return error(ErrorCode::kIo, "{}: write failed: {}", path, std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return ok_status();
}

}  // namespace

void GgufWriter::set_alignment(uint32_t alignment) {
  alignment_ = alignment;
  set_u32("general.alignment", alignment);
}

void GgufWriter::set_u8(const std::string& key, uint8_t v) { set_value(key, scalar_int(GgufType::kU8, v)); }
void GgufWriter::set_i8(const std::string& key, int8_t v) { set_value(key, scalar_int(GgufType::kI8, v)); }
void GgufWriter::set_u16(const std::string& key, uint16_t v) { set_value(key, scalar_int(GgufType::kU16, v)); }
void GgufWriter::set_i16(const std::string& key, int16_t v) { set_value(key, scalar_int(GgufType::kI16, v)); }
void GgufWriter::set_u32(const std::string& key, uint32_t v) { set_value(key, scalar_int(GgufType::kU32, v)); }
void GgufWriter::set_i32(const std::string& key, int32_t v) { set_value(key, scalar_int(GgufType::kI32, v)); }
// Values above INT64_MAX wrap negative here and are refused by write(), matching the reader.
void GgufWriter::set_u64(const std::string& key, uint64_t v) {
  set_value(key, scalar_int(GgufType::kU64, static_cast<int64_t>(v)));
}
void GgufWriter::set_i64(const std::string& key, int64_t v) { set_value(key, scalar_int(GgufType::kI64, v)); }
void GgufWriter::set_f32(const std::string& key, float v) { set_value(key, scalar_float(GgufType::kF32, v)); }
void GgufWriter::set_f64(const std::string& key, double v) { set_value(key, scalar_float(GgufType::kF64, v)); }
void GgufWriter::set_bool(const std::string& key, bool v) { set_value(key, scalar_int(GgufType::kBool, v ? 1 : 0)); }

void GgufWriter::set_string(const std::string& key, const std::string& v) {
  GgufValue out;
  out.type = GgufType::kString;
  out.s = v;
  set_value(key, out);
}

void GgufWriter::set_string_array(const std::string& key, const std::vector<std::string>& v) {
  GgufValue out;
  out.type = GgufType::kArray;
  out.elem_type = GgufType::kString;
  out.strings = v;
  set_value(key, out);
}

void GgufWriter::set_f32_array(const std::string& key, const std::vector<float>& v) {
  GgufValue out;
  out.type = GgufType::kArray;
  out.elem_type = GgufType::kF32;
  out.floats.assign(v.begin(), v.end());
  set_value(key, out);
}

void GgufWriter::set_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  GgufValue out;
  out.type = GgufType::kArray;
  out.elem_type = GgufType::kI32;
  out.ints.assign(v.begin(), v.end());
  set_value(key, out);
}

void GgufWriter::set_u32_array(const std::string& key, const std::vector<uint32_t>& v) {
  GgufValue out;
  out.type = GgufType::kArray;
  out.elem_type = GgufType::kU32;
  out.ints.assign(v.begin(), v.end());
  set_value(key, out);
}

void GgufWriter::set_value(const std::string& key, const GgufValue& v) {
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = v;
      return;
    }
  }
  kv_.emplace_back(key, v);
}

void GgufWriter::remove(const std::string& key) {
  for (auto it = kv_.begin(); it != kv_.end(); ++it) {
    if (it->first == key) {
      kv_.erase(it);
      return;
    }
  }
}

Status GgufWriter::check_tensor(const std::string& name, DType type, const std::vector<int64_t>& dims,
                                uint64_t* nbytes) const {
  auto bad = [&](std::string_view msg) {
    return error(ErrorCode::kInvalidArgument, "GGUF tensor {}: {}", quote(name), msg);
  };
  if (name.empty()) return bad("empty name");
  for (const auto& t : tensors_) {
    if (t.name == name) return bad("duplicate tensor name");
  }
  if (dims.empty() || dims.size() > gguf_internal::kMaxDims) return bad(fmt::format("{} dims (must be 1..4)", dims.size()));
  int64_t n = 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] <= 0 || dims[d] > gguf_internal::kMaxElements / n) {
      return bad(fmt::format("dimension {} is {} (must be positive, total elements <= 2^40)", d, dims[d]));
    }
    n *= dims[d];
  }
  const DTypeLayout& layout = dtype_layout(type);
  if (dims[0] % layout.block_size != 0) {
    return bad(fmt::format("dims[0] = {} is not a multiple of the {} block size {}", dims[0], layout.name, layout.block_size));
  }
  *nbytes = static_cast<uint64_t>(row_bytes(type, dims[0]) * (n / dims[0]));
  return ok_status();
}

Status GgufWriter::add_tensor(const std::string& name, DType type, const std::vector<int64_t>& dims,
                              const void* data, size_t nbytes) {
  uint64_t expected = 0;
  FRUGAL_RETURN_IF_ERROR(check_tensor(name, type, dims, &expected));
  if (nbytes != expected) {
    return error(ErrorCode::kInvalidArgument, "GGUF tensor {}: {} bytes given, {} expected", quote(name), nbytes, expected);
  }
  if (nbytes > 0 && data == nullptr) return error(ErrorCode::kInvalidArgument, "GGUF tensor {}: null data", quote(name));
  const auto* p = static_cast<const uint8_t*>(data);
  tensors_.push_back(PendingTensor{name, type, dims, std::vector<uint8_t>(p, p + nbytes), nbytes, false});
  return ok_status();
}

Status GgufWriter::add_tensor_info(const std::string& name, DType type, const std::vector<int64_t>& dims) {
  uint64_t nbytes = 0;
  FRUGAL_RETURN_IF_ERROR(check_tensor(name, type, dims, &nbytes));
  tensors_.push_back(PendingTensor{name, type, dims, {}, nbytes, true});
  return ok_status();
}

uint64_t GgufWriter::alignment() const {
  for (const auto& [key, v] : kv_) {
    if (key == "general.alignment" && v.type == GgufType::kU32 && v.i > 0 && (v.i & (v.i - 1)) == 0) {
      return static_cast<uint64_t>(v.i);
    }
  }
  return gguf_internal::kDefaultAlignment;
}

Result<std::vector<uint8_t>> GgufWriter::header() const {
  for (const auto& [key, v] : kv_) {
    FRUGAL_RETURN_IF_ERROR(check_value(key, v));
    if (key == "general.alignment") {
      if (v.type != GgufType::kU32 || v.i == 0 || (v.i & (v.i - 1)) != 0) {
        return error(ErrorCode::kInvalidArgument, "GGUF key 'general.alignment' must be a u32 power of two");
      }
    }
  }
  const uint64_t alignment = this->alignment();
  ByteSink head;
  head.put(gguf_internal::kMagic);
  head.put(kWriteVersion);
  head.put<uint64_t>(tensors_.size());
  head.put<uint64_t>(kv_.size());
  for (const auto& [key, v] : kv_) {
    head.put_string(key);
    put_value(head, v);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    head.put_string(t.name);
    head.put(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) head.put(static_cast<uint64_t>(d));
    head.put(static_cast<uint32_t>(t.type));
    head.put(offset);
    offset = gguf_internal::align_up(offset + t.nbytes, alignment);
  }
  head.pad_to(alignment);
  return std::move(head.bytes());
}

Status GgufWriter::write(const std::string& path) const {
  for (const auto& t : tensors_) {
    if (t.deferred) {
      return error(ErrorCode::kInvalidArgument, "GGUF tensor {}: declared without bytes; stream it after header()",
                   quote(t.name));
    }
  }
  FRUGAL_ASSIGN_OR_RETURN(std::vector<uint8_t> head, header());
  const uint64_t alignment = this->alignment();

  std::string tmp = path + ".tmp-XXXXXX";
  const int fd = mkstemp(tmp.data());
  if (fd < 0) return error(ErrorCode::kIo, "{}: cannot create a temporary file: {}", path, std::strerror(errno));
  auto fail = [&](Status st) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return st;
  };
  fchmod(fd, 0644);
  Status st = write_all(fd, head.data(), head.size(), tmp);
  const std::vector<uint8_t> zeros(alignment, 0);
  for (size_t k = 0; st.ok() && k < tensors_.size(); ++k) {
    const auto& b = tensors_[k].bytes;
    st = write_all(fd, b.data(), b.size(), tmp);
    const uint64_t pad = gguf_internal::align_up(b.size(), alignment) - b.size();
    if (st.ok()) st = write_all(fd, zeros.data(), pad, tmp);
  }
  if (!st.ok()) return fail(st);
  if (::fsync(fd) != 0) return fail(error(ErrorCode::kIo, "{}: fsync failed: {}", tmp, std::strerror(errno)));
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return error(ErrorCode::kIo, "{}: close failed: {}", tmp, std::strerror(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return error(ErrorCode::kIo, "{}: cannot rename {} into place: {}", path, tmp, std::strerror(err));
  }
  return ok_status();
}

}  // namespace frugal
