// What a speculative verify pass costs: Model::forward over n tokens of one sequence (after a
// prompt of 256), as a plain batched pass and as the row-invariant pass speculative decoding runs
// (every row bitwise a one-token pass), against n = 1. Speculation pays only when an n-token pass
// costs much less than n one-token passes.
//
// Environment: FRUGAL_BENCH_MODEL (default models/default.gguf), FRUGAL_BENCH_THREADS (default 2).
//   build/bin/verify_pass_bench --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "frugal/backend/backend.h"
#include "frugal/model/model.h"

namespace frugal {
namespace {

struct Loaded {
  std::unique_ptr<Model> model;
  std::unique_ptr<Backend> backend;
};

Loaded& loaded() {
  static Loaded l = [] {
    Loaded out;
    const char* path = std::getenv("FRUGAL_BENCH_MODEL");
    ModelLoadOptions lo;
    lo.cpu_layouts = true;
    auto m = Model::load(path != nullptr ? path : "models/default.gguf", lo);
    if (!m.ok()) {
      std::fprintf(stderr, "%s\n", m.status().message().c_str());
      std::exit(1);
    }
    out.model = std::move(m).value();
    const char* t = std::getenv("FRUGAL_BENCH_THREADS");
    out.backend = make_cpu_backend(CpuBackendOptions{t != nullptr ? std::atoi(t) : 2});
    return out;
  }();
  return l;
}

void BM_Pass(benchmark::State& state) {
  Loaded& l = loaded();
  const int n = static_cast<int>(state.range(0));
  const bool row_invariant = state.range(1) != 0;
  constexpr int kPrompt = 256;
  auto kv = KvCache::create(l.model->kv_options(1, kPrompt + 64));
  if (!kv.ok()) {
    state.SkipWithError(kv.status().message().c_str());
    return;
  }
  std::vector<float> logits(static_cast<size_t>(n) * l.model->config().n_vocab);
  Batch b;
  for (int p = 0; p < kPrompt; ++p) b.add(5 + p % 50, p, 0, p + 1 == kPrompt);
  (void)l.model->forward(b, *kv, *l.backend, logits.data());
  for (auto _ : state) {
    b.clear();
    for (int i = 0; i < n; ++i) b.add(7 + i, kPrompt + i, 0, true);
    b.row_invariant = row_invariant;
    const Status st = l.model->forward(b, *kv, *l.backend, logits.data());
    if (!st.ok()) state.SkipWithError(st.message().c_str());
    kv->truncate(0, kPrompt);
  }
  state.counters["tokens"] = n;
  state.counters["ms_per_token"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * n / 1e3,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_Pass)
    ->ArgNames({"n", "row_invariant"})
    ->Args({1, 0})
    ->Args({2, 0})->Args({2, 1})
    ->Args({4, 0})->Args({4, 1})
    ->Args({7, 0})->Args({7, 1})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace frugal

BENCHMARK_MAIN();
