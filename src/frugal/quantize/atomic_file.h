// An output file that appears whole or not at all: bytes go to a temporary file beside the
// target (same directory, so the final rename is atomic), and only commit() renames it into
// place. Destroying an uncommitted AtomicFile removes the temporary file, so every error path
// (a full disk, a bad tensor found halfway) leaves nothing behind; an interrupt (SIGINT, SIGTERM,
// SIGHUP) removes every live temporary file before the process dies, once
// install_interrupt_cleanup() has been called.
#pragma once

#include <cstddef>
#include <string>

#include "frugal/core/status.h"

namespace frugal::quantize {

class AtomicFile {
 public:
  static Result<AtomicFile> create(const std::string& path);
  AtomicFile(AtomicFile&& o) noexcept;
  AtomicFile& operator=(AtomicFile&&) = delete;
  AtomicFile(const AtomicFile&) = delete;
  ~AtomicFile();

  Status write(const void* data, size_t n);
  Status write_zeros(size_t n);
  // fsync, close and rename over `path`.
  Status commit();
  const std::string& temp_path() const { return tmp_; }
  uint64_t bytes_written() const { return written_; }

 private:
  AtomicFile(std::string path, std::string tmp, int fd, int slot);
  void discard();
  std::string path_;
  std::string tmp_;
  int fd_ = -1;
  int slot_ = -1;  // entry in the interrupt-cleanup table
  uint64_t written_ = 0;
};

// Installs handlers for SIGINT, SIGTERM and SIGHUP that unlink live temporary files and then
// die of the same signal. Idempotent.
void install_interrupt_cleanup();

}  // namespace frugal::quantize
