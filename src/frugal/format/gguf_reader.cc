// GGUF v2/v3 reader. The whole file is mapped read-only and every read is bounds-checked against
// the file size before it happens, so a hostile length or count fails with a message instead of
// an allocation or a read past the map.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <utility>

#include "frugal/format/gguf.h"
#include "frugal/format/gguf_internal.h"

namespace frugal {

using gguf_internal::quote;

namespace {

// Smallest possible encodings, used to reject counts that could not fit in the rest of the file.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;             // key length, value type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // name length, n_dims, 1 dim, type, offset
// Reservations are capped so a count that passes the size check but lies about element sizes
// cannot make us allocate far more than the file holds before the reads fail.
constexpr uint64_t kMaxReserve = uint64_t{1} << 16;

// ggml types that exist in ggml but that frugal has no kernels for (ids from ggml.h).
const char* ggml_only_type_name(uint32_t id) {
  switch (id) {
    case 16: return "iq2_xxs";
    case 17: return "iq2_xs";
    case 18: return "iq3_xxs";
    case 19: return "iq1_s";
    case 21: return "iq3_s";
    case 22: return "iq2_s";
    case 23: return "iq4_xs";
    case 29: return "iq1_m";
    case 34: return "tq1_0";
    case 35: return "tq2_0";
    case 39: return "mxfp4";
    case 40: return "nvfp4";
    case 41: return "q1_0";
    case 42: return "q2_0";
    default: return nullptr;
  }
}

}  // namespace

// Parses the mapped bytes into a GgufFile. A friend of GgufFile so it can fill the private state.
class GgufReaderImpl {
 public:
  GgufReaderImpl(GgufFile& f, const uint8_t* base, uint64_t size)
      : f_(f), path_(f.path_), base_(base), size_(size) {}

  Status parse() {
    FRUGAL_RETURN_IF_ERROR(parse_header());
    for (uint64_t i = 0; i < kv_count_; ++i) FRUGAL_RETURN_IF_ERROR(parse_kv(i));
    FRUGAL_RETURN_IF_ERROR(parse_alignment());
    for (uint64_t i = 0; i < tensor_count_; ++i) FRUGAL_RETURN_IF_ERROR(parse_tensor_info(i));
    f_.data_offset_ = gguf_internal::align_up(pos_, f_.alignment_);
    return check_tensor_data();
  }

 private:
  uint64_t remaining() const { return size_ - pos_; }

