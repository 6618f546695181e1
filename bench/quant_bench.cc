// Throughput of the quant kernels on TinyLlama-sized rows (n = 2048 and 5632):
//   VecDot/<type>/<n>/stream  one activation row against a weight matrix larger than the caches
//                             (the decode case: weight bytes per second from memory);
//   VecDot/<type>/<n>/cached  the same over 32 rows that stay in L1/L2 (kernel speed);
//   Gemm/<type>/<n>           512 weight rows x 64 activation rows in gemm tiles (the prefill
//   case), GemmByDot/<type>/<n>      the same product as a loop of vec_dot calls, for comparison;
//   FromFloat/<type>/<n>      activation quantization.
// Counters: bytes_per_second counts weight bytes read (for Gemm: once per activation row, the
// bytes a vec_dot loop would stream); MAC/s counts multiply-accumulates.
//
// Flags (before Google Benchmark's own): --simd=<AVX2|AVX3|SSE4|...> pins the SIMD target
// (default AVX2 when the CPU has it: the target machine has no AVX-512).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "frugal/core/dtype.h"
#include "frugal/quant/simd_targets.h"
#include "frugal/quant/type_traits.h"

namespace frugal {
namespace {

constexpr int64_t kStreamBytes = 96ll << 20;  // well past the last-level cache
constexpr int kDistinctRows = 16;             // rows actually quantized; the rest are copies

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = normal(rng);
  return x;
}

// `rows` rows of `type`, made of kDistinctRows genuinely quantized rows repeated.
std::vector<uint8_t> make_rows(const TypeTraits& t, int64_t n, int64_t rows) {
  const size_t rb = static_cast<size_t>(row_bytes(t.type, n));
  std::vector<uint8_t> out(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < std::min<int64_t>(rows, kDistinctRows); ++r) {
    const auto x = random_floats(n, static_cast<uint32_t>(r + 1));
    t.from_float_ref(x.data(), out.data() + r * rb, n);
  }
  for (int64_t r = kDistinctRows; r < rows; ++r) {
    std::memcpy(out.data() + r * rb, out.data() + (r % kDistinctRows) * rb, rb);
  }
  return out;
}

void bench_vec_dot(benchmark::State& state, const TypeTraits* t, int64_t n, bool stream) {
  const TypeTraits* ty = type_traits(t->vec_dot_type);
  const size_t rb = static_cast<size_t>(row_bytes(t->type, n));
  const int64_t rows =
      stream ? std::max<int64_t>(kDistinctRows, kStreamBytes / static_cast<int64_t>(rb)) : 32;
  const auto w = make_rows(*t, n, rows);
  const auto y = make_rows(*ty, n, 1);
  std::vector<float> out(static_cast<size_t>(rows));
  for (auto _ : state) {
    for (int64_t r = 0; r < rows; ++r)
      t->vec_dot(n, &out[static_cast<size_t>(r)], w.data() + r * rb, y.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(rb) * rows);
  state.counters["MAC/s"] = benchmark::Counter(static_cast<double>(state.iterations()) * rows * n,
                                               benchmark::Counter::kIsRate);
}

constexpr int64_t kGemmRows = 512;
constexpr int64_t kGemmTokens = 64;

void bench_gemm(benchmark::State& state, const TypeTraits* t, int64_t n, bool tiles) {
  const TypeTraits* ty = type_traits(t->vec_dot_type);
  const size_t bx = static_cast<size_t>(row_bytes(t->type, n));
  const size_t by = static_cast<size_t>(row_bytes(ty->type, n));
  const auto w = make_rows(*t, n, kGemmRows);
  const auto y = make_rows(*ty, n, kGemmTokens);
  std::vector<float> s(static_cast<size_t>(kGemmRows * kGemmTokens));
  const size_t ldc = kGemmRows;
  for (auto _ : state) {
    if (tiles) {
      for (int64_t r0 = 0; r0 < kGemmRows; r0 += t->tile_rows) {
        const int nrx = static_cast<int>(std::min<int64_t>(t->tile_rows, kGemmRows - r0));
        for (int64_t c0 = 0; c0 < kGemmTokens; c0 += t->tile_cols) {
          const int nry = static_cast<int>(std::min<int64_t>(t->tile_cols, kGemmTokens - c0));
          t->gemm_tile(n, s.data() + c0 * ldc + r0, ldc, w.data() + r0 * bx, bx, nrx,
                       y.data() + c0 * by, by, nry);
        }
      }
    } else {
      for (int64_t r = 0; r < kGemmRows; ++r) {
        for (int64_t c = 0; c < kGemmTokens; ++c) {
          t->vec_dot(n, &s[c * ldc + r], w.data() + r * bx, y.data() + c * by);
        }
      }
    }
    benchmark::DoNotOptimize(s.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bx) * kGemmRows * kGemmTokens);
  state.counters["MAC/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * kGemmRows * kGemmTokens * n,
                         benchmark::Counter::kIsRate);
}

void bench_from_float(benchmark::State& state, const TypeTraits* t, int64_t n) {
  const auto x = random_floats(n, 7);
  std::vector<uint8_t> q(static_cast<size_t>(row_bytes(t->type, n)));
  for (auto _ : state) {
    t->from_float(x.data(), q.data(), n);
    benchmark::DoNotOptimize(q.data());
  }
  state.SetBytesProcessed(state.iterations() * n * static_cast<int64_t>(sizeof(float)));
}

void register_all() {
  for (const TypeTraits* t : all_type_traits()) {
    const std::string name(dtype_name(t->type));
    for (const int64_t n : {2048, 5632}) {
      if (n % dtype_layout(t->type).block_size != 0) continue;
      const std::string suffix = name + "/" + std::to_string(n);
      if (t->vec_dot) {
        benchmark::RegisterBenchmark(("VecDot/" + suffix + "/stream").c_str(), bench_vec_dot, t, n,
                                     true)
            ->Unit(benchmark::kMicrosecond);
        benchmark::RegisterBenchmark(("VecDot/" + suffix + "/cached").c_str(), bench_vec_dot, t, n,
                                     false);
      }
      if (t->gemm_tile && n == 2048) {
        benchmark::RegisterBenchmark(("Gemm/" + suffix).c_str(), bench_gemm, t, n, true)
            ->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark(("GemmByDot/" + suffix).c_str(), bench_gemm, t, n, false)
            ->Unit(benchmark::kMillisecond);
      }
      if (t->from_float != t->from_float_ref && n == 2048) {
        benchmark::RegisterBenchmark(("FromFloat/" + suffix).c_str(), bench_from_float, t, n);
      }
    }
  }
}

// Consumes --simd=NAME from argv; pins the dispatch target. Returns false on an unknown name.
bool pin_target(int* argc, char** argv) {
  std::string want = "AVX2";
  bool explicit_choice = false;
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    if (std::strncmp(argv[i], "--simd=", 7) == 0) {
      want = argv[i] + 7;
      explicit_choice = true;
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  for (const int64_t t : quant::available_simd_targets()) {
    if (quant::simd_target_label(t) == want) {
      quant::force_simd_target(t);
      return true;
    }
  }
  if (explicit_choice) {
    std::fprintf(stderr, "quant_bench: SIMD target %s is not available here\n", want.c_str());
    return false;
  }
  return true;  // no AVX2: stay on the best target
}

}  // namespace
}  // namespace frugal

int main(int argc, char** argv) {
  if (!frugal::pin_target(&argc, argv)) return 2;
  benchmark::AddCustomContext("simd_target", frugal::simd_target_name());
  frugal::register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
