// CPU backend micro-benchmarks: matmul on TinyLlama-1.1B-shaped weights at decode (n=1) and
// prefill (n=512) batch sizes, attention, and the cost of one thread-pool dispatch.
//
// Environment: FRUGAL_BENCH_THREADS (default 2), FRUGAL_BENCH_SIMD=AVX2 (or SSE4, AVX3...) to
// pin the SIMD target, e.g. to measure the AVX2 path on a CPU that also has AVX-512.
// FRUGAL_BENCH_CPU_TIME=1 times by the CPU time of the whole process instead of wall time: on a
// loaded machine, rates then read "per CPU-second of all threads" (multiply by the thread count
// for what an idle machine would do, minus synchronization losses).
#include <benchmark/benchmark.h>

#include <hwy/targets.h>

#include <strings.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "frugal/backend/backend.h"
#include "frugal/backend/cpu/repack.h"
#include "frugal/backend/cpu/simd_ops.h"
#include "frugal/core/thread_pool.h"
#include "frugal/kv/kv_cache.h"
#include "frugal/quant/type_traits.h"

namespace frugal {
namespace {

int bench_threads() {
  const char* s = std::getenv("FRUGAL_BENCH_THREADS");
  return s != nullptr && std::atoi(s) > 0 ? std::atoi(s) : 2;
}

Backend& backend() {
  static std::unique_ptr<Backend> be = [] {
    CpuBackendOptions o;
    o.n_threads = bench_threads();
    return make_cpu_backend(o);
  }();
  return *be;
}

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Weights: a few distinct quantized rows repeated; speed does not depend on the values, and the
// reference K-quant quantizer is too slow to run on 65M elements.
struct BenchWeight {
  std::vector<uint8_t> bytes;
  WeightTensor w;
};

// Only the most recent weight is kept: benchmarks of one shape and type run back to back.
const BenchWeight& weight(DType type, int64_t rows, int64_t cols) {
  static std::unique_ptr<BenchWeight> last;
  if (last && last->w.type == type && last->w.rows == rows && last->w.cols == cols) return *last;
  last.reset();
  const TypeTraits* tt = type_traits(type);
  auto bw = std::make_unique<BenchWeight>();
  const size_t rb = static_cast<size_t>(row_bytes(type, cols));
  bw->bytes.resize(rb * rows);
  constexpr int kDistinct = 16;
  for (int r = 0; r < kDistinct && r < rows; ++r) {
    const auto src = random_floats(cols, 1000 + r, 0.02f);
    tt->from_float_ref(src.data(), bw->bytes.data() + r * rb, cols);
  }
  for (int64_t r = kDistinct; r < rows; ++r) {
    std::memcpy(bw->bytes.data() + r * rb, bw->bytes.data() + (r % kDistinct) * rb, rb);
  }
  bw->w.type = type;
  bw->w.rows = rows;
  bw->w.cols = cols;
  bw->w.row_stride = rb;
  bw->w.data = bw->bytes.data();
  last = std::move(bw);
  return *last;
}

// layout: the weight as GGUF stores it (kRows) or repacked in place first (backend/cpu/repack.h).
void BM_Matmul(benchmark::State& state, DType type, int64_t rows, int64_t cols, int64_t n,
               WeightLayout layout = WeightLayout::kRows) {
  const BenchWeight& bw = weight(type, rows, cols);
  WeightTensor w = bw.w;
  std::vector<uint8_t> repacked;
  if (layout != WeightLayout::kRows) {
    repacked = bw.bytes;
    cpu::repack_in_place(w, repacked.data(), layout);
  }
  const auto x = random_floats(static_cast<size_t>(n * cols), 7);
  std::vector<float> y(static_cast<size_t>(n * rows));
  Backend& be = backend();
  for (auto _ : state) {
    be.matmul(w, x.data(), n, y.data(), nullptr);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * rows * cols * n * iters / 1e9, benchmark::Counter::kIsRate);
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bw.bytes.size()) * iters / 1e9,
                                              benchmark::Counter::kIsRate);
}