  template <typename T>
  bool read(T* out) {
    if (remaining() < sizeof(T)) return false;
    std::memcpy(out, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }

  bool read_string(std::string* out) {
    uint64_t len = 0;
    if (!read(&len) || len > remaining()) return false;
    out->assign(reinterpret_cast<const char*>(base_ + pos_), len);
    pos_ += len;
    return true;
  }

  Status truncated(std::string_view what) const {
    return error(ErrorCode::kCorrupt, "{}: truncated {} at offset {} (file is {} bytes)", path_, what,
                 pos_, size_);
  }

  Status corrupt_key(std::string_view key, std::string_view msg) const {
    return error(ErrorCode::kCorrupt, "{}: key {}: {}", path_, quote(key), msg);
  }

  Status parse_header() {
    uint32_t magic = 0;
    if (!read(&magic)) return truncated("header (magic)");
    if (magic != gguf_internal::kMagic) {
      return error(ErrorCode::kCorrupt, "{}: not a GGUF file (magic is {:02x} {:02x} {:02x} {:02x}, expected 47 47 55 46)",
                   path_, magic & 0xff, (magic >> 8) & 0xff, (magic >> 16) & 0xff, magic >> 24);
    }
    uint32_t version = 0;
    if (!read(&version)) return truncated("header (version)");
    if ((version & 0xffff) == 0 && version != 0) {
      return error(ErrorCode::kNotSupported,
                   "{}: GGUF version field is {:#x}: the file has the other byte order", path_, version);
    }
    if (version == 1) {
      return error(ErrorCode::kNotSupported, "{}: GGUF version 1 is not supported (only 2 and 3); "
                   "re-convert the model", path_);
    }
    if (version != 2 && version != 3) {
      return error(ErrorCode::kNotSupported, "{}: unsupported GGUF version {} (only 2 and 3)", path_, version);
    }
    f_.version_ = version;
    // v2 and v3 share this layout (u64 counts and lengths); only v1 used 32-bit ones.
    if (!read(&tensor_count_)) return truncated("header (tensor_count)");
    if (!read(&kv_count_)) return truncated("header (kv_count)");
    const uint64_t rest = remaining();
    if (tensor_count_ > rest / kMinTensorInfoBytes) {
      return error(ErrorCode::kCorrupt, "{}: tensor_count {} cannot fit in the remaining {} bytes of the file",
                   path_, tensor_count_, rest);
    }
    if (kv_count_ > rest / kMinKvBytes ||
        kv_count_ * kMinKvBytes + tensor_count_ * kMinTensorInfoBytes > rest) {
      return error(ErrorCode::kCorrupt, "{}: kv_count {} (with tensor_count {}) cannot fit in the remaining {} bytes of the file",
                   path_, kv_count_, tensor_count_, rest);
    }
    f_.kv_.reserve(kv_count_);
    f_.tensors_.reserve(tensor_count_);
    return ok_status();
  }

  Status parse_kv(uint64_t index) {
    std::string key;
    if (!read_string(&key)) return truncated(fmt::format("key #{} name", index));
    if (key.empty()) return error(ErrorCode::kCorrupt, "{}: key #{} has an empty name", path_, index);
    if (key.size() > gguf_internal::kMaxKeyBytes) {
      return corrupt_key(key, fmt::format("name is {} bytes (limit {})", key.size(), gguf_internal::kMaxKeyBytes));
    }
    if (f_.kv_index_.count(key)) return corrupt_key(key, "duplicate key");
    uint32_t type = 0;
    if (!read(&type)) return truncated(fmt::format("key {} value type", quote(key)));
    if (!gguf_internal::is_known_type(type)) return corrupt_key(key, fmt::format("unknown value type {}", type));
    GgufValue v;
    FRUGAL_RETURN_IF_ERROR(parse_value(key, static_cast<GgufType>(type), &v));
    f_.kv_index_.emplace(key, f_.kv_.size());
    f_.kv_.emplace_back(std::move(key), std::move(v));
    return ok_status();
  }

  // Reads one scalar of integer/bool/float type `t` into i or f.
  Status parse_scalar(std::string_view key, GgufType t, int64_t* i, double* f) {
    const uint64_t n = gguf_internal::scalar_size(t);
    if (remaining() < n) return truncated(fmt::format("key {} value", quote(key)));
    const uint8_t* p = base_ + pos_;
    pos_ += n;
    switch (t) {
      case GgufType::kU8: *i = *p; break;
      case GgufType::kI8: *i = static_cast<int8_t>(*p); break;
      case GgufType::kBool:
        if (*p > 1) return corrupt_key(key, fmt::format("bool value is {} (must be 0 or 1)", *p));
        *i = *p;
        break;
      case GgufType::kU16: { uint16_t x; std::memcpy(&x, p, 2); *i = x; break; }
      case GgufType::kI16: { int16_t x; std::memcpy(&x, p, 2); *i = x; break; }
      case GgufType::kU32: { uint32_t x; std::memcpy(&x, p, 4); *i = x; break; }
      case GgufType::kI32: { int32_t x; std::memcpy(&x, p, 4); *i = x; break; }
      case GgufType::kI64: { int64_t x; std::memcpy(&x, p, 8); *i = x; break; }
      case GgufType::kU64: {
        uint64_t x;
        std::memcpy(&x, p, 8);
        if (x > static_cast<uint64_t>(INT64_MAX)) {
          return corrupt_key(key, fmt::format("u64 value {} is above INT64_MAX", x));
        }
        *i = static_cast<int64_t>(x);
        break;
      }
      case GgufType::kF32: { float x; std::memcpy(&x, p, 4); *f = x; break; }
      case GgufType::kF64: { double x; std::memcpy(&x, p, 8); *f = x; break; }
      default: return corrupt_key(key, "internal: not a scalar type");
    }
    return ok_status();
  }

  Status parse_value(std::string_view key, GgufType t, GgufValue* v) {
    v->type = t;
    if (t == GgufType::kString) {
      if (!read_string(&v->s)) return truncated(fmt::format("key {} string value", quote(key)));
      return ok_status();
    }
    if (t != GgufType::kArray) return parse_scalar(key, t, &v->i, &v->f);

    uint32_t elem = 0;
    uint64_t count = 0;
    if (!read(&elem)) return truncated(fmt::format("key {} array element type", quote(key)));
    if (elem == static_cast<uint32_t>(GgufType::kArray)) return corrupt_key(key, "nested arrays are not supported");
    if (!gguf_internal::is_known_type(elem)) return corrupt_key(key, fmt::format("unknown array element type {}", elem));
    v->elem_type = static_cast<GgufType>(elem);
    if (!read(&count)) return truncated(fmt::format("key {} array length", quote(key)));
    const uint64_t min_elem = v->elem_type == GgufType::kString ? 8 : gguf_internal::scalar_size(v->elem_type);
    if (count > remaining() / min_elem) {
      return corrupt_key(key, fmt::format("array of {} {} elements cannot fit in the remaining {} bytes",
                                          count, gguf_type_name(v->elem_type), remaining()));
    }
    const size_t reserve = static_cast<size_t>(std::min(count, kMaxReserve));
    if (v->elem_type == GgufType::kString) {
      v->strings.reserve(reserve);
      for (uint64_t j = 0; j < count; ++j) {
        v->strings.emplace_back();
        if (!read_string(&v->strings.back())) {
          return truncated(fmt::format("key {} array element {}", quote(key), j));
        }
      }
      return ok_status();
    }
    const bool is_f = gguf_internal::is_float(v->elem_type);
    if (is_f) v->floats.reserve(reserve);
    else v->ints.reserve(reserve);
    for (uint64_t j = 0; j < count; ++j) {
      int64_t i = 0;
      double f = 0;
      Status st = parse_scalar(key, v->elem_type, &i, &f);
      if (!st.ok()) return Status(st.code(), fmt::format("{} (array element {})", st.message(), j));
      if (is_f) v->floats.push_back(f);
      else v->ints.push_back(i);
    }
    return ok_status();
  }

  Status parse_alignment() {
    const GgufValue* a = f_.find("general.alignment");
    if (!a) return ok_status();
    if (a->type != GgufType::kU32) {
      return corrupt_key("general.alignment", fmt::format("has type {}, expected u32", gguf_internal::type_description(*a)));
    }
    if (a->i == 0 || (a->i & (a->i - 1)) != 0) {
      return corrupt_key("general.alignment", fmt::format("value {} is not a power of two", a->i));
    }
    f_.alignment_ = static_cast<uint64_t>(a->i);
    return ok_status();
  }

  Status corrupt_tensor(std::string_view name, std::string_view msg) const {
    return error(ErrorCode::kCorrupt, "{}: tensor {}: {}", path_, quote(name), msg);
  }

  Status parse_tensor_info(uint64_t index) {
    GgufTensorInfo t;
    if (!read_string(&t.name)) return truncated(fmt::format("tensor #{} name", index));
    if (t.name.empty()) return error(ErrorCode::kCorrupt, "{}: tensor #{} has an empty name", path_, index);
    if (f_.tensor_index_.count(t.name)) return corrupt_tensor(t.name, "duplicate tensor name");
    uint32_t n_dims = 0;
    if (!read(&n_dims)) return truncated(fmt::format("tensor {} n_dims", quote(t.name)));
    if (n_dims == 0 || n_dims > gguf_internal::kMaxDims) {
      return corrupt_tensor(t.name, fmt::format("n_dims is {} (must be 1..{})", n_dims, gguf_internal::kMaxDims));
    }
    uint64_t raw_dims[gguf_internal::kMaxDims] = {};
    for (uint32_t d = 0; d < n_dims; ++d) {
      if (!read(&raw_dims[d])) return truncated(fmt::format("tensor {} dims", quote(t.name)));
    }
    uint32_t type_id = 0;
    if (!read(&type_id)) return truncated(fmt::format("tensor {} type", quote(t.name)));
    if (!read(&t.offset)) return truncated(fmt::format("tensor {} offset", quote(t.name)));

    const auto layout = dtype_layout(type_id);
    if (!layout) {
      if (const char* name = ggml_only_type_name(type_id)) {
        return error(ErrorCode::kNotSupported, "{}: tensor {}: ggml type {} ({}) is not supported by frugal",
                     path_, quote(t.name), type_id, name);
      }
      return corrupt_tensor(t.name, fmt::format("unknown ggml type id {}", type_id));
    }
    t.type = layout->type;
    int64_t n = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim = raw_dims[d];
      if (dim == 0 || dim > static_cast<uint64_t>(gguf_internal::kMaxElements)) {
        return corrupt_tensor(t.name, fmt::format("dimension {} is {} (must be 1..2^40)", d, dim));
      }
      // Both factors are <= 2^40, so the product cannot overflow 128 bits; test before multiplying.
      if (static_cast<uint64_t>(n) > static_cast<uint64_t>(gguf_internal::kMaxElements) / dim) {
        return corrupt_tensor(t.name, "element count is above 2^40");
      }
      n *= static_cast<int64_t>(dim);
      t.dims.push_back(static_cast<int64_t>(dim));
    }
    if (t.dims[0] % layout->block_size != 0) {
      return corrupt_tensor(t.name, fmt::format("dims[0] = {} is not a multiple of the {} block size {}",
                                                t.dims[0], layout->name, layout->block_size));
    }
    t.nbytes = static_cast<uint64_t>(row_bytes(t.type, t.dims[0]) * (n / t.dims[0]));
    f_.tensor_index_.emplace(t.name, f_.tensors_.size());
    f_.tensors_.push_back(std::move(t));
    return ok_status();
  }

