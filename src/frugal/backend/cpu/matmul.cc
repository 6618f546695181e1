// y[t][r] = dot(W[r], x[t]). The weight rows are cut into blocks that threads claim one by one;
// a block stays in its core's L2 while every activation row streams past it once, and inside a
// block the quant kernel's gemm_tile (or vec_dot) does the arithmetic.
//
// Two ways to feed the kernels:
// - native: activations converted once to the weight type's vec_dot_type (as ggml does);
// - float: for batches of floats-as-halves weights (F16, BF16), each weight block is expanded to
//   F32 once and multiplied with the F32 activations by the F32 kernel. Expansion costs one
//   conversion per weight element per call, the product costs n FMAs per element, so for n >= 8
//   the F32 kernel's higher throughput wins (F16 x F16 kernels convert inside the inner loop), and
//   the result is closer to exact (activations are not rounded to half precision).
#include <algorithm>
#include <limits>

#include "frugal/backend/cpu/cpu_backend.h"
#include "frugal/backend/cpu/simd_ops.h"
#include "frugal/quant/type_traits.h"

namespace frugal::cpu {
namespace {

// Bytes of weight rows (as the kernel reads them) one block should hold: well inside a 1 MiB L2.
constexpr int64_t kBlockWeightBytes = 256 * 1024;
// Row blocks per thread to aim for, so a slow (or preempted) core does not hold up the others.
constexpr int64_t kBlocksPerThread = 8;
// Smallest batch for which F16/BF16 weights take the float path.
constexpr int64_t kFloatPathMinTokens = 8;

int64_t round_up(int64_t a, int64_t m) { return (a + m - 1) / m * m; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct MatmulJob {
  const TypeTraits* kt;   // kernel type: the weight's, or F32 on the float path
  ToFloatFn expand;       // float path: weight rows to F32; nullptr on the native path
  const uint8_t* w;
  size_t w_stride;
  int64_t rows;
  int64_t cols;
  const uint8_t* act;
  size_t act_stride;
  int64_t n;
  float* y;
  const float* bias;
  int64_t br;  // weight rows per block
  const AlignedBuffer* scratch;  // [thread] float path: br * cols floats
};

// Rows [r0, r1) of W (kw: first row, kstride: bytes between rows) times every activation row.
void matmul_rows(const MatmulJob& j, const uint8_t* kw, size_t kstride, int64_t r0, int64_t r1) {
  const TypeTraits& kt = *j.kt;
  // One activation row (decode): vec_dot streams a weight row at a time, which measured up to
  // twice as fast as gemm_tile with a single column.
  if (kt.gemm_tile != nullptr && j.n > 1) {
    const int tr = std::max(1, kt.tile_rows);
    const int tc = std::max(1, kt.tile_cols);
    // Activation tile outermost: it stays in L1 while the block's weight rows stream from L2.
    for (int64_t c = 0; c < j.n; c += tc) {
      const int nc = static_cast<int>(std::min<int64_t>(tc, j.n - c));
      const uint8_t* a = j.act + c * j.act_stride;
      float* yc = j.y + c * j.rows;
      for (int64_t r = r0; r < r1; r += tr) {
        const int nr = static_cast<int>(std::min<int64_t>(tr, r1 - r));
        kt.gemm_tile(j.cols, yc + r, static_cast<size_t>(j.rows), kw + (r - r0) * kstride, kstride, nr, a,
                     j.act_stride, nc);
      }
    }
  } else {
    for (int64_t c = 0; c < j.n; ++c) {
      const uint8_t* a = j.act + c * j.act_stride;
      float* yc = j.y + c * j.rows;
      for (int64_t r = r0; r < r1; ++r) kt.vec_dot(j.cols, yc + r, kw + (r - r0) * kstride, a);
    }
  }
  if (j.bias != nullptr) {
    for (int64_t c = 0; c < j.n; ++c) add(j.y + c * j.rows + r0, j.bias + r0, r1 - r0);
  }
}

void matmul_task(void* ctx, int64_t b, int64_t e, int thread) {
  const MatmulJob& j = *static_cast<const MatmulJob*>(ctx);
  for (int64_t blk = b; blk < e; ++blk) {
    const int64_t r0 = blk * j.br;
    const int64_t r1 = std::min(j.rows, r0 + j.br);
    if (j.expand != nullptr) {
      auto* f = static_cast<float*>(j.scratch[thread].data());
      for (int64_t r = r0; r < r1; ++r) j.expand(j.w + r * j.w_stride, f + (r - r0) * j.cols, j.cols);
      matmul_rows(j, reinterpret_cast<const uint8_t*>(f), static_cast<size_t>(j.cols) * sizeof(float), r0, r1);
    } else {
      matmul_rows(j, j.w + r0 * j.w_stride, j.w_stride, r0, r1);
    }
  }
}

// Rows per block: a multiple of the kernel's tile rows, within kBlockWeightBytes, and small
// enough that every thread gets several blocks.
int64_t plan_block_rows(int64_t rows, size_t row_bytes, int tile_rows, int n_threads) {
  const int64_t tr = std::max(1, tile_rows);
  int64_t br = std::max<int64_t>(tr, kBlockWeightBytes / std::max<size_t>(1, row_bytes) / tr * tr);
  if (n_threads > 1) br = std::min(br, round_up(ceil_div(rows, kBlocksPerThread * n_threads), tr));
  return std::max(br, tr);
}

}  // namespace

void CpuBackend::matmul(const WeightTensor& w, const float* x, int64_t n, float* y, const float* bias) {
  if (n <= 0 || w.rows <= 0) return;
  const TypeTraits* tt = type_traits(w.type);
  const TypeTraits* vt = tt != nullptr ? type_traits(tt->vec_dot_type) : nullptr;
  FromFloatFn from_float = nullptr;
  if (vt != nullptr) from_float = vt->from_float != nullptr ? vt->from_float : vt->from_float_ref;
  if (tt == nullptr || tt->vec_dot == nullptr || (tt->vec_dot_type != DType::kF32 && from_float == nullptr)) {
    matmul_dequant(w, tt, x, n, y, bias);
    return;
  }

  MatmulJob j;
  j.kt = tt;
  j.expand = nullptr;
  j.w = static_cast<const uint8_t*>(w.data);
  j.w_stride = w.row_stride;
  j.rows = w.rows;
  j.cols = w.cols;
  j.n = n;
  j.y = y;
  j.bias = bias;
  j.scratch = scratch_.data();

  const TypeTraits* f32 = type_traits(DType::kF32);
  const bool float_path = n >= kFloatPathMinTokens && (w.type == DType::kF16 || w.type == DType::kBF16) &&
                          f32 != nullptr && f32->vec_dot != nullptr && tt->to_float != nullptr;
  if (float_path || tt->vec_dot_type == DType::kF32) {
    j.act = reinterpret_cast<const uint8_t*>(x);
    j.act_stride = static_cast<size_t>(w.cols) * sizeof(float);
  } else {
    j.act_stride = static_cast<size_t>(row_bytes(tt->vec_dot_type, w.cols));
    auto* act = static_cast<uint8_t*>(act_.ensure(j.act_stride * static_cast<size_t>(n)));
    const int64_t cols = w.cols;
    const size_t stride = j.act_stride;
    pool_.parallel_for(n, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, cols)), [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t) from_float(x + t * cols, act + t * stride, cols);
    });
    j.act = act;
  }
  if (float_path) {
    j.kt = f32;
    j.expand = tt->to_float;
    j.br = plan_block_rows(j.rows, static_cast<size_t>(w.cols) * sizeof(float), f32->tile_rows, pool_.size());
    ensure_thread_scratch(static_cast<size_t>(j.br * w.cols) * sizeof(float));
  } else {
    j.br = plan_block_rows(j.rows, j.w_stride, tt->tile_rows, pool_.size());
  }
  pool_.dispatch(matmul_task, &j, ceil_div(j.rows, j.br), 1);
}

