#include "frugal/quantize/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <vector>

namespace frugal::quantize {
namespace {

// Temporary file names the signal handler may unlink. Fixed-size storage and atomics only: a
// handler may touch nothing that allocates or locks.
constexpr int kSlots = 16;
constexpr size_t kPathMax = 4096;
char g_paths[kSlots][kPathMax];
std::atomic<bool> g_used[kSlots];

int claim_slot(const std::string& tmp) {
  if (tmp.size() >= kPathMax) return -1;
  for (int i = 0; i < kSlots; ++i) {
    bool expected = false;
    if (g_used[i].compare_exchange_strong(expected, true)) {
      // Published before the flag is read by the handler: the path is written first, then the
      // flag was set above; a handler running between the two sees a stale path, which is only
      // ever one of our own temporary names (unlinking a missing file is harmless).
      std::memcpy(g_paths[i], tmp.c_str(), tmp.size() + 1);
      return i;
    }
  }
  return -1;  // no slot: still removed on every path but a signal
}

void release_slot(int slot) {
  if (slot >= 0) g_used[slot].store(false);
}

extern "C" void on_interrupt(int sig) {
  for (int i = 0; i < kSlots; ++i) {
    if (g_used[i].load()) ::unlink(g_paths[i]);
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

Status io_error(const std::string& path, const char* what) {
  return error(ErrorCode::kIo, "{}: {}: {}", path, what, std::strerror(errno));
}

}  // namespace

void install_interrupt_cleanup() {
  static std::atomic<bool> installed{false};
  if (installed.exchange(true)) return;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, on_interrupt);
}

Result<AtomicFile> AtomicFile::create(const std::string& path) {
  std::string tmp = path + ".tmp-XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return io_error(path, "cannot create a temporary file beside it");
  ::fchmod(fd, 0644);
  return AtomicFile(path, tmp, fd, claim_slot(tmp));
}

AtomicFile::AtomicFile(std::string path, std::string tmp, int fd, int slot)
    : path_(std::move(path)), tmp_(std::move(tmp)), fd_(fd), slot_(slot) {}

AtomicFile::AtomicFile(AtomicFile&& o) noexcept
    : path_(std::move(o.path_)), tmp_(std::move(o.tmp_)), fd_(o.fd_), slot_(o.slot_), written_(o.written_) {
  o.fd_ = -1;
  o.slot_ = -1;
  o.tmp_.clear();
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  release_slot(slot_);
  fd_ = -1;
  slot_ = -1;
  tmp_.clear();
}

Status AtomicFile::write(const void* data, size_t n) {
  if (fd_ < 0) return error(ErrorCode::kInvalidArgument, "{}: write after commit", path_);
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return io_error(tmp_, "write failed");
    }
    p += w;
    n -= static_cast<size_t>(w);
    written_ += static_cast<uint64_t>(w);
  }
  return ok_status();
}

Status AtomicFile::write_zeros(size_t n) {
  static const std::vector<uint8_t> zeros(4096, 0);
  while (n > 0) {
    const size_t k = n < zeros.size() ? n : zeros.size();
    FRUGAL_RETURN_IF_ERROR(write(zeros.data(), k));
    n -= k;
  }
  return ok_status();
}

Status AtomicFile::commit() {
  if (fd_ < 0) return error(ErrorCode::kInvalidArgument, "{}: committed twice", path_);
  if (::fsync(fd_) != 0) return io_error(tmp_, "fsync failed");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return io_error(tmp_, "close failed");
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) return io_error(path_, "cannot rename the temporary file into place");
  tmp_.clear();  // nothing left to remove
  release_slot(slot_);
  slot_ = -1;
  return ok_status();
}

}  // namespace frugal::quantize
