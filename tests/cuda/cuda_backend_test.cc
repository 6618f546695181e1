// CUDA backend against CPU references: weight kernels per type against the scalar dequantizers
// (float64 dot products), whole-model logits against the CPU backend per weight type, and greedy
// decoding token-identical to the CPU backend on real models. Every test skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cuda/gpu_skip.h"
#include "frugal/backend/cuda/cuda_backend.h"
#include "frugal/core/greedy_token.h"
#include "frugal/model/model.h"
#include "frugal/core/half.h"
#include "frugal/quant/blocks.h"
#include "frugal/quant/reference.h"
#include "frugal/quant/type_traits.h"
#include "frugal/quantize/model_quantizer.h"
#include "frugal/synth/random_model.h"
#include "reference/reference_forward.h"

namespace frugal {
namespace {

namespace fs = std::filesystem;

// Run 1 on the H200 ended this binary with status 1 in the middle of the first test and kept no
// message. So: stdout unbuffered (a dying process loses no line), and exit() before the end of
// the run or a fatal signal prints the current step and a backtrace on stderr
// (cuda::install_exit_trace). The steps are also printed when FRUGAL_CUDA_TRACE=1.
// setvbuf runs at static initialization, before gtest_main's first line (it must precede any
// output on the stream); the trace is installed when the tests start, so --gtest_list_tests (build-time
// test discovery) ends quietly.
[[maybe_unused]] const int kStdoutUnbuffered = std::setvbuf(stdout, nullptr, _IONBF, 0);
class TraceEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { cuda::install_exit_trace("cuda_tests"); }
  void TearDown() override { cuda::finish_exit_trace(); }
};
[[maybe_unused]] const auto* const kTraceEnv = ::testing::AddGlobalTestEnvironment(new TraceEnvironment);

void trace_step(const std::string& s) {
  cuda::set_trace_step(s.c_str());
  if (const char* t = std::getenv("FRUGAL_CUDA_TRACE"); t != nullptr && std::atoi(t) >= 1) {
    std::fprintf(stderr, "cuda_tests step: %s\n", s.c_str());
  }
}

// FRUGAL_CUDA_TEST_TYPES=Q8_0,Q4_K (any case) limits the per-type tests to those types (one
// process per type isolates a failure); unset: all.
std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
bool type_selected(const std::string& name) {
  const char* e = std::getenv("FRUGAL_CUDA_TEST_TYPES");
  if (e == nullptr || *e == 0) return true;
  const std::string list = "," + upper(e) + ",";
  return list.find("," + upper(name) + ",") != std::string::npos;
}

double rel_l2(const std::vector<float>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = a[i] - ref[i];
    num += std::isfinite(a[i]) ? d * d : 1e30;
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

struct Quantized {
  std::vector<uint8_t> bytes;
  std::vector<float> deq;  // the reference dequantization
  WeightTensor w;
};

Quantized make_weight(DType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> src(static_cast<size_t>(rows * cols));
  for (auto& v : src) v = nd(rng);
  const TypeTraits* tt = type_traits(type);
  Quantized q;
  const int64_t rb = row_bytes(type, cols);
  q.bytes.resize(static_cast<size_t>(rows * rb));
  q.deq.resize(src.size());
  for (int64_t r = 0; r < rows; ++r) {
    tt->from_float_ref(src.data() + r * cols, q.bytes.data() + r * rb, cols);
    tt->to_float_ref(q.bytes.data() + r * rb, q.deq.data() + r * cols, cols);
  }
  q.w.type = type;
  q.w.rows = rows;
  q.w.cols = cols;
  q.w.row_stride = static_cast<size_t>(rb);
  q.w.data = q.bytes.data();
  if (type == DType::kNVFP4) {
    // A global scale other than 1, as model files carry (the products are multiplied by it).
    q.w.scale = 0.75f;
    for (auto& v : q.deq) v *= q.w.scale;
  }
  return q;
}

// Sets (value null: unsets) an environment variable for a scope (the backend reads its switches
// when it starts).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

const DType kTypes[] = {DType::kF32,   DType::kF16,   DType::kBF16,  DType::kQ8_0,  DType::kQ4_0,
                        DType::kQ4_K,  DType::kQ6_K,  DType::kMXFP4, DType::kNVFP4, DType::kHBQ_A,
                        DType::kHBQ_E, DType::kQ5_K /* converted to F16 at upload */};

// Seed of the random weights and inputs: fresh each run (printed), FRUGAL_TEST_SEED to repeat one.
uint32_t test_seed() {
  const char* e = std::getenv("FRUGAL_TEST_SEED");
  const uint32_t seed = e != nullptr ? static_cast<uint32_t>(std::strtoul(e, nullptr, 10)) : std::random_device{}();
  std::printf("seed %u (FRUGAL_TEST_SEED=%u repeats it)\n", seed, seed);
  return seed;
}

// x [n][cols] through the CPU's activation quantizer for `weight` (vec_dot_type) and back.
std::vector<float> cpu_quantized_activations(DType weight, const std::vector<float>& x, int64_t n, int64_t cols) {
  const TypeTraits* at = type_traits(type_traits(weight)->vec_dot_type);
  std::vector<uint8_t> buf(static_cast<size_t>(row_bytes(at->type, cols)));
  std::vector<float> out(x.size());
  for (int64_t t = 0; t < n; ++t) {
    at->from_float_ref(x.data() + t * cols, buf.data(), cols);
    at->to_float_ref(buf.data(), out.data() + t * cols, cols);
  }
  return out;
}

std::vector<double> reference_product(const Quantized& q, const std::vector<float>& x, int64_t n) {
  const int64_t rows = q.w.rows, cols = q.w.cols;
  std::vector<double> ref(static_cast<size_t>(n * rows));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t c = 0; c < cols; ++c) s += static_cast<double>(q.deq[r * cols + c]) * x[t * cols + c];
      ref[t * rows + r] = s;
    }
  }
  return ref;
}

bool has_int8_gemv(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ4_K || t == DType::kQ6_K || t == DType::kMXFP4 ||
         t == DType::kNVFP4 || t == DType::kHBQ_A || t == DType::kHBQ_E;
}
// The weight types the tensor-core product reads (gemm_mma.cu); the others take cuBLAS above 8 tokens.
bool has_tensor_core_product(DType t) {
  return t == DType::kF16 || t == DType::kBF16 || t == DType::kQ8_0 || t == DType::kQ4_K;
}