// Attention of TinyLlama shape (32 heads, 4 KV heads, dim 64) over `ctx` cached tokens, for one
// decode token or a prefill of `n` tokens at the end of the context.
// `quant` picks the cache: F16 rows, or int8/int4/hyquant codes (every token's row differs, and
// hyquant is flushed down to its recent window, as after a prefill). The cache has TinyLlama's 22
// layers and each iteration attends over the next one, so the rows come from memory as in a decode
// step (one layer alone would stay in the last-level cache between iterations).
void BM_Attention(benchmark::State& state, int64_t n, int ctx, KvQuant quant) {
  constexpr int kLayers = 22;
  KvCacheOptions ko;
  ko.n_layer = kLayers;
  ko.n_head_kv = 4;
  ko.head_dim = 64;
  ko.capacity = ctx;
  ko.quant = quant;
  auto kvr = KvCache::create(ko);
  KvCache& kv = kvr.value();
  const auto kvrows = random_floats(static_cast<size_t>(ctx) * 4 * 64, 3);
  for (int l = 0; l < kLayers; ++l) {
    for (int p = 0; p < ctx; ++p) {
      const float* row = kvrows.data() + static_cast<size_t>((p + 97 * l) % ctx) * 4 * 64;
      (void)kv.append(l, 0, p, row, row);
    }
  }
  if (quant == KvQuant::kHyQuant) {
    const auto qmean = random_floats(4 * 64, 7);
    for (int l = 0; l < kLayers; ++l) kv.flush(l, 0, qmean.data());
  }
  AttentionParams ap;
  ap.n_head = 32;
  ap.n_head_kv = 4;
  ap.head_dim = 64;
  ap.scale = 0.125f;
  std::vector<int32_t> seq(n, 0), pos(n);
  for (int64_t t = 0; t < n; ++t) pos[t] = static_cast<int32_t>(ctx - n + t);
  const auto q = random_floats(static_cast<size_t>(n * 32 * 64), 5);
  std::vector<float> out(q.size());
  Backend& be = backend();
  int layer = 0;
  for (auto _ : state) {
    be.attention(q.data(), kv, layer, seq.data(), pos.data(), n, ap, out.data());
    layer = (layer + 1) % kLayers;
    benchmark::DoNotOptimize(out.data());
  }
  // Causal work: query t sees ctx - n + t + 1 keys; 2 dots of 64 per (key, head).
  double keys = 0;
  for (int64_t t = 0; t < n; ++t) keys += pos[t] + 1;
  state.counters["GFLOP/s"] = benchmark::Counter(keys * 32 * 64 * 4 * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
}

void BM_Dispatch(benchmark::State& state) {
  ThreadPool pool(bench_threads());
  std::vector<int64_t> sink(64);
  for (auto _ : state) {
    pool.parallel_for(64, 32, [&](int64_t b, int64_t, int t) { sink[b / 32] += t; });
  }
  benchmark::DoNotOptimize(sink.data());
}

// Batch sizes: decode and prefill, plus FRUGAL_BENCH_BATCHES="8,16,..." to probe the crossovers.
std::vector<int64_t> bench_batches() {
  std::vector<int64_t> out = {1, 512};
  if (const char* s = std::getenv("FRUGAL_BENCH_BATCHES")) {
    out.clear();
    for (const char* p = s; *p != 0;) {
      out.push_back(std::strtoll(p, const_cast<char**>(&p), 10));
      while (*p == ',' || *p == ' ') ++p;
    }
  }
  return out;
}

benchmark::internal::Benchmark* timing(benchmark::internal::Benchmark* b) {
  const char* s = std::getenv("FRUGAL_BENCH_CPU_TIME");
  if (s != nullptr && std::atoi(s) != 0) return b->MeasureProcessCPUTime();
  return b->UseRealTime();
}

void register_all() {
  struct Shape {
    int64_t rows, cols;
  };
  const Shape shapes[] = {{2048, 2048}, {5632, 2048}, {2048, 5632}, {32000, 2048}};
  const DType types[] = {DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K};
  for (const Shape& s : shapes) {
    for (DType t : types) {
      for (int64_t n : bench_batches()) {
        const std::string name = "matmul/" + std::string(dtype_name(t)) + "/" + std::to_string(s.rows) + "x" +
                                 std::to_string(s.cols) + "/n" + std::to_string(n);
        auto* b = benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, t, s.rows, s.cols, n, WeightLayout::kRows);
        timing(b)->Unit(benchmark::kMillisecond);
        if (n > 1) b->MinTime(1.0);
        if (t == DType::kQ4_0) {
          const std::string name8 = "matmul/q4_0x8/" + std::to_string(s.rows) + "x" + std::to_string(s.cols) + "/n" +
                                    std::to_string(n);
          auto* b8 = benchmark::RegisterBenchmark(name8.c_str(), BM_Matmul, t, s.rows, s.cols, n, WeightLayout::kQ4_0x8);
          timing(b8)->Unit(benchmark::kMillisecond);
          if (n > 1) b8->MinTime(1.0);
        }
      }
    }
  }
  for (KvQuant q : {KvQuant::kNone, KvQuant::kInt8, KvQuant::kInt4, KvQuant::kHyQuant}) {
    const std::string qn = q == KvQuant::kNone ? "f16" : kv_quant_name(q);
    for (int ctx : {1024, 4096, 16384}) {
      timing(benchmark::RegisterBenchmark(("attention/decode/" + qn + "/ctx" + std::to_string(ctx)).c_str(),
                                          BM_Attention, 1, ctx, q))
          ->Unit(benchmark::kMicrosecond);
    }
    timing(benchmark::RegisterBenchmark(("attention/prefill512/" + qn).c_str(), BM_Attention, 512, 512, q))
        ->Unit(benchmark::kMillisecond);
  }
  timing(benchmark::RegisterBenchmark("threadpool/dispatch", BM_Dispatch));
}

void pin_simd_target() {
  const char* want = std::getenv("FRUGAL_BENCH_SIMD");
  if (want == nullptr) return;
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
    if (strcasecmp(hwy::TargetName(t), want) == 0) {
      hwy::SetSupportedTargetsForTest(t);
      return;
    }
  }
  std::fprintf(stderr, "FRUGAL_BENCH_SIMD=%s: not a target of this build and CPU\n", want);
}

}  // namespace
}  // namespace frugal

int main(int argc, char** argv) {
  frugal::pin_simd_target();
  frugal::register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("threads", std::to_string(frugal::bench_threads()));
  benchmark::AddCustomContext("simd", std::string(frugal::simd_target_name()) + " / " + frugal::cpu::simd_target());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
