// One-token matrix-vector product through CpuBackend::matmul (the engine's path) for FluxBin's
// byte GEMV (pure and hybrid) against Q2_K and Q4_K at the same shape: rows x cols of the
// natural-text model's FFN (1536 x 512, 512 x 1536) and a 4096 x 4096 matrix; and FluxBin's GEMV
// kernels alone on one thread (the scalar LUT reference, float SIMD, bytes).
// Threads: --threads=N before Google Benchmark's flags (default 2).
// Counters: bytes_per_second counts the weight bytes read once per product (for FluxBin with
// its column scales and salient parts); MAC/s counts rows x cols.
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "frugal/backend/backend.h"
#include "frugal/core/dtype.h"
#include "frugal/quant/fluxbin.h"
#include "frugal/quant/type_traits.h"

namespace frugal {
namespace {

int g_threads = 2;

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 0.05f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = normal(rng);
  return x;
}

void run(benchmark::State& state, const WeightTensor& w, size_t weight_bytes) {
  auto be = make_cpu_backend({g_threads});
  const std::vector<float> x = random_floats(w.cols, 9);
  std::vector<float> y(static_cast<size_t>(w.rows));
  for (auto _ : state) {
    be->matmul(w, x.data(), 1, y.data(), nullptr);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * weight_bytes));
  state.counters["MAC/s"] = benchmark::Counter(static_cast<double>(w.rows * w.cols) * state.iterations(),
                                               benchmark::Counter::kIsRate);
}

void BM_Quant(benchmark::State& state, DType type) {
  const int64_t rows = state.range(0), cols = state.range(1);
  const std::vector<float> f = random_floats(rows * cols, 1);
  const TypeTraits* tt = type_traits(type);
  std::vector<uint8_t> data(static_cast<size_t>(row_bytes(type, cols) * rows));
  tt->quantize_rows(f.data(), data.data(), rows, cols, nullptr);
  WeightTensor w;
  w.type = type;
  w.rows = rows;
  w.cols = cols;
  w.row_stride = static_cast<size_t>(row_bytes(type, cols));
  w.data = data.data();
  run(state, w, data.size());
}

void BM_FluxBin(benchmark::State& state, int salient) {
  const int64_t rows = state.range(0), cols = state.range(1);
  const std::vector<float> f = random_floats(rows * cols, 1);
  quant::fluxbin::FitOptions opt;
  opt.salient = salient;
  opt.max_iterations = 2;  // the speed does not depend on the fit's quality
  auto m = quant::fluxbin::fit(f.data(), rows, cols, opt);
  if (!m.ok()) {
    state.SkipWithError(m.status().message().c_str());
    return;
  }
  WeightTensor w;
  w.type = DType::kFLUXBIN;
  w.rows = rows;
  w.cols = cols;
  w.row_stride = static_cast<size_t>(row_bytes(DType::kFLUXBIN, cols));
  w.data = m->blocks.data();
  w.fluxbin.col_scales = m->col_scales.data();
  w.fluxbin.salient = salient;
  w.fluxbin.salient_idx = m->salient_idx.data();
  w.fluxbin.salient_vals = m->salient_vals.data();
  run(state, w, m->blocks.size() + 2 * m->col_scales.size() + m->salient_idx.size() + m->salient_vals.size());
}

// The GEMV kernels alone on one thread, all rows: the scalar LUT reference (gemv_lut), the float
// SIMD version (gemv_simd) and the byte version the backend runs (gemv_bytes), so one run
// compares them.
enum class Kernel { kLut, kSimd, kBytes };

void BM_FluxBinKernel(benchmark::State& state, int salient, Kernel kernel) {
  const int64_t rows = state.range(0), cols = state.range(1);
  const std::vector<float> f = random_floats(rows * cols, 1);
  quant::fluxbin::FitOptions opt;
  opt.salient = salient;
  opt.max_iterations = 2;
  auto m = quant::fluxbin::fit(f.data(), rows, cols, opt);
  if (!m.ok()) {
    state.SkipWithError(m.status().message().c_str());
    return;
  }
  const quant::fluxbin::View v = quant::fluxbin::view_of(*m);
  const std::vector<float> x = random_floats(cols, 9);
  std::vector<float> y(static_cast<size_t>(rows));
  std::vector<float> scratch;
  for (auto _ : state) {
    switch (kernel) {
      case Kernel::kLut: quant::fluxbin::gemv_lut(v, x.data(), y.data(), 0, rows, scratch); break;
      case Kernel::kSimd: quant::fluxbin::gemv_simd(v, x.data(), y.data(), 0, rows, scratch); break;
      case Kernel::kBytes: quant::fluxbin::gemv_bytes(v, x.data(), y.data(), 0, rows, scratch); break;
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["MAC/s"] =
      benchmark::Counter(static_cast<double>(rows * cols) * state.iterations(), benchmark::Counter::kIsRate);
}

void shapes(benchmark::internal::Benchmark* b) {
  b->Args({1536, 512})->Args({512, 1536})->Args({4096, 4096})->Unit(benchmark::kMicrosecond);
}

BENCHMARK_CAPTURE(BM_FluxBin, pure, 0)->Apply(shapes);
BENCHMARK_CAPTURE(BM_FluxBin, hybrid, 8)->Apply(shapes);
BENCHMARK_CAPTURE(BM_FluxBinKernel, pure_lut_1thread, 0, Kernel::kLut)->Apply(shapes);
BENCHMARK_CAPTURE(BM_FluxBinKernel, pure_simd_1thread, 0, Kernel::kSimd)->Apply(shapes);
BENCHMARK_CAPTURE(BM_FluxBinKernel, pure_bytes_1thread, 0, Kernel::kBytes)->Apply(shapes);
BENCHMARK_CAPTURE(BM_FluxBinKernel, hybrid_lut_1thread, 8, Kernel::kLut)->Apply(shapes);
BENCHMARK_CAPTURE(BM_FluxBinKernel, hybrid_simd_1thread, 8, Kernel::kSimd)->Apply(shapes);
BENCHMARK_CAPTURE(BM_FluxBinKernel, hybrid_bytes_1thread, 8, Kernel::kBytes)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Quant, Q2_K, DType::kQ2_K)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Quant, Q4_K, DType::kQ4_K)->Apply(shapes);

}  // namespace
}  // namespace frugal

int main(int argc, char** argv) {
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      frugal::g_threads = std::atoi(argv[i] + 10);
    } else {
      rest.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(rest.size());
  benchmark::Initialize(&n, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