// Products against float64 dots with the reference dequantization. Three paths:
// - GEMV, float activations (n <= 8; every type; FRUGAL_GEMV_Q8=0 makes it the default for
//   quantized weights): float32 math on exact weights, activations rounded to the weight's type for
//   F16 and BF16 (as the CPU does): 1e-5 (F16 1.5e-3, BF16 8e-3).
// - GEMV, 8-bit activations (n <= 8, Q8_0/Q4_0/Q4_K/Q6_K and the FP4/HBQ types, the default): the activations are
//   quantized on the GPU and must be the CPU quantizer's codes and scales exactly, so the reference
//   takes the CPU-quantized activations and the bound stays 1e-5 (float32 sums of exact integer
//   partial sums). Against the unquantized product the error is the quantization's, ~0.6-0.8% per
//   element (see LogitsMatchCpuPerType): checked below 3e-2 as well.
// - tensor-core kernel or cuBLAS (n > 8, and Q4_K from cuda::tensor_core_min_tokens on):
//   activations rounded to F16 (BF16 for BF16 weights): 1.5e-3 (BF16 8e-3). The FP4 and HBQ types
//   are dequantized to F16 for cuBLAS (their values are a 4-bit significand times a scale: a
//   rounding of at most 2^-11 each, within the same bound).
TEST(CudaKernels, MatmulMatchesReferencePerType) {
  SKIP_WITHOUT_GPU();
  ScopedEnv all_mma("FRUGAL_CUDA_MMA", "1");  // 9..64 tokens: the tensor-core product (off by default)
  std::mt19937 rng(test_seed());
  // Odd row counts (partial blocks of rows); 4096 columns also give the float GEMV's split rows
  // (two or four warps per row, their sums combined in shared memory; FRUGAL_GEMV_SPLIT=2 or 4
  // forces them on the 8-bit GEMV too); 768 columns (three K-quant super-blocks) leave most lanes
  // of a warp without a unit.
  for (int64_t cols : {512, 768, 4096})
  for (DType type : kTypes) {
    const int64_t rows = 37;
    // Weights and inputs are drawn for every type, selected or not, so a selected type sees the
    // same data as in a full run.
    const bool selected = type_selected(std::string(dtype_name(type)));
    Quantized q = make_weight(type, rows, cols, rng);
    // 9..64 tokens take the tensor-core product (cuBLAS for F32), 9, 17 and 33 the three token
    // tilings (16, 32, 64) of its kernel; 64: the batch of a 64-sequence decode step.
    for (int64_t n : {1, 3, 5, 8, 9, 17, 33, 64}) {
      if (cols > 512 && (n == 5 || n == 17)) continue;
      if (cols <= 512 && (n == 33 || n == 64)) continue;
      std::normal_distribution<float> nd(0.f, 1.f);
      std::vector<float> x(static_cast<size_t>(n * cols));
      for (auto& v : x) v = nd(rng);
      if (!selected) continue;
      const std::vector<double> ref = reference_product(q, x, n);
      // Q4_K from cuda::tensor_core_min_tokens on: the tensor-core product (cuda_backend.h).
      const bool gemv = cuda::gemv_runs_product(type, n);
      const bool int8_path = gemv && has_int8_gemv(type);
      for (bool float_acts : {false, true}) {
        if (float_acts && !int8_path) continue;  // the same path as the default
        std::vector<float> y(ref.size());
        trace_step("matmul " + std::string(dtype_name(type)) + " n=" + std::to_string(n) +
                   (float_acts ? " float activations" : ""));
        Status st = cuda::matmul_on_device(q.w, x.data(), n, y.data(), float_acts);
        ASSERT_TRUE(st.ok()) << dtype_name(type) << " n=" << n << ": " << st.to_string();
        double bound = 1e-5;
        if (type == DType::kF16 || (!gemv && type != DType::kF32)) bound = 1.5e-3;
        if (type == DType::kBF16) bound = 8e-3;
        if (type == DType::kQ5_K) bound = std::max(bound, 1.5e-3);
        const char* path = !gemv ? (has_tensor_core_product(type) ? "mma" : "cuBLAS")
                                 : (int8_path && !float_acts ? "int8 GEMV" : "GEMV");
        if (int8_path && !float_acts) {
          const double err = rel_l2(y, reference_product(q, cpu_quantized_activations(type, x, n, cols), n));
          EXPECT_LT(err, bound) << dtype_name(type) << " n=" << n << ": against CPU-quantized activations";
          const double err_exact = rel_l2(y, ref);
          EXPECT_LT(err_exact, 3e-2) << dtype_name(type) << " n=" << n << ": against exact activations";
          std::printf("matmul %-5s %4lld cols n=%-2lld %-9s rel_l2 %.2e vs CPU-quantized activations (bound %.0e), %.2e vs exact\n",
                      std::string(dtype_name(type)).c_str(), static_cast<long long>(cols), static_cast<long long>(n), path,
                      err, bound, err_exact);
        } else {
          const double err = rel_l2(y, ref);
          EXPECT_LT(err, bound) << dtype_name(type) << " n=" << n << " " << path;
          std::printf("matmul %-5s %4lld cols n=%-2lld %-9s rel_l2 %.2e (bound %.0e)\n",
                      std::string(dtype_name(type)).c_str(), static_cast<long long>(cols), static_cast<long long>(n), path,
                      err, bound);
        }
        if (n == 64 && !float_acts) {
          // Added to what y holds (the residual products): 4096 columns and 37 rows give the
          // tensor-core product eight K slices, whose partial sums then meet y in one of them.
          std::mt19937 rng_y(test_seed() ^ 0x5eed);  // apart from `rng`: selecting types keeps its draws
          std::vector<float> y0(ref.size());
          for (auto& v : y0) v = nd(rng_y);
          std::vector<float> acc = y0;
          st = cuda::matmul_on_device(q.w, x.data(), n, acc.data(), false, true);
          ASSERT_TRUE(st.ok()) << dtype_name(type) << " n=" << n << " accumulate: " << st.to_string();
          std::vector<double> want(ref.size());
          for (size_t i = 0; i < want.size(); ++i) want[i] = ref[i] + static_cast<double>(y0[i]);
          const double err = rel_l2(acc, want);
          EXPECT_LT(err, bound) << dtype_name(type) << " n=" << n << " " << path << " accumulate";
          std::printf("matmul %-5s %4lld cols n=%-2lld %-9s accumulate rel_l2 %.2e (bound %.0e)\n",
                      std::string(dtype_name(type)).c_str(), static_cast<long long>(cols), static_cast<long long>(n), path,
                      err, bound);
        }
      }
    }
  }
}

