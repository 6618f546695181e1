#include "frugal/quantize/imatrix_file.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "frugal/quantize/atomic_file.h"

namespace frugal::quantize {
namespace {

// Caps on what a reader accepts, so a corrupt count cannot ask for gigabytes.
constexpr int32_t kMaxEntries = 1 << 20;
constexpr int32_t kMaxName = 4096;
constexpr int32_t kMaxValues = 1 << 26;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

class Reader {
 public:
  Reader(std::FILE* f, std::string path) : f_(f), path_(std::move(path)) {}
  bool read(void* p, size_t n) { return std::fread(p, 1, n, f_) == n; }
  bool at_end() {
    const int c = std::fgetc(f_);
    if (c == EOF) return true;
    std::ungetc(c, f_);
    return false;
  }
  Status truncated(const std::string& what) const {
    return error(ErrorCode::kCorrupt, "{}: truncated imatrix file (while reading {})", path_, what);
  }

 private:
  std::FILE* f_;
  std::string path_;
};

}  // namespace

std::vector<float> ImatrixEntry::mean() const {
  std::vector<float> out(values);
  if (ncall > 0) {
    for (float& v : out) v /= static_cast<float>(ncall);
  }
  return out;
}

Result<Imatrix> read_imatrix(const std::string& path) {
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) return error(ErrorCode::kNotFound, "{}: cannot open the imatrix file: {}", path, std::strerror(errno));
  Reader in(f.get(), path);
  int32_t n_entries = 0;
  if (!in.read(&n_entries, 4)) return in.truncated("the entry count");
  if (n_entries < 1 || n_entries > kMaxEntries) {
    return error(ErrorCode::kCorrupt, "{}: entry count {} (expected 1..{}); not an imatrix .dat file?", path,
                 n_entries, kMaxEntries);
  }
  Imatrix m;
  for (int32_t i = 0; i < n_entries; ++i) {
    const std::string which = fmt::format("entry {}", i);
    int32_t len = 0;
    if (!in.read(&len, 4)) return in.truncated(which + " name length");
    if (len < 1 || len > kMaxName) return error(ErrorCode::kCorrupt, "{}: {} has a name of {} bytes", path, which, len);
    std::string name(static_cast<size_t>(len), '\0');
    if (!in.read(name.data(), name.size())) return in.truncated(which + " name");
    ImatrixEntry e;
    int32_t nval = 0;
    if (!in.read(&e.ncall, 4) || !in.read(&nval, 4)) return in.truncated("entry '" + name + "' header");
    if (e.ncall < 0 || nval < 1 || nval > kMaxValues) {
      return error(ErrorCode::kCorrupt, "{}: entry '{}' has ncall {} and {} values", path, name, e.ncall, nval);
    }
    e.values.resize(static_cast<size_t>(nval));
    if (!in.read(e.values.data(), e.values.size() * 4)) return in.truncated("entry '" + name + "' values");
    for (size_t j = 0; j < e.values.size(); ++j) {
      if (!std::isfinite(e.values[j])) {
        return error(ErrorCode::kCorrupt, "{}: entry '{}' value {} is {}", path, name, j, e.values[j]);
      }
    }
    if (m.entries.count(name) != 0) return error(ErrorCode::kCorrupt, "{}: entry '{}' appears twice", path, name);
    m.entries.emplace(std::move(name), std::move(e));
  }
  if (!in.at_end()) {
    int32_t len = 0;
    if (!in.read(&m.chunks, 4) || !in.read(&len, 4)) return in.truncated("the trailer");
    if (len < 0 || len > kMaxName) return error(ErrorCode::kCorrupt, "{}: dataset name of {} bytes", path, len);
    m.dataset.resize(static_cast<size_t>(len));
    if (!in.read(m.dataset.data(), m.dataset.size())) return in.truncated("the dataset name");
    if (!in.at_end()) return error(ErrorCode::kCorrupt, "{}: bytes after the imatrix trailer", path);
  }
  return m;
}

Status write_imatrix(const std::string& path, const Imatrix& m) {
  if (m.entries.empty()) return error(ErrorCode::kInvalidArgument, "{}: an imatrix needs at least one entry", path);
  std::string bytes;
  auto put_i32 = [&](int32_t v) { bytes.append(reinterpret_cast<const char*>(&v), 4); };
  put_i32(static_cast<int32_t>(m.entries.size()));
  for (const auto& [name, e] : m.entries) {
    put_i32(static_cast<int32_t>(name.size()));
    bytes += name;
    put_i32(e.ncall);
    put_i32(static_cast<int32_t>(e.values.size()));
    bytes.append(reinterpret_cast<const char*>(e.values.data()), e.values.size() * 4);
  }
  put_i32(m.chunks);
  put_i32(static_cast<int32_t>(m.dataset.size()));
  bytes += m.dataset;
  FRUGAL_ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::create(path));
  FRUGAL_RETURN_IF_ERROR(out.write(bytes.data(), bytes.size()));
  return out.commit();
}

}  // namespace frugal::quantize
