// The memory roofline of the CPU: how fast `n_threads` threads can stream bytes from DRAM. A
// decode step reads every weight once, so (weight bytes per token) / (this rate) bounds its speed.
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "frugal/backend/backend.h"
#include "frugal/backend/cpu/simd_ops.h"
#include "frugal/core/thread_pool.h"

namespace frugal {
namespace {

struct ReadJob {
  const uint64_t* words;
  int64_t per_chunk;
  uint64_t sink[256];  // [thread], so the reads cannot be optimized away
};

void read_task(void* ctx, int64_t b, int64_t e, int thread) {
  auto& j = *static_cast<ReadJob*>(ctx);
  uint64_t x = 0;
  for (int64_t c = b; c < e; ++c) x ^= cpu::read_xor(j.words + c * j.per_chunk, j.per_chunk);
  j.sink[thread & 255] ^= x;
}

}  // namespace

Result<CpuBandwidth> measure_cpu_read_bandwidth(int n_threads, const CpuBandwidthOptions& opts) {
  if (opts.bytes < (1u << 20) || opts.passes < 1) {
    return error(ErrorCode::kInvalidArgument, "bandwidth probe: need at least 1 MiB and 1 pass");
  }
  // mmap'd rather than malloc'd, so the pages go back to the system as soon as the probe ends.
  const size_t bytes = opts.bytes / (1u << 20) * (1u << 20);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return error(ErrorCode::kIo, "bandwidth probe: cannot map {} bytes", bytes);
  ThreadPool pool(n_threads);
  // Written in place by the pool, so each thread's pages are first touched where they are read.
  constexpr int64_t kChunkBytes = 1 << 20;
  const int64_t n_chunks = static_cast<int64_t>(bytes) / kChunkBytes;
  pool.parallel_for(n_chunks, 1, [&](int64_t b, int64_t e, int) {
    std::memset(static_cast<uint8_t*>(p) + b * kChunkBytes, 0x5A, static_cast<size_t>((e - b) * kChunkBytes));
  });
  ReadJob job{};
  job.words = static_cast<const uint64_t*>(p);
  job.per_chunk = kChunkBytes / static_cast<int64_t>(sizeof(uint64_t));
  CpuBandwidth r;
  r.threads = pool.size();
  r.bytes = bytes;
  r.passes = opts.passes;
  for (int pass = 0; pass < opts.passes; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.dispatch(read_task, &job, n_chunks, 4);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) r.read_bytes_per_s = std::max(r.read_bytes_per_s, static_cast<double>(bytes) / s);
  }
  munmap(p, bytes);
  return r;
}

}  // namespace frugal