// The tensor-core product at the shapes of real layers: many 64-row blocks, one to sixteen K
// slices, rows that end inside a block, BF16; against float64 dots of the exact weights and the
// inputs rounded to the weights' type (what the kernel multiplies), and a token's outputs the same
// bits whether it shares its batch with 8 or 63 others (the K slices depend on the weight only).
TEST(CudaKernels, TensorCoreProductAtLayerShapes) {
  SKIP_WITHOUT_GPU();
  ScopedEnv all_mma("FRUGAL_CUDA_MMA", "1");
  std::mt19937 rng(test_seed());
  struct Shape {
    DType type;
    int64_t rows, cols;
  };
  // Blocks of 128 rows, K slices on a 132-SM GPU (gemm_mma_slices): 1000 x 4096: 8 blocks, 8
  // slices; 130 x 4096: 2 blocks, the second of 2 rows; 4100 x 1024: 33 blocks, 4 slices; BF16
  // 300 x 2048; 2500 x 8192: 20 blocks, 8 slices of 16 steps; 17000 x 512: 133 blocks, unsplit.
  // Q8_0 and Q4_K: codes and scales converted to F16 in the kernel.
  const Shape shapes[] = {{DType::kF16, 1000, 4096},  {DType::kF16, 130, 4096},  {DType::kF16, 4100, 1024},
                          {DType::kBF16, 300, 2048},  {DType::kF16, 2500, 8192}, {DType::kF16, 17000, 512},
                          {DType::kQ8_0, 1000, 4096}, {DType::kQ8_0, 4100, 1024}, {DType::kQ4_K, 1000, 4096},
                          {DType::kQ4_K, 4100, 1024}};
  for (const Shape& sh : shapes) {
    Quantized q = make_weight(sh.type, sh.rows, sh.cols, rng);
    // Q8_0, Q4_K: the kernel multiplies each weight rounded to F16 (as the dequantizing kernel writes it).
    if (sh.type == DType::kQ8_0 || sh.type == DType::kQ4_K) {
      for (auto& v : q.deq) v = fp16_to_f32(f32_to_fp16(v));
    }
    const int64_t n = 64;
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> x(static_cast<size_t>(n * sh.cols));
    for (auto& v : x) v = nd(rng);
    // The kernel's operands: inputs rounded to the weight's 16-bit type.
    std::vector<float> xr(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      xr[i] = sh.type == DType::kBF16 ? bf16_to_f32(f32_to_bf16(x[i])) : fp16_to_f32(f32_to_fp16(x[i]));
    }
    const std::vector<double> ref = reference_product(q, xr, n);
    std::vector<float> y(ref.size());
    Status st = cuda::matmul_on_device(q.w, x.data(), n, y.data());
    ASSERT_TRUE(st.ok()) << st.to_string();
    const double err = rel_l2(y, ref);
    // F32 sums of exact products of 16-bit operands: only the summation order differs.
    EXPECT_LT(err, 1e-5) << dtype_name(sh.type) << " " << sh.rows << " x " << sh.cols;
    std::vector<float> y9(static_cast<size_t>(9 * sh.rows));
    st = cuda::matmul_on_device(q.w, x.data(), 9, y9.data());
    ASSERT_TRUE(st.ok()) << st.to_string();
    int64_t differ = 0;
    for (size_t i = 0; i < y9.size(); ++i) differ += std::memcmp(&y9[i], &y[i], 4) != 0;
    EXPECT_EQ(differ, 0) << dtype_name(sh.type) << " " << sh.rows << " x " << sh.cols
                         << ": the first 9 tokens' outputs at n = 9 differ from those at n = 64";
    std::printf("tensor-core product %-4s %5lld x %5lld n=64: rel_l2 %.2e against float64 of rounded inputs; "
                "n=9 vs n=64: %lld of %zu outputs differ\n",
                std::string(dtype_name(sh.type)).c_str(), static_cast<long long>(sh.rows),
                static_cast<long long>(sh.cols), err, static_cast<long long>(differ), y9.size());
  }
}

// FRUGAL_GEMM_BENCH=1: microseconds per product of a 64-sequence Llama-3.1-8B decode step's
// weights, tensor-core kernel against cuBLAS, one process (not a test: it asserts nothing).
TEST(CudaKernels, TensorCoreProductBench) {
  SKIP_WITHOUT_GPU();
  if (std::getenv("FRUGAL_GEMM_BENCH") == nullptr) GTEST_SKIP() << "FRUGAL_GEMM_BENCH=1 runs it";
  std::mt19937 rng(test_seed());
  struct Case {
    const char* name;
    std::vector<std::pair<int64_t, int64_t>> ws;
  };
  const Case cases[] = {{"q", {{4096, 4096}}},
                        {"k", {{1024, 4096}}},
                        {"qkv set", {{4096, 4096}, {1024, 4096}, {1024, 4096}}},
                        {"o", {{4096, 4096}}},
                        {"gate+up set", {{14336, 4096}, {14336, 4096}}},
                        {"down", {{4096, 14336}}},
                        {"lm_head", {{128256, 4096}}}};
  for (const Case& c : cases) {
    std::vector<Quantized> qs;
    for (auto [r, k] : c.ws) qs.push_back(make_weight(DType::kF16, r, k, rng));
    std::vector<const WeightTensor*> wp;
    for (auto& q : qs) wp.push_back(&q.w);
    for (int64_t n : {16, 32, 64}) {
      auto t = cuda::time_product_on_device(wp.data(), static_cast<int>(wp.size()), n, 50);
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      std::printf("product %-12s F16 n=%2lld: mma %8.2f us (%6.0f GB/s), cuBLAS %8.2f us (%6.0f GB/s), %.2fx%s\n",
                  c.name, static_cast<long long>(n), t->mma_us, t->weight_bytes / t->mma_us / 1e3, t->cublas_us,
                  t->weight_bytes / t->cublas_us / 1e3, t->cublas_us / t->mma_us,
                  t->mma_used ? "" : " (no tensor-core build for this GPU)");
    }
  }
}

// Decode GEMV per product at the 8B shapes (FRUGAL_GEMV_BENCH=1; FRUGAL_GEMV_BENCH_TYPES, default
// "Q8_0,Q4_K,Q6_K,F16"; with FRUGAL_CUDA_MMA_MIN_TOKENS=1..8 the Q8_0/Q4_K products from that
// count on time the tensor-core kernel a step then runs): the product alone, its input converted once
// outside the timed graph (in a step the producer writes it), timed as a graph over copies that
// defeat the L2. The weight bytes are random (the time does not depend on the values) and counted
// as in the file.
TEST(CudaKernels, GemvBench) {
  SKIP_WITHOUT_GPU();
  if (std::getenv("FRUGAL_GEMV_BENCH") == nullptr) GTEST_SKIP() << "FRUGAL_GEMV_BENCH=1 runs it";
  const char* env = std::getenv("FRUGAL_GEMV_BENCH_TYPES");
  const std::string list = env != nullptr ? env : "Q8_0,Q4_K,Q6_K,F16";
  std::mt19937_64 rng(test_seed());
  struct Case {
    const char* name;
    std::vector<std::pair<int64_t, int64_t>> ws;
  };
  const Case cases[] = {{"qkv set", {{4096, 4096}, {1024, 4096}, {1024, 4096}}},
                        {"o", {{4096, 4096}}},
                        {"gate+up set", {{14336, 4096}, {14336, 4096}}},
                        {"down", {{4096, 14336}}}};
  for (size_t at = 0; at < list.size();) {
    const size_t end = std::min(list.find(',', at), list.size());
    const auto type = dtype_from_name(list.substr(at, end - at));
    ASSERT_TRUE(type.has_value()) << "FRUGAL_GEMV_BENCH_TYPES: unknown type " << list.substr(at, end - at);
    at = end + 1;
    for (const Case& c : cases) {
      std::vector<std::vector<uint8_t>> bytes;
      std::vector<WeightTensor> ws;
      uint64_t file_bytes = 0;
      for (auto [r, k] : c.ws) {
        const int64_t rb = row_bytes(*type, k);
        bytes.emplace_back(static_cast<size_t>(r * rb));
        auto& b = bytes.back();
        for (size_t i = 0; i + 8 <= b.size(); i += 8) {
          const uint64_t v = rng() & 0x3BFF3BFF3BFF3BFFull;  // F16 fields finite, below 1
          std::memcpy(b.data() + i, &v, 8);
        }
        WeightTensor w;
        w.type = *type;
        w.rows = r;
        w.cols = k;
        w.row_stride = static_cast<size_t>(rb);
        w.data = b.data();
        if (*type == DType::kFLUXBIN) {  // pure FluxBin: its column scales (F16, two per column)
          bytes.emplace_back(static_cast<size_t>(4 * k));
          auto& c = bytes.back();
          for (size_t i = 0; i + 8 <= c.size(); i += 8) {
            const uint64_t v = rng() & 0x3BFF3BFF3BFF3BFFull;
            std::memcpy(c.data() + i, &v, 8);
          }
          w.fluxbin.col_scales = reinterpret_cast<const uint16_t*>(c.data());
          file_bytes += static_cast<uint64_t>(4 * k);
        }
        ws.push_back(w);
        file_bytes += static_cast<uint64_t>(r * rb);
      }
      std::vector<const WeightTensor*> wp;
      for (auto& w : ws) wp.push_back(&w);
      for (int64_t n : {1, 2, 4, 8}) {
        auto t = cuda::time_product_on_device(wp.data(), static_cast<int>(wp.size()), n, 100, false);
        ASSERT_TRUE(t.ok()) << t.status().to_string();
        std::printf("gemv %-5s %-12s n=%lld: %8.2f us %6.0f GB/s\n", std::string(dtype_name(*type)).c_str(), c.name,
                    static_cast<long long>(n), t->gemv_us, static_cast<double>(file_bytes) / t->gemv_us / 1e3);
      }
    }
  }
}

