// Helpers for the GGUF tests: temporary files and a hand-written GGUF byte builder that follows
// the layout in the reference notes directly, independent of GgufWriter.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

namespace frugal::test {

// A per-process scratch directory, removed at exit, so parallel test runs do not collide; in
// memory when possible because the corruption test rewrites a file thousands of times.
class ScratchDir {
 public:
  ScratchDir() {
    std::error_code ec;
    const std::filesystem::path root =
        std::filesystem::is_directory("/dev/shm", ec) ? std::filesystem::path("/dev/shm")
                                                      : std::filesystem::temp_directory_path();
    path_ = (root / ("frugal_format_tests_" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string scratch_dir() {
  static const ScratchDir dir;
  return dir.path();
}

inline std::string scratch_path(const std::string& name) { return scratch_dir() + "/" + name; }

inline void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Little-endian GGUF bytes built field by field.
class Bytes {
 public:
  template <typename T>
  Bytes& put(T v) {
    const size_t at = b_.size();
    b_.resize(at + sizeof(T));
    std::memcpy(b_.data() + at, &v, sizeof(T));
    return *this;
  }
  Bytes& u8(uint8_t v) { return put(v); }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& str(std::string_view s) {
    u64(s.size());
    b_.insert(b_.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& raw(const std::vector<uint8_t>& v) {
    b_.insert(b_.end(), v.begin(), v.end());
    return *this;
  }
  Bytes& pad(size_t alignment) {
    while (b_.size() % alignment) b_.push_back(0);
    return *this;
  }
  Bytes& zeros(size_t n) {
    b_.resize(b_.size() + n, 0);
    return *this;
  }

  // GGUF pieces.
  Bytes& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    for (char c : std::string_view("GGUF")) b_.push_back(static_cast<uint8_t>(c));
    return u32(version).u64(n_tensors).u64(n_kv);
  }
  Bytes& kv_u32(std::string_view key, uint32_t v) { return str(key).u32(4).u32(v); }
  Bytes& kv_str(std::string_view key, std::string_view v) { return str(key).u32(8).str(v); }
  Bytes& tensor(std::string_view name, const std::vector<uint64_t>& dims, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) u64(d);
    return u32(type).u64(offset);
  }

  size_t size() const { return b_.size(); }
  const std::vector<uint8_t>& vec() const { return b_; }
  std::vector<uint8_t>& vec() { return b_; }

 private:
  std::vector<uint8_t> b_;
};

}  // namespace frugal::test
