#include "device.h"

#ifdef FRUGAL_HAVE_CUDA
#include "frugal/backend/cuda/cuda_backend.h"
#endif

namespace frugal::cli {

Result<std::unique_ptr<Backend>> make_backend(const std::string& device, int threads) {
  if (device == "cpu") {
    CpuBackendOptions o;
    o.n_threads = threads;
    return make_cpu_backend(o);
  }
  if (device == "cuda") {
#ifdef FRUGAL_HAVE_CUDA
    CudaBackendOptions o;
    o.cpu_threads = threads;
    // Every failure here returns a Status that the subcommand prints before exiting 1; the context
    // says which step failed (there is no exit() on this path: see bench/cuda_notes.md, run 1).
    auto be = make_cuda_backend(o);
    if (!be.ok()) return be.status().with_context("--device cuda");
    return be;
#else
    return error(ErrorCode::kNotSupported, "--device cuda: this build has no CUDA backend (nvcc was not found)");
#endif
  }
  return error(ErrorCode::kInvalidArgument, "--device '{}': expected cpu or cuda", device);
}

GpuStatus gpu_status() {
  GpuStatus g;
#ifdef FRUGAL_HAVE_CUDA
  auto info = cuda::device_info(0);
  if (info.ok()) {
    g.present = true;
    g.name = info->name;
    g.total_bytes = info->total_bytes;
    g.used_bytes = info->total_bytes - info->free_bytes;
  }
#endif
  return g;
}

Result<GpuRoofline> measure_gpu_roofline() {
#ifdef FRUGAL_HAVE_CUDA
  auto r = cuda::measure_roofline(2ull << 30, 8192, 10);
  if (!r.ok()) return r.status().with_context("--roofline");
  return GpuRoofline{r->copy_bytes_per_s, r->bf16_flops};
#else
  return error(ErrorCode::kNotSupported, "this build has no CUDA backend");
#endif
}

}  // namespace frugal::cli