// The 8-bit activations of the integer GEMV, made three ways on the device (a quantize kernel, the
// rms_norm and the swiglu that quantize their own output), must be the CPU quantizer's bytes for
// the values that were quantized: same scales, codes and sums (quant/q8_0.cc, quant/q8_k.cc). The
// values themselves are checked against float64 (rms_norm, silu) within float rounding.
TEST(CudaKernels, ActivationQuantizationMatchesCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(test_seed());
  const int rows = 3;
  // 4096 wide: the rms_norm's Q8_K form with 512 threads of 8 elements (1024: 128 threads).
  for (int dim : {1024, 4096})
  for (int op = 0; op < 3; ++op) {
    for (bool k256 : {false, true}) {
      std::normal_distribution<float> nd(0.f, 1.f);
      std::vector<float> x(static_cast<size_t>(rows) * dim), w(op == 2 ? x.size() : static_cast<size_t>(dim));
      for (auto& v : x) v = nd(rng);
      for (auto& v : w) v = op == 1 ? 1.f + 0.2f * nd(rng) : nd(rng);
      x[5] = 0.f;    // an exact zero
      x[40] = -9.f;  // a block whose largest magnitude is negative (Q8_K maps it to -127)
      const int per = k256 ? 256 : 32;
      std::vector<float> y(x.size()), d(static_cast<size_t>(rows) * (dim / per));
      std::vector<int8_t> q(x.size());
      std::vector<int> s(static_cast<size_t>(rows) * (dim / (k256 ? 16 : 32)));
      Status st = cuda::quantize_activations_on_device(op, k256, x.data(), w.data(), rows, dim, 1e-5f, y.data(),
                                                       q.data(), d.data(), s.data());
      ASSERT_TRUE(st.ok()) << st.to_string();
      // The values against float64.
      double worst = 0;
      for (int r = 0; r < rows; ++r) {
        double ss = 0;
        for (int c = 0; c < dim; ++c) ss += static_cast<double>(x[r * dim + c]) * x[r * dim + c];
        const double scale = 1.0 / std::sqrt(ss / dim + 1e-5);
        for (int c = 0; c < dim; ++c) {
          const size_t i = static_cast<size_t>(r) * dim + c;
          const double xv = x[i];
          const double want = op == 0 ? xv : (op == 1 ? xv * scale * w[c] : xv / (1.0 + std::exp(-xv)) * w[i]);
          worst = std::max(worst, std::fabs(y[i] - want) / (std::fabs(want) + 1e-6));
        }
      }
      EXPECT_LT(worst, 1e-5) << "dim " << dim << " op " << op << (k256 ? " Q8_K" : " Q8_0") << ": values";
      // The bytes against the CPU quantizer of the same values.
      int bad = 0;
      for (int r = 0; r < rows; ++r) {
        if (k256) {
          std::vector<quant::BlockQ8_K> b(static_cast<size_t>(dim / 256));
          quant::quantize_q8_k_ref(y.data() + r * dim, b.data(), dim);
          for (int k = 0; k < dim / 256; ++k) {
            bad += b[k].d != d[r * (dim / 256) + k];
            for (int j = 0; j < 256; ++j) bad += b[k].qs[j] != q[r * dim + k * 256 + j];
            for (int g = 0; g < 16; ++g) bad += b[k].bsums[g] != s[r * (dim / 16) + k * 16 + g];
          }
        } else {
          std::vector<quant::BlockQ8_0> b(static_cast<size_t>(dim / 32));
          quant::quantize_q8_0_ref(y.data() + r * dim, b.data(), dim);
          for (int k = 0; k < dim / 32; ++k) {
            bad += fp16_to_f32(b[k].d) != d[r * (dim / 32) + k];
            int sum = 0;
            for (int j = 0; j < 32; ++j) {
              bad += b[k].qs[j] != q[r * dim + k * 32 + j];
              sum += b[k].qs[j];
            }
            bad += sum != s[r * (dim / 32) + k];
          }
        }
      }
      EXPECT_EQ(bad, 0) << "dim " << dim << " op " << op << (k256 ? " Q8_K" : " Q8_0") << ": bytes differing from the CPU quantizer";
      std::printf("activations op %d %s: max rel err of values %.2e, %d bytes differ\n", op, k256 ? "Q8_K" : "Q8_0",
                  worst, bad);
    }
  }
}

TEST(CudaKernels, GetRowsMatchesReferencePerType) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(11);
  for (DType type : kTypes) {
    Quantized q = make_weight(type, 29, 256, rng);
    if (!type_selected(std::string(dtype_name(type)))) continue;
    const std::vector<int32_t> ids = {28, 0, 5, 5, 17};
    std::vector<float> y(ids.size() * 256);
    trace_step("get_rows " + std::string(dtype_name(type)));
    Status st = cuda::get_rows_on_device(q.w, ids.data(), static_cast<int64_t>(ids.size()), y.data());
    ASSERT_TRUE(st.ok()) << dtype_name(type) << ": " << st.to_string();
    std::vector<double> ref(y.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      for (int c = 0; c < 256; ++c) ref[i * 256 + c] = q.deq[static_cast<size_t>(ids[i]) * 256 + c];
    }
    const double bound = type == DType::kQ5_K ? 1e-3 : 1e-6;  // Q5_K is stored as F16
    EXPECT_LT(rel_l2(y, ref), bound) << dtype_name(type);
  }
}

std::vector<TokenId> prompt_tokens(int64_t n_vocab, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(3, static_cast<int>(n_vocab) - 1);
  std::vector<TokenId> t{1};
  while (static_cast<int>(t.size()) < n) t.push_back(d(rng));
  return t;
}

// Prefill of 13 tokens (cuBLAS path) then 4 decode steps (GEMV path, graphs from the second),
// on both backends, each also compared with the float64 reference forward over the same tokens:
// the figures say which backend is further from exact arithmetic, not only how far apart they are.
struct LogitErrors {
  double cpu_vs_ref = 0, gpu_vs_ref = 0, gpu_vs_cpu = 0;
};

double rel_l2_rows(const std::vector<std::vector<float>>& a, const std::vector<std::vector<double>>& b) {
  double num = 0, den = 0;
  for (size_t t = 0; t < a.size(); ++t) {
    for (size_t v = 0; v < a[t].size(); ++v) {
      const double d = a[t][v] - b[t][v];
      num += d * d;
      den += b[t][v] * b[t][v];
    }
  }
  return std::sqrt(num / den);
}