  Status check_tensor_data() {
    const uint64_t data_start = f_.data_offset_;
    for (GgufTensorInfo& t : f_.tensors_) {
      if (t.offset % f_.alignment_ != 0) {
        return corrupt_tensor(t.name, fmt::format("offset {} is not a multiple of the alignment {}", t.offset, f_.alignment_));
      }
      if (data_start > size_ || t.offset > size_ - data_start || t.nbytes > size_ - data_start - t.offset) {
        return corrupt_tensor(t.name, fmt::format("data [{}, +{}) ends past the end of the file ({} bytes, data section at {})",
                                                  t.offset, t.nbytes, size_, data_start));
      }
      t.data = base_ + data_start + t.offset;
    }
    std::vector<size_t> order(f_.tensors_.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return f_.tensors_[a].offset < f_.tensors_[b].offset; });
    for (size_t k = 1; k < order.size(); ++k) {
      const GgufTensorInfo& prev = f_.tensors_[order[k - 1]];
      const GgufTensorInfo& cur = f_.tensors_[order[k]];
      if (prev.offset + prev.nbytes > cur.offset) {
        return corrupt_tensor(cur.name, fmt::format("data at offset {} overlaps tensor {} [{}, +{})", cur.offset,
                                                    quote(prev.name), prev.offset, prev.nbytes));
      }
    }
    return ok_status();
  }

