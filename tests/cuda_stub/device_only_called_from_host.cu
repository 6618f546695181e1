// The bug class scripts/check_cuda_host_stubs.sh guards against, on purpose: units() is
// __device__ only, yet launch() calls it on the host inside a template. nvcc accepts this and
// compiles the host call as exit(1). The check must flag this object (ctest expects it to fail).
#include <cstdint>

template <int N>
struct Dec {
  __device__ static int64_t units(int64_t cols) { return cols / N; }
};

template <int N>
__global__ void kernel(int64_t* out, int64_t cols) {
  *out = Dec<N>::units(cols);
}

template <int N>
int64_t launch(int64_t* out, int64_t cols) {
  const int64_t total = Dec<N>::units(cols);  // host call of a __device__ function
  kernel<N><<<1, 1>>>(out, cols);
  return total;
}

int64_t stub_sample(int64_t* out, int64_t cols) { return launch<8>(out, cols); }