LogitErrors compare_logits(const std::string& path, double bound, const std::string& label) {
  LogitErrors e;
  auto model = Model::load(path);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return e;
  Model& m = **model;
  CpuBackendOptions co;
  co.n_threads = 2;
  auto cpu = make_cpu_backend(co);
  auto gpu = make_cuda_backend();
  EXPECT_TRUE(gpu.ok()) << gpu.status().to_string();
  if (!gpu.ok()) return e;
  const int64_t nv = m.config().n_vocab;
  auto kv_c = KvCache::create(m.kv_options(1, 64));
  auto kv_g = KvCache::create(m.kv_options(1, 64));
  EXPECT_TRUE(kv_c.ok() && kv_g.ok());
  if (!kv_c.ok() || !kv_g.ok()) return e;
  const auto prompt = prompt_tokens(nv, 13, 3);
  std::vector<int32_t> all(prompt.begin(), prompt.end());
  std::vector<std::vector<float>> rows_c, rows_g;
  Batch b;
  for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], static_cast<int32_t>(i), 0, true);
  for (int step = 0; step < 5; ++step) {
    std::vector<float> lc(static_cast<size_t>(b.n_logits() * nv)), lg(lc.size(), NAN);
    EXPECT_TRUE(m.forward(b, *kv_c, *cpu, lc.data()).ok());
    trace_step("logits " + label + " step " + std::to_string(step) + " (" + std::to_string(b.size()) + " tokens)");
    Status st = m.forward(b, *kv_g, **gpu, lg.data());
    EXPECT_TRUE(st.ok()) << label << " step " << step << ": " << st.to_string();
    if (!st.ok()) return e;
    const std::vector<double> ref(lc.begin(), lc.end());
    const double err = rel_l2(lg, ref);
    e.gpu_vs_cpu = std::max(e.gpu_vs_cpu, err);
    EXPECT_LT(err, bound) << label << " step " << step;
    for (int64_t r = 0; r < b.n_logits(); ++r) {
      rows_c.emplace_back(lc.begin() + r * nv, lc.begin() + (r + 1) * nv);
      rows_g.emplace_back(lg.begin() + r * nv, lg.begin() + (r + 1) * nv);
    }
    const int32_t next = b.pos.back() + 1;
    const TokenId tok = static_cast<TokenId>((prompt[static_cast<size_t>(step)] * 7 + 11) % nv);
    b.clear();
    b.add(tok, next, 0, true);
    if (step < 4) all.push_back(tok);
  }
  auto refm = reference::ReferenceModel::load(path);
  EXPECT_TRUE(refm.ok()) << refm.status().to_string();
  if (!refm.ok()) return e;
  auto want = (*refm)->forward(all);
  EXPECT_TRUE(want.ok()) << want.status().to_string();
  if (!want.ok() || want->size() != rows_c.size()) return e;
  e.cpu_vs_ref = rel_l2_rows(rows_c, *want);
  e.gpu_vs_ref = rel_l2_rows(rows_g, *want);
  std::printf("logits %-8s rel_l2: GPU vs CPU %.2e (bound %.0e), CPU vs float64 %.2e, GPU vs float64 %.2e\n",
              label.c_str(), e.gpu_vs_cpu, bound, e.cpu_vs_ref, e.gpu_vs_ref);
  return e;
}

struct TypeBound {
  const char* type;
  double gpu_vs_ref;  // GPU logits against the float64 forward
  double cpu_vs_ref;  // CPU logits against the float64 forward (as in tests/model)
};

// Error analysis. Both backends and the float64 forward use the same dequantized weights, so the
// differences come from activations and summation only:
// - Prefill (the 13-token prompt): the GPU's cuBLAS path rounds activations to F16 (relative
//   rounding 2^-11 ~ 5e-4 per element) with F32 accumulation. Through two layers that stays at a
//   few 1e-3 of the logit norm (BF16 weights: rounded to BF16, 2^-8 ~ 4e-3 per element).
// - Decode (the 4 single-token steps) and, on the CPU, also the prefill of quantized weights (it
//   takes the integer path below 16 tokens): activations quantized to 8 bits like llama.cpp (Q8_0
//   blocks of 32 for Q8_0/Q4_0, Q8_K blocks of 256 for the K-quants) for integer dot products. The
//   rounding step is amax/127 per block; for Gaussian-like rows amax is ~2.5 rms over 32 and ~3.3
//   rms over 256, so the relative error per element is ~0.6% (Q8_0) to ~0.8% (Q8_K), and ~1-3% of
//   the logit norm after 14 products: bound 3e-2 for either backend on quantized types (tests/model
//   uses the same). The GPU's decode quantizes exactly as the CPU does (MatmulMatchesReferencePerType
//   checks the codes), but its prefill did not, so the two backends' caches differ and their decode
//   errors are not the same errors: the GPU vs CPU bound is the sum of the two.
// F32/F16/BF16 weights: the CPU keeps F32 activations from 8 tokens on and rounds them to the
// weight's type below that, as the GPU's GEMV path does: 5e-3 (BF16 2e-2) each.
TEST(CudaModel, LogitsMatchCpuPerType) {
  SKIP_WITHOUT_GPU();
  const TypeBound cases[] = {{"F32", 5e-4, 5e-4},  {"F16", 5e-3, 5e-3},  {"BF16", 2e-2, 2e-2},
                             {"Q8_0", 3e-2, 3e-2}, {"Q4_0", 3e-2, 3e-2}, {"Q4_K", 3e-2, 3e-2},
                             {"Q6_K", 3e-2, 3e-2}, {"Q4_K_M", 3e-2, 3e-2}};
  for (const auto& c : cases) {
    if (!type_selected(c.type)) continue;
    auto opts = synth::random_model_preset("tiny-llama", FRUGAL_SHARED_MODELS_DIR);
    ASSERT_TRUE(opts.ok());
    opts->weight_type = c.type;
    opts->n_layer = 2;
    opts->weight_std = 0.05;
    const fs::path path = fs::temp_directory_path() / (std::string("frugal_cuda_") + c.type + ".gguf");
    ASSERT_TRUE(synth::write_random_model(*opts, path.string()).ok());
    const LogitErrors e = compare_logits(path.string(), c.gpu_vs_ref + c.cpu_vs_ref, c.type);
    EXPECT_LT(e.gpu_vs_ref, c.gpu_vs_ref) << c.type << ": GPU against float64";
    EXPECT_LT(e.cpu_vs_ref, c.cpu_vs_ref) << c.type << ": CPU against float64";
    fs::remove(path);
  }
}

// The FP4 and HBQ types from `frugal quantize` (every matrix in the type: pure), which is how such
// files are made: a float model quantized, NVFP4 with its per-tensor global scale. Both backends
// quantize activations to Q8_0 for these types below 8 tokens (CPU: 16), so the bounds are
// LogitsMatchCpuPerType's for quantized types.
TEST(CudaModel, LogitsMatchCpuFp4) {
  SKIP_WITHOUT_GPU();
  auto opts = synth::random_model_preset("tiny-llama", FRUGAL_SHARED_MODELS_DIR);
  ASSERT_TRUE(opts.ok());
  opts->weight_type = "F32";
  opts->n_layer = 2;
  opts->weight_std = 0.05;
  const fs::path f32 = fs::temp_directory_path() / "frugal_cuda_fp4_src.gguf";
  ASSERT_TRUE(synth::write_random_model(*opts, f32.string()).ok());
  for (const char* type : {"MXFP4", "NVFP4", "HBQ_A", "HBQ_E"}) {
    if (!type_selected(type)) continue;
    quantize::QuantizeOptions q;
    q.input = f32.string();
    q.output = (fs::temp_directory_path() / (std::string("frugal_cuda_") + type + ".gguf")).string();
    const auto target = quantize::find_target(type);
    ASSERT_TRUE(target.has_value()) << type;
    q.target = *target;
    q.mix.pure = true;
    q.n_threads = 2;
    auto r = quantize::quantize_model(q);
    ASSERT_TRUE(r.ok()) << type << ": " << r.status().to_string();
    EXPECT_EQ(r->n_fallback, 0) << type;
    const LogitErrors e = compare_logits(q.output, 6e-2, type);
    EXPECT_LT(e.gpu_vs_ref, 3e-2) << type << ": GPU against float64";
    EXPECT_LT(e.cpu_vs_ref, 3e-2) << type << ": CPU against float64";
    fs::remove(q.output);
  }
  fs::remove(f32);
}

