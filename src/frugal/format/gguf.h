// GGUF v2/v3 reader (mmap'd, zero-copy, strictly validated) and writer.
// Layout facts: ../shared/reference/quantization.md section 1.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "frugal/core/dtype.h"
#include "frugal/core/status.h"

namespace frugal {

// Frozen: GGUF's own value type numbers.
enum class GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
const char* gguf_type_name(GgufType t);

// One metadata value. Scalars keep their exact type; arrays keep their element type and their
// elements (strings in `strings`, integers and bools in `ints`, floats in `floats`).
struct GgufValue {
  GgufType type = GgufType::kU32;
  GgufType elem_type = GgufType::kU8;  // only for arrays
  int64_t i = 0;        // every integer type and bool (u64 values above INT64_MAX are rejected)
  double f = 0;         // f32 / f64
  std::string s;        // string
  std::vector<int64_t> ints;      // integer / bool arrays
  std::vector<double> floats;     // f32 / f64 arrays
  std::vector<std::string> strings;  // string arrays
  size_t array_size() const;
};

struct GgufTensorInfo {
  std::string name;
  DType type = DType::kF32;
  std::vector<int64_t> dims;  // ggml order: dims[0] is the contiguous axis; 1..4 dims
  uint64_t offset = 0;        // relative to the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // into the mapping (reader); valid while the GgufFile lives
  int64_t n_elements() const;
};

struct GgufOpenOptions {
  // Called with (bytes_done, bytes_total) while pages are touched; for a progress bar.
  std::function<void(uint64_t, uint64_t)> progress;
  bool prefault = false;  // touch every page at open (with progress) instead of lazily
};

class GgufFile {
 public:
  // Opens, maps and validates `path`. Every error names the file and the key or tensor at fault.
  static Result<std::unique_ptr<GgufFile>> open(const std::string& path, const GgufOpenOptions& opts = {});
  // Validates `size` bytes the caller keeps alive as long as the GgufFile (tensor data points into
  // them; nothing is copied); `name` stands for the path in errors. The same checks as open(), but
  // a read past the end lands outside an exact-size buffer where AddressSanitizer sees it, not in
  // the zero tail of an mmap'd page (the fuzz target uses this).
  static Result<std::unique_ptr<GgufFile>> from_memory(const void* data, size_t size, std::string name);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_size() const { return size_; }
  // Drops this process's resident pages of the mapping inside [data, data + bytes) (whole pages
  // only; a range outside the mapping, such as a converted copy on the heap, is left alone). The
  // file is mapped read-only, so nothing is lost: a later read faults the page back in from the
  // file. A backend that copied the weights into device memory calls this tensor by tensor so the
  // host never holds more than one tensor of the model at a time.
  void release_resident_pages(const void* data, uint64_t bytes) const;
  // Makes [data, data + bytes) of the mapping writable for this process, so a backend can repack
  // weights in place. The mapping is private: a written page becomes this process's own copy and
  // the file is never changed; the copy replaces the file page in the process's resident memory,
  // so repacking in place keeps one copy of the bytes. kNotSupported for a file read from memory
  // (from_memory), kInvalidArgument for a range outside the mapping. release_resident_pages() must
  // not be called on a range rewritten this way: it would drop the rewritten pages, and the next
  // read would fault the file's bytes back in.
  Status make_writable(const void* data, uint64_t bytes);
  uint64_t data_offset() const { return data_offset_; }

  // Metadata, in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed getters: not found -> kNotFound; wrong type -> kCorrupt naming key, expected and found
  // types. Integer getters accept any integer type whose value fits.
  Result<std::string> get_string(std::string_view key) const;
  Result<int64_t> get_int(std::string_view key) const;
  Result<double> get_float(std::string_view key) const;  // f32/f64 (integers accepted too)
  Result<bool> get_bool(std::string_view key) const;
  Result<std::vector<std::string>> get_string_array(std::string_view key) const;
  Result<std::vector<int64_t>> get_int_array(std::string_view key) const;
  Result<std::vector<double>> get_float_array(std::string_view key) const;
  // With a default when absent (a present key of the wrong type is still an error).
  Result<std::string> get_string_or(std::string_view key, std::string def) const;
  Result<int64_t> get_int_or(std::string_view key, int64_t def) const;
  Result<double> get_float_or(std::string_view key, double def) const;
  Result<bool> get_bool_or(std::string_view key, bool def) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;

 private:
  GgufFile() = default;
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t size_ = 0;
  uint64_t data_offset_ = 0;
  void* map_ = nullptr;
  int fd_ = -1;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
  friend class GgufReaderImpl;
};

// Builds a GGUF v3 file. Values are written in the order they were set; setting a key twice
// replaces the value. Tensor data is copied at add time (or streamed from a callback).
class GgufWriter {
 public:
  GgufWriter() = default;
  void set_alignment(uint32_t alignment);  // also writes general.alignment
  void set_u8(const std::string& key, uint8_t v);
  void set_i8(const std::string& key, int8_t v);
  void set_u16(const std::string& key, uint16_t v);
  void set_i16(const std::string& key, int16_t v);
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_i64(const std::string& key, int64_t v);
  void set_f32(const std::string& key, float v);
  void set_f64(const std::string& key, double v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_string_array(const std::string& key, const std::vector<std::string>& v);
  void set_f32_array(const std::string& key, const std::vector<float>& v);
  void set_i32_array(const std::string& key, const std::vector<int32_t>& v);
  void set_u32_array(const std::string& key, const std::vector<uint32_t>& v);
  void set_value(const std::string& key, const GgufValue& v);  // any type, e.g. copied from a reader
  // Removes `key` if present. Setting it again afterwards appends it at the end, which is how
  // llama.cpp's writer orders a key it overrides (quantizers rely on the same order).
  void remove(const std::string& key);

  // dims in ggml order; bytes must be exactly row_bytes(type, dims[0]) * prod(dims[1..]).
  Status add_tensor(const std::string& name, DType type, const std::vector<int64_t>& dims,
                    const void* data, size_t nbytes);
  // Declares a tensor whose bytes the caller streams itself after header() (a quantizer that
  // never holds the whole output in memory). A writer with such tensors cannot write().
  Status add_tensor_info(const std::string& name, DType type, const std::vector<int64_t>& dims);
  // Writes to a temporary file beside `path` and renames it into place: never a half file.
  Status write(const std::string& path) const;
  // The file's bytes up to the tensor data (header, metadata, tensor table, padding). Tensor k's
  // data then starts at header().size() + offset k, each padded to the alignment.
  Result<std::vector<uint8_t>> header() const;
  uint64_t alignment() const;

 private:
  struct PendingTensor {
    std::string name;
    DType type;
    std::vector<int64_t> dims;
    std::vector<uint8_t> bytes;
    uint64_t nbytes = 0;
    bool deferred = false;  // bytes streamed by the caller (add_tensor_info)
  };
  Status check_tensor(const std::string& name, DType type, const std::vector<int64_t>& dims, uint64_t* nbytes) const;
  uint32_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace frugal
