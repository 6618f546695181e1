// --device for the subcommands: the CPU backend, or the CUDA backend when this build has it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "frugal/backend/backend.h"
#include "frugal/core/status.h"

namespace frugal::cli {

// "cpu" or "cuda"; kNotSupported names the reason when CUDA is not built in or no GPU is present.
Result<std::unique_ptr<Backend>> make_backend(const std::string& device, int threads);

struct GpuStatus {
  bool present = false;
  std::string name;
  uint64_t total_bytes = 0;
  uint64_t used_bytes = 0;  // device-wide: total minus free
};
GpuStatus gpu_status();

// Measured ceilings of GPU 0: device-to-device copy (bytes read + written per second over 2 GiB
// buffers) and cuBLAS BF16 GEMM at 8192^3 (FLOP/s); medians of 10 runs.
struct GpuRoofline {
  double copy_bytes_per_s = 0;
  double bf16_flops = 0;
};
Result<GpuRoofline> measure_gpu_roofline();

}  // namespace frugal::cli