// FLUXBIN and FLUXBIN_HYBRID from `frugal quantize` (the type's mix: output.weight Q6_K, every
// other matrix and the token embedding FluxBin, so the embedding rows, the one-token GEMV of Q/K/V
// and gate/up as sets, and the cuBLAS prefill over dequantized F16 all run). The GPU multiplies
// float activations with the stored weights exactly in its GEMV and in F16 for the 13-token
// prefill: the F16 bound. The CPU's byte GEMV rounds each u = c x to 8 bits per group (quant/
// fluxbin.h, gemv_bytes): an 8-bit activation error like the integer paths of the other quantized
// types, their bound.
TEST(CudaModel, LogitsMatchFloat64FluxBin) {
  SKIP_WITHOUT_GPU();
  auto opts = synth::random_model_preset("tiny-llama", FRUGAL_SHARED_MODELS_DIR);
  ASSERT_TRUE(opts.ok());
  opts->weight_type = "F32";
  opts->n_layer = 2;
  opts->weight_std = 0.05;
  const fs::path f32 = fs::temp_directory_path() / "frugal_cuda_fluxbin_src.gguf";
  ASSERT_TRUE(synth::write_random_model(*opts, f32.string()).ok());
  for (const char* type : {"FLUXBIN", "FLUXBIN_HYBRID"}) {
    if (!type_selected(type)) continue;
    quantize::QuantizeOptions q;
    q.input = f32.string();
    q.output = (fs::temp_directory_path() / (std::string("frugal_cuda_") + type + ".gguf")).string();
    const auto target = quantize::find_target(type);
    ASSERT_TRUE(target.has_value()) << type;
    q.target = *target;
    q.n_threads = 2;
    auto r = quantize::quantize_model(q);
    ASSERT_TRUE(r.ok()) << type << ": " << r.status().to_string();
    {
      auto model = Model::load(q.output);
      ASSERT_TRUE(model.ok()) << model.status().to_string();
      EXPECT_EQ((*model)->weights().token_embd.type, DType::kFLUXBIN) << type;
      EXPECT_EQ((*model)->weights().layers[0].wq.type, DType::kFLUXBIN) << type;
    }
    const LogitErrors e = compare_logits(q.output, 3.5e-2, type);
    std::printf("%s: rel_l2 GPU vs float64 %.2e, CPU vs float64 %.2e, GPU vs CPU %.2e\n", type, e.gpu_vs_ref,
                e.cpu_vs_ref, e.gpu_vs_cpu);
    EXPECT_LT(e.gpu_vs_ref, 5e-3) << type << ": GPU against float64";
    EXPECT_LT(e.cpu_vs_ref, 3e-2) << type << ": CPU against float64";
    fs::remove(q.output);
  }
  fs::remove(f32);
}

// Q4_K_M keeps Q and K in Q4_K and gives V six bits (Q6_K) in the layers llama.cpp's mix chooses
// (here layer 1 of 2): the three products of the attention input run as one two-type GEMV launch.
// The same logits as one launch per weight (FRUGAL_CUDA_FUSE_MIXED=0), up to the order of float
// additions (a lone K may be split over several warps per row): rel_l2 below 1e-5 per step, where
// a wrong row, type or output of the merged launch moves the logits by far more than 1e-3.
TEST(CudaModel, TwoTypeProductSetMatchesOneLaunchPerWeight) {
  SKIP_WITHOUT_GPU();
  auto opts = synth::random_model_preset("tiny-llama", FRUGAL_SHARED_MODELS_DIR);
  ASSERT_TRUE(opts.ok());
  opts->weight_type = "Q4_K_M";
  opts->n_layer = 2;
  opts->weight_std = 0.05;
  const fs::path path = fs::temp_directory_path() / "frugal_cuda_two_type_set.gguf";
  ASSERT_TRUE(synth::write_random_model(*opts, path.string()).ok());
  auto model = Model::load(path.string());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  Model& m = **model;
  bool two_types = false;
  for (const LayerWeights& l : m.weights().layers) {
    two_types = two_types || (l.wq.type == DType::kQ4_K && l.wk.type == DType::kQ4_K && l.wv.type == DType::kQ6_K);
  }
  ASSERT_TRUE(two_types) << "the synthesized Q4_K_M file has no layer with Q4_K Q/K and a Q6_K V";
  auto merged = make_cuda_backend();
  ASSERT_TRUE(merged.ok()) << merged.status().to_string();
  setenv("FRUGAL_CUDA_FUSE_MIXED", "0", 1);
  auto separate = make_cuda_backend();
  unsetenv("FRUGAL_CUDA_FUSE_MIXED");
  ASSERT_TRUE(separate.ok()) << separate.status().to_string();
  const int64_t nv = m.config().n_vocab;
  auto kv_a = KvCache::create(m.kv_options(1, 64));
  auto kv_b = KvCache::create(m.kv_options(1, 64));
  ASSERT_TRUE(kv_a.ok() && kv_b.ok());
  const auto prompt = prompt_tokens(nv, 5, 9);
  Batch b;
  for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], static_cast<int32_t>(i), 0, true);
  // Steps of 5 tokens (the multi-token GEMV) and then of one.
  for (int step = 0; step < 4; ++step) {
    std::vector<float> la(static_cast<size_t>(b.n_logits() * nv), NAN), lb(la.size(), NAN);
    ASSERT_TRUE(m.forward(b, *kv_a, **merged, la.data()).ok());
    ASSERT_TRUE(m.forward(b, *kv_b, **separate, lb.data()).ok());
    const std::vector<double> ref(lb.begin(), lb.end());
    const double err = rel_l2(la, ref);
    std::printf("two-type set step %d (%d tokens): rel_l2 merged vs separate %.2e\n", step, static_cast<int>(b.size()), err);
    EXPECT_LT(err, 1e-5) << "step " << step;
    const int32_t next = b.pos.back() + 1;
    b.clear();
    b.add(static_cast<TokenId>((prompt[static_cast<size_t>(step)] * 5 + 3) % nv), next, 0, true);
  }
  fs::remove(path);
}

// One step's logits (every row) from two backends.
struct StepPair {
  int len = 0;
  std::vector<float> a, b;
};