void CpuBackend::matmul_dequant(const WeightTensor& w, const TypeTraits* tt, const float* x, int64_t n,
                                float* y, const float* bias) {
  ToFloatFn to_float = nullptr;
  if (tt != nullptr) to_float = tt->to_float != nullptr ? tt->to_float : tt->to_float_ref;
  const int64_t cols = w.cols;
  const int64_t rows = w.rows;
  if (to_float == nullptr && w.type != DType::kF32) {
    // No way to read this type: make the result unmistakably wrong rather than stale.
    std::fill(y, y + n * rows, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  ensure_thread_scratch(static_cast<size_t>(cols) * sizeof(float));
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t chunk = std::max<int64_t>(1, ceil_div(rows, kBlocksPerThread * pool_.size()));
  pool_.parallel_for(rows, chunk, [&](int64_t b, int64_t e, int thread) {
    float* row = thread_scratch(thread);
    for (int64_t r = b; r < e; ++r) {
      const uint8_t* src = base + static_cast<size_t>(r) * w.row_stride;
      const float* wr = row;
      if (w.type == DType::kF32) {
        wr = reinterpret_cast<const float*>(src);
      } else {
        to_float(src, row, cols);
      }
      for (int64_t t = 0; t < n; ++t) {
        y[t * rows + r] = dot_f32(wr, x + t * cols, cols) + (bias != nullptr ? bias[r] : 0.f);
      }
    }
  });
}

}  // namespace frugal::cpu
