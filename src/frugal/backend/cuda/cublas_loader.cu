// cuBLAS opened with dlopen when the CUDA backend first needs it (see CublasApi in common.cuh).
#include <dlfcn.h>

#include <mutex>
#include <string>

#include "frugal/backend/cuda/common.cuh"

namespace frugal::cuda {

namespace {

CublasApi g_api;
bool g_loaded = false;
Status g_load_status = ok_status();
std::once_flag g_once;

template <typename F>
bool bind(void* lib, const char* name, F& fn, std::string& missing) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (fn == nullptr) missing += (missing.empty() ? "" : ", ") + std::string(name);
  return fn != nullptr;
}

void load_once() {
  // The major version this code was compiled against: its ABI is the one the table's types describe.
  const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    g_load_status = fail(ErrorCode::kNotSupported, "cuda: cannot load ", soname, " (", why ? why : "unknown error",
                         "); install cuBLAS ", CUBLAS_VER_MAJOR, " or put it on LD_LIBRARY_PATH");
    return;
  }
  std::string missing;
  bind(lib, "cublasCreate_v2", g_api.create, missing);
  bind(lib, "cublasDestroy_v2", g_api.destroy, missing);
  bind(lib, "cublasSetStream_v2", g_api.set_stream, missing);
  bind(lib, "cublasSetWorkspace_v2", g_api.set_workspace, missing);
  bind(lib, "cublasGemmEx", g_api.gemm_ex, missing);
  bind(lib, "cublasGetStatusName", g_api.status_name, missing);
  bind(lib, "cublasGetStatusString", g_api.status_string, missing);
  if (!missing.empty()) {
    g_load_status = fail(ErrorCode::kNotSupported, "cuda: ", soname, " lacks ", missing);
    return;  // the library stays open: unloading cuBLAS is not worth the risk
  }
  g_loaded = true;
}

}  // namespace

Result<const CublasApi*> load_cublas() {
  std::call_once(g_once, load_once);
  if (!g_loaded) return g_load_status;
  return &g_api;
}

const CublasApi& cublas() { return g_api; }

Status cublas_status(cublasStatus_t e, const char* what) {
  if (e == CUBLAS_STATUS_SUCCESS) return ok_status();
  if (!g_loaded) return fail(ErrorCode::kIo, "cublas: ", what, ": status ", static_cast<int>(e));
  return fail(ErrorCode::kIo, "cublas: ", what, ": ", g_api.status_name(e), " (", g_api.status_string(e),
              ", status ", static_cast<int>(e), ")");
}

}  // namespace frugal::cuda