// Steps of 40, 9 and 15 tokens of a 2-layer tiny-llama of `type` (weight_std > 0 replaces the
// preset's) through two CUDA backends, made with environment variable `var` at `value_a` and at
// `value_b` (null: unset); prompt tokens from `seed`.
void forward_two_backends(const char* type, double weight_std, const char* var, const char* value_a,
                          const char* value_b, uint32_t seed, std::vector<StepPair>* out) {
  auto opts = synth::random_model_preset("tiny-llama", FRUGAL_SHARED_MODELS_DIR);
  ASSERT_TRUE(opts.ok());
  opts->weight_type = type;
  opts->n_layer = 2;
  if (weight_std > 0) opts->weight_std = weight_std;
  const fs::path path = fs::temp_directory_path() / (std::string("frugal_cuda_pair_") + type + ".gguf");
  ASSERT_TRUE(synth::write_random_model(*opts, path.string()).ok());
  auto model = Model::load(path.string());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  Model& m = **model;
  const auto make_with = [var](const char* value) {
    ScopedEnv env(var, value);
    return make_cuda_backend();
  };
  auto be_a = make_with(value_a);
  auto be_b = make_with(value_b);
  ASSERT_TRUE(be_a.ok()) << be_a.status().to_string();
  ASSERT_TRUE(be_b.ok()) << be_b.status().to_string();
  const int64_t nv = m.config().n_vocab;
  auto kv_a = KvCache::create(m.kv_options(1, 128));
  auto kv_b = KvCache::create(m.kv_options(1, 128));
  ASSERT_TRUE(kv_a.ok() && kv_b.ok());
  const auto prompt = prompt_tokens(nv, 64, seed);
  int32_t pos = 0;
  for (int len : {40, 9, 15}) {
    Batch b;
    for (int i = 0; i < len; ++i, ++pos) b.add(prompt[static_cast<size_t>(pos)], pos, 0, true);
    StepPair st;
    st.len = len;
    st.a.assign(static_cast<size_t>(b.n_logits() * nv), NAN);
    st.b.assign(st.a.size(), NAN);
    ASSERT_TRUE(m.forward(b, *kv_a, **be_a, st.a.data()).ok());
    ASSERT_TRUE(m.forward(b, *kv_b, **be_b, st.b.data()).ok());
    out->push_back(std::move(st));
  }
  fs::remove(path);
}

// Whole forward passes with 9..64-token steps (Q, K, V and gate, up as one tensor-core launch
// each, O, down and the output head alone) against the same model with every such product on
// cuBLAS (Q8_0, Q4_K: dequantized to F16 first, with the same rounding as the kernel's
// conversion; Q4_K_M's Q6_K weights take cuBLAS in both).
TEST(CudaModel, TensorCoreProductsMatchCublasInAForwardPass) {
  SKIP_WITHOUT_GPU();
  for (const char* type : {"F16", "BF16", "Q8_0", "Q4_K_M"}) {
    std::vector<StepPair> steps;
    ASSERT_NO_FATAL_FAILURE(forward_two_backends(type, 0.05, "FRUGAL_CUDA_MMA", "1", "0", 11, &steps));
    for (const StepPair& st : steps) {
      const double err = rel_l2(st.a, std::vector<double>(st.b.begin(), st.b.end()));
      std::printf("%s forward, %d tokens: rel_l2 tensor-core vs cuBLAS products %.2e\n", type, st.len, err);
      // Summation orders differ by ~1e-7 (TensorCoreProductAtLayerShapes), but every product's
      // input is rounded to the 16-bit type first, and a value near a rounding boundary moves by
      // one unit (2^-11 relative for F16, 2^-8 for BF16) on either side: the products' own bounds.
      EXPECT_LT(err, std::string(type) == "BF16" ? 8e-3 : 1.5e-3) << type << ", a step of " << st.len << " tokens";
    }
  }
}

// rms_norm and swiglu writing the 16-bit operands of the next F16/BF16 product themselves (instead
// of a conversion kernel per product input) must change no bit of the logits.
TEST(CudaModel, ProducerWrittenHalfOperandsChangeNoBit) {
  SKIP_WITHOUT_GPU();
  for (const char* type : {"F16", "BF16"}) {
    std::vector<StepPair> steps;
    ASSERT_NO_FATAL_FAILURE(
        forward_two_backends(type, 0, "FRUGAL_CUDA_PRODUCER_HALF", nullptr, "0", 17, &steps));
    for (const StepPair& st : steps) {
      EXPECT_EQ(std::memcmp(st.a.data(), st.b.data(), st.a.size() * sizeof(float)), 0)
          << type << ", " << st.len << " tokens";
    }
  }
}

std::string model_dir() {
  const char* e = std::getenv("FRUGAL_TEST_MODELS");
  return e != nullptr ? e : "";
}

std::vector<TokenId> greedy(Model& m, Backend& be, const std::vector<TokenId>& prompt, int n) {
  auto kv = KvCache::create(m.kv_options(1, static_cast<int>(prompt.size()) + n + 1));
  std::vector<TokenId> out;
  if (!kv.ok()) return out;
  const int64_t nv = m.config().n_vocab;
  std::vector<float> logits(static_cast<size_t>(nv));
  Batch b;
  for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], static_cast<int32_t>(i), 0, i + 1 == prompt.size());
  int32_t pos = static_cast<int32_t>(prompt.size());
  for (int i = 0; i < n; ++i) {
    if (!m.forward(b, *kv, be, logits.data()).ok()) return out;
    TokenId best = 0;
    for (int64_t v = 1; v < nv; ++v) {
      if (logits[static_cast<size_t>(v)] > logits[static_cast<size_t>(best)]) best = static_cast<TokenId>(v);
    }
    out.push_back(best);
    b.clear();
    b.add(best, pos++, 0, true);
  }
  return out;
}

void check_greedy(const std::string& path) {
  if (!fs::exists(path)) GTEST_SKIP() << path << " not present";
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  CpuBackendOptions co;
  co.n_threads = 2;
  auto cpu = make_cpu_backend(co);
  auto gpu = make_cuda_backend();
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  // 7 tokens: below 8 both backends round F16 activations alike (the CPU keeps F32 from 8 on,
  // the GPU's cuBLAS path rounds to F16 past 8).
  const auto prompt = prompt_tokens((*model)->config().n_vocab, 7, 5);
  trace_step("greedy " + path + " on the CPU");
  const auto a = greedy(**model, *cpu, prompt, 48);
  trace_step("greedy " + path + " on the GPU");
  const auto g = greedy(**model, **gpu, prompt, 48);
  ASSERT_EQ(a.size(), 48u);
  int first_diff = -1;
  for (size_t i = 0; i < a.size() && i < g.size(); ++i) {
    if (a[i] != g[i]) {
      first_diff = static_cast<int>(i);
      break;
    }
  }
  std::printf("greedy %s: %s (first difference at %d)\n", path.c_str(), a == g ? "identical" : "DIFFERENT",
              first_diff);
  EXPECT_EQ(a, g);
}