  GgufFile& f_;
  const std::string& path_;
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t tensor_count_ = 0;
  uint64_t kv_count_ = 0;
};

namespace {

// Touches one byte per page so later reads never stall on the disk, reporting progress.
void prefault(const uint8_t* base, uint64_t size, const GgufOpenOptions& opts) {
  const long page_sz = sysconf(_SC_PAGESIZE);
  const uint64_t page = page_sz > 0 ? static_cast<uint64_t>(page_sz) : 4096;
  constexpr uint64_t kReportEvery = uint64_t{64} << 20;
  madvise(const_cast<uint8_t*>(base), size, MADV_WILLNEED);
  volatile uint8_t sink = 0;
  uint64_t next_report = kReportEvery;
  for (uint64_t off = 0; off < size; off += page) {
    sink = sink + base[off];
    if (opts.progress && off >= next_report) {
      opts.progress(off, size);
      next_report += kReportEvery;
    }
  }
  if (opts.progress) opts.progress(size, size);
}

}  // namespace

void GgufFile::release_resident_pages(const void* data, uint64_t bytes) const {
  if (map_ == nullptr || data == nullptr || bytes == 0) return;
  const auto base = reinterpret_cast<uintptr_t>(map_);
  const auto lo = reinterpret_cast<uintptr_t>(data);
  // MADV_DONTNEED on anonymous memory would zero it: act only inside this file's mapping.
  if (lo < base || lo - base >= size_ || bytes > size_ - (lo - base)) return;
  const long page_sz = sysconf(_SC_PAGESIZE);
  const uintptr_t page = page_sz > 0 ? static_cast<uintptr_t>(page_sz) : 4096;
  const uintptr_t first = (lo + page - 1) / page * page;  // inward: never a neighbour's partial page
  const uintptr_t last = (lo + bytes) / page * page;
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

Status GgufFile::make_writable(const void* data, uint64_t bytes) {
  if (map_ == nullptr) return error(ErrorCode::kNotSupported, "{}: not a mapped file; its bytes cannot be repacked", path_);
  const auto base = reinterpret_cast<uintptr_t>(map_);
  const auto lo = reinterpret_cast<uintptr_t>(data);
  if (lo < base || lo - base >= size_ || bytes > size_ - (lo - base)) {
    return error(ErrorCode::kInvalidArgument, "{}: range to make writable is outside the mapping", path_);
  }
  const long page_sz = sysconf(_SC_PAGESIZE);
  const uintptr_t page = page_sz > 0 ? static_cast<uintptr_t>(page_sz) : 4096;
  const uintptr_t first = lo / page * page;  // outward: the pages that hold any byte of the range
  const uintptr_t last = (lo + bytes + page - 1) / page * page;
  if (mprotect(reinterpret_cast<void*>(first), last - first, PROT_READ | PROT_WRITE) != 0) {
    return error(ErrorCode::kIo, "{}: cannot make {} bytes writable: {}", path_, bytes, std::strerror(errno));
  }
  return ok_status();
}

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path, const GgufOpenOptions& opts) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f->fd_ < 0) {
    const int err = errno;
    return error(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, "{}: cannot open: {}", path, std::strerror(err));
  }
  struct stat st {};
  if (fstat(f->fd_, &st) != 0) return error(ErrorCode::kIo, "{}: cannot stat: {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return error(ErrorCode::kIo, "{}: not a regular file", path);
  f->size_ = static_cast<uint64_t>(st.st_size);
  if (f->size_ == 0) return error(ErrorCode::kCorrupt, "{}: file is empty", path);
  void* map = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, f->fd_, 0);
  if (map == MAP_FAILED) return error(ErrorCode::kIo, "{}: cannot map: {}", path, std::strerror(errno));
  f->map_ = map;
  // The mapping keeps the file alive; the descriptor is no longer needed.
  ::close(f->fd_);
  f->fd_ = -1;

  const auto* base = static_cast<const uint8_t*>(map);
  GgufReaderImpl reader(*f, base, f->size_);
  FRUGAL_RETURN_IF_ERROR(reader.parse());
  if (opts.prefault) prefault(base, f->size_, opts);
  return f;
}

Result<std::unique_ptr<GgufFile>> GgufFile::from_memory(const void* data, size_t size, std::string name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = std::move(name);
  f->size_ = size;
  if (size == 0) return error(ErrorCode::kCorrupt, "{}: file is empty", f->path_);
  GgufReaderImpl reader(*f, static_cast<const uint8_t*>(data), size);
  FRUGAL_RETURN_IF_ERROR(reader.parse());
  return f;
}

GgufFile::~GgufFile() {
  if (map_) munmap(map_, size_);
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace frugal