// The device's greedy token per row follows the host rule (greedy_token) on fresh random rows
// with planted ties, NaN, infinities and an all -inf row, at the 8B vocabulary and odd sizes.
TEST(CudaKernels, GreedyTokensMatchHostRule) {
  SKIP_WITHOUT_GPU();
  std::mt19937 gen(test_seed());
  for (int64_t nv : {int64_t{3}, int64_t{1000}, int64_t{1025}, int64_t{128256}}) {
    const int rows = 7;
    std::vector<float> logits(static_cast<size_t>(rows * nv));
    std::normal_distribution<float> nd(0.f, 3.f);
    for (float& x : logits) x = nd(gen);
    std::uniform_int_distribution<int64_t> at(0, nv - 1);
    float* r1 = logits.data() + nv;
    const float top = *std::max_element(r1, r1 + nv);
    r1[at(gen)] = top + 1.f;
    r1[at(gen)] = top + 1.f;  // a tie (or the same id twice)
    logits[static_cast<size_t>(2 * nv + at(gen))] = std::numeric_limits<float>::quiet_NaN();
    logits[static_cast<size_t>(3 * nv + at(gen))] = std::numeric_limits<float>::infinity();
    logits[static_cast<size_t>(3 * nv + at(gen))] = std::numeric_limits<float>::infinity();
    std::fill(logits.begin() + 4 * nv, logits.begin() + 5 * nv, -std::numeric_limits<float>::infinity());
    std::fill(logits.begin() + 5 * nv, logits.begin() + 6 * nv, 0.5f);  // all equal: id 0
    std::vector<int32_t> dev(rows, -1);
    ASSERT_TRUE(cuda::greedy_tokens_on_device(logits.data(), rows, nv, dev.data()).ok());
    for (int r = 0; r < rows; ++r) {
      const std::span<const float> row(logits.data() + r * nv, static_cast<size_t>(nv));
      EXPECT_EQ(dev[static_cast<size_t>(r)], greedy_token(row)) << "vocab " << nv << " row " << r;
    }
  }
}

// forward_greedy on the GPU gives greedy_token of the logits forward() gives on the GPU for the
// same step (two sequences, prefill and two decode steps; GEMV and cuBLAS paths).
TEST(CudaModel, ForwardGreedyMatchesDeviceLogits) {
  SKIP_WITHOUT_GPU();
  const std::string d = model_dir();
  const std::string path = (d.empty() ? std::string(FRUGAL_SOURCE_DIR) + "/models" : d) + "/default.gguf";
  if (!fs::exists(path)) GTEST_SKIP() << path << " not present";
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok());
  Model& m = **model;
  auto gpu = make_cuda_backend();
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  trace_step("forward_greedy");
  const int64_t nv = m.config().n_vocab;
  const auto p0 = prompt_tokens(nv, 9, 3), p1 = prompt_tokens(nv, 12, 4);
  auto kv_a = KvCache::create(m.kv_options(2, 32));
  auto kv_b = KvCache::create(m.kv_options(2, 32));
  ASSERT_TRUE(kv_a.ok() && kv_b.ok());
  for (int step = 0; step < 3; ++step) {
    Batch b;
    if (step == 0) {
      for (size_t i = 0; i < p0.size(); ++i) b.add(p0[i], static_cast<int32_t>(i), 0, i + 1 == p0.size());
      for (size_t i = 0; i < p1.size(); ++i) b.add(p1[i], static_cast<int32_t>(i), 1, i + 1 == p1.size() || i == 3);
    } else {
      b.add(5 + step, static_cast<int32_t>(p0.size()) + step - 1, 0, true);
      b.add(7 + step, static_cast<int32_t>(p1.size()) + step - 1, 1, true);
    }
    const int64_t rows = b.n_logits();
    std::vector<float> logits(static_cast<size_t>(rows * nv));
    std::vector<int32_t> ids(static_cast<size_t>(rows), -1);
    // The backend keeps one device cache: each pass starts its sequences from the same positions,
    // so the second pass of a step overwrites the first's rows with the same values.
    ASSERT_TRUE(m.forward(b, *kv_a, **gpu, logits.data()).ok());
    ASSERT_TRUE(m.forward_greedy(b, *kv_b, **gpu, ids.data()).ok());
    for (int64_t r = 0; r < rows; ++r) {
      const std::span<const float> row(logits.data() + r * nv, static_cast<size_t>(nv));
      EXPECT_EQ(ids[static_cast<size_t>(r)], greedy_token(row)) << "step " << step << " row " << r;
    }
  }
}

TEST(CudaModel, GreedyMatchesCpuStories260K) {
  SKIP_WITHOUT_GPU();
  const std::string d = model_dir();
  check_greedy((d.empty() ? std::string(FRUGAL_SHARED_MODELS_DIR) : d) + "/stories260K.gguf");
}

TEST(CudaModel, GreedyMatchesCpuDefaultModel) {
  SKIP_WITHOUT_GPU();
  const std::string d = model_dir();
  check_greedy((d.empty() ? std::string(FRUGAL_SOURCE_DIR) + "/models" : d) + "/default.gguf");
}

// Two sequences in one batch, decoded together, give the logits each gets alone (ragged batch,
// per-sequence cache rows, batched decode). Both prompts are longer than 8 tokens so that alone and
// batched they take the same prefill path (cuBLAS, weights and activations rounded to F16); a
// 7-token prompt alone goes through the GEMV path, which keeps d*q products of quantized weights
// exact in F32, and then differs from the batched run by F16 weight rounding (2^-12 relative per
// weight, ~1e-4 of the logits: the 1.2e-4 seen on the H200), not by batching. With the paths
// equal, what remains is summation order: 1e-4 is two orders above it.
TEST(CudaModel, BatchedDecodeMatchesSingleSequences) {
  SKIP_WITHOUT_GPU();
  const std::string d = model_dir();
  const std::string path = (d.empty() ? std::string(FRUGAL_SOURCE_DIR) + "/models" : d) + "/default.gguf";
  if (!fs::exists(path)) GTEST_SKIP() << path << " not present";
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok());
  Model& m = **model;
  auto gpu = make_cuda_backend();
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  trace_step("batched decode");
  const int64_t nv = m.config().n_vocab;
  const auto p0 = prompt_tokens(nv, 9, 1), p1 = prompt_tokens(nv, 12, 2);
  std::vector<float> single[2];
  for (int s = 0; s < 2; ++s) {
    const auto& p = s == 0 ? p0 : p1;
    auto kv = KvCache::create(m.kv_options(1, 32));
    ASSERT_TRUE(kv.ok());
    Batch b;
    for (size_t i = 0; i < p.size(); ++i) b.add(p[i], static_cast<int32_t>(i), 0, false);
    std::vector<float> l(static_cast<size_t>(nv));
    ASSERT_TRUE(m.forward(b, *kv, **gpu, l.data()).ok());
    b.clear();
    b.add(5, static_cast<int32_t>(p.size()), 0, true);
    ASSERT_TRUE(m.forward(b, *kv, **gpu, l.data()).ok());
    single[s] = l;
  }
  auto kv = KvCache::create(m.kv_options(2, 32));
  ASSERT_TRUE(kv.ok());
  Batch b;
  for (size_t i = 0; i < p0.size(); ++i) b.add(p0[i], static_cast<int32_t>(i), 0, false);
  for (size_t i = 0; i < p1.size(); ++i) b.add(p1[i], static_cast<int32_t>(i), 1, false);
  std::vector<float> l(static_cast<size_t>(2 * nv));
  ASSERT_TRUE(m.forward(b, *kv, **gpu, l.data()).ok());
  b.clear();
  b.add(5, static_cast<int32_t>(p0.size()), 0, true);
  b.add(5, static_cast<int32_t>(p1.size()), 1, true);
  ASSERT_TRUE(m.forward(b, *kv, **gpu, l.data()).ok());
  for (int s = 0; s < 2; ++s) {
    const std::vector<float> part(l.begin() + s * nv, l.begin() + (s + 1) * nv);
    const std::vector<double> ref(single[s].begin(), single[s].end());
    EXPECT_LT(rel_l2(part, ref), 1e-4) << "sequence " << s;
  }
}

}  // namespace
}  // namespace frugal
