// y[t][r] = dot(W[r], x[t]). The weight rows are cut into blocks that threads claim one by one;
// a block stays in its core's L2 while every activation row streams past it once.
//
// Three paths:
// - native (small batches, decode above all): activations are converted once to the weight type's
//   vec_dot_type (as ggml does), then the type's gemm_tile (batches) or vec_dot (one token, where
//   streaming one weight row at a time measured up to twice as fast) runs over the block;
// - float (batches of kFloatPathMinTokens or more, any type with to_float): each weight block is
//   expanded to F32 once per call, the activations are packed once per call, and a
//   register-tiled F32 kernel (float_gemm.h) does the arithmetic. Expansion costs one conversion
//   per weight element against n FMAs per element, so with enough tokens the F32 kernel's
//   throughput wins over the integer and half-precision kernels; the result is also closer to
//   exact (activations are not rounded to vec_dot_type);
// - dequantize (types without a dot kernel): rows through to_float and float dots.
// Q4_0 and Q8_0 batches of 16 tokens or more take an int8 GEMM instead of the float path where
// the CPU has AVX-512 VNNI (matmul_int8_panels: activations rounded to Q8_0 as for decode, 64
// multiply-adds an instruction against the float kernel's 16).
// Weights repacked at load (WeightLayout, backend/cpu/repack.h) have their own small-batch path
// (Q4_0 in 8-row groups: matmul_q4_0x8) and expand whole groups on the float path. (Streaming 4
// F16 rows at once against an F32 activation row was also tried for decode: 1.8x faster while the
// rows sat in the L3 cache, but 0.75-0.85x end to end on a model read from memory, where one
// sequential stream per thread kept the memory system busier; one row at a time stays.)
#include <algorithm>
#include <cstring>
#include <limits>

#include "frugal/backend/cpu/cpu_backend.h"
#include "frugal/backend/cpu/float_gemm.h"
#include "frugal/backend/cpu/simd_ops.h"
#include "frugal/quant/fluxbin.h"
#include "frugal/quant/simd_kernels.h"
#include "frugal/quant/type_traits.h"

namespace frugal::cpu {
namespace {

// Bytes of weight rows (as the kernel reads them) one block should hold: well inside a 1 MiB L2.
constexpr int64_t kBlockWeightBytes = 256 * 1024;
// Weight rows per block on the float path: each block makes one pass over the packed batch, so
// taller is better until threads run short of blocks (128 measured best on 2048..5632 columns).
constexpr int64_t kFloatBlockRows = 128;
// Multiple of the float kernel's register tile rows (6).
constexpr int kFloatTileRows = 6;
// Row blocks per thread to aim for, so a slow (or preempted) core does not hold up the others.
constexpr int64_t kBlocksPerThread = 8;
// Smallest batches that take the float path: from there on it measured faster than the native
// kernels (e.g. AVX2, one core, 2048x2048: Q4_0 73 vs 52 GFLOP/s at 16 tokens, 87 vs 59 at 512;
// F16 85 vs 41 at 512).
constexpr int64_t kFloatPathMinTokens = 8;
constexpr int64_t kQuantFloatPathMinTokens = 16;

int64_t round_up(int64_t a, int64_t m) { return (a + m - 1) / m * m; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rows per block: a multiple of `tile_rows`, at most `cap_rows`, and small enough that every
// thread gets several blocks.
int64_t plan_block_rows(int64_t rows, int64_t cap_rows, int tile_rows, int n_threads) {
  const int64_t tr = std::max(1, tile_rows);
  int64_t br = std::max<int64_t>(tr, cap_rows / tr * tr);
  if (n_threads > 1) br = std::min(br, round_up(ceil_div(rows, kBlocksPerThread * n_threads), tr));
  return std::max(br, tr);
}

struct NativeJob {
  const TypeTraits* tt;
  VecDotFn vec_dot;  // tt->vec_dot, or a kernel for the activation layout chosen below
  bool tiles;        // run tt->gemm_tile over the batch
  const uint8_t* w;
  size_t w_stride;
  int64_t rows;
  int64_t cols;
  const uint8_t* act;  // [n] rows in vec_dot_type
  size_t act_stride;
  int64_t n;
  float* y;
  const float* bias;
  int64_t br;
};

void native_task(void* ctx, int64_t b, int64_t e, int) {
  const NativeJob& j = *static_cast<const NativeJob*>(ctx);
  const TypeTraits& tt = *j.tt;
  for (int64_t blk = b; blk < e; ++blk) {
    const int64_t r0 = blk * j.br;
    const int64_t r1 = std::min(j.rows, r0 + j.br);
    if (j.tiles) {
      const int tr = std::max(1, tt.tile_rows);
      const int tc = std::max(1, tt.tile_cols);
      // Activation tile outermost: it stays in L1 while the block's weight rows stream from L2.
      for (int64_t c = 0; c < j.n; c += tc) {
        const int nc = static_cast<int>(std::min<int64_t>(tc, j.n - c));
        for (int64_t r = r0; r < r1; r += tr) {
          const int nr = static_cast<int>(std::min<int64_t>(tr, r1 - r));
          tt.gemm_tile(j.cols, j.y + c * j.rows + r, static_cast<size_t>(j.rows), j.w + r * j.w_stride, j.w_stride,
                       nr, j.act + c * j.act_stride, j.act_stride, nc);
        }
      }
    } else {
      for (int64_t c = 0; c < j.n; ++c) {
        const uint8_t* a = j.act + c * j.act_stride;
        float* yc = j.y + c * j.rows;
        for (int64_t r = r0; r < r1; ++r) j.vec_dot(j.cols, yc + r, j.w + r * j.w_stride, a);
      }
    }
    if (j.bias != nullptr) {
      for (int64_t c = 0; c < j.n; ++c) add(j.y + c * j.rows + r0, j.bias + r0, r1 - r0);
    }
  }
}

// Q4_0 prefill (quant/simd_q4_0_gemm.cc): each block of weight rows is packed into 16-row
// panels once per call, then every activation row streams past it.
constexpr int64_t kQ4PanelBlockBytes = 512 * 1024;  // packed rows per block: half of a 1 MiB L2
constexpr int64_t kQ4PanelMaxRows = 128;

struct Q4PanelJob {
  const uint8_t* w;
  size_t w_stride;
  int64_t rows;
  int64_t k;
  const uint8_t* act;  // [n] rows in the Q8 group layout
  size_t act_stride;
  int64_t n;
  float* y;
  const float* bias;
  int64_t br;
  const AlignedBuffer* scratch;  // [thread]: one block of panels (then, for q4_0x8, its rows)
  bool q4_0x8 = false;           // weights in 8-row groups: a block's groups are unpacked first
  bool q8_0 = false;             // Q8_0 rows (else Q4_0)
  size_t panel_bytes = 0;        // offset of the unpacked rows in the scratch
};

void q4_panel_task(void* ctx, int64_t b, int64_t e, int thread) {
  const Q4PanelJob& j = *static_cast<const Q4PanelJob*>(ctx);
  void* panels = j.scratch[thread].data();
  for (int64_t blk = b; blk < e; ++blk) {
    const int64_t r0 = blk * j.br;
    const int64_t r1 = std::min(j.rows, r0 + j.br);
    const uint8_t* rows = j.w + r0 * j.w_stride;
    if (j.q4_0x8) {
      // Blocks start on a group (br is a multiple of 16) and the row count is a multiple of 8.
      uint8_t* unpacked = static_cast<uint8_t*>(panels) + j.panel_bytes;
      quant::fast::unpack_q4_0x8(rows, (r1 - r0) / quant::fast::kQ4x8Rows, j.k, unpacked);
      rows = unpacked;
    }
    if (j.q8_0) {
      quant::fast::pack_q8_0_panels(rows, j.w_stride, r1 - r0, j.k, panels);
      quant::fast::gemm_q8_0_panels(j.k, panels, r1 - r0, j.act, j.act_stride, j.n, j.y + r0,
                                    static_cast<size_t>(j.rows));
    } else {
      quant::fast::pack_q4_0_panels(rows, j.w_stride, r1 - r0, j.k, panels);
      quant::fast::gemm_q4_0_panels(j.k, panels, r1 - r0, j.act, j.act_stride, j.n, j.y + r0,
                                    static_cast<size_t>(j.rows));
    }
    if (j.bias != nullptr) {
      for (int64_t c = 0; c < j.n; ++c) add(j.y + c * j.rows + r0, j.bias + r0, r1 - r0);
    }
  }
}

// Q4_0 in the 8-row group layout (backend/cpu/repack.h), for batches too small for the float
// path: every token's activation row in the Q8 group layout streams past a block of groups.
struct Q4x8Job {
  const uint8_t* w;
  size_t group_bytes;
  int64_t rows;
  int64_t k;
  const uint8_t* act;  // [n] rows in the Q8 group layout
  size_t act_stride;
  int64_t n;
  float* y;
  const float* bias;
  int64_t br;  // a multiple of 8
};

void q4x8_task(void* ctx, int64_t b, int64_t e, int) {
  const Q4x8Job& j = *static_cast<const Q4x8Job*>(ctx);
  for (int64_t blk = b; blk < e; ++blk) {
    const int64_t r0 = blk * j.br;
    const int64_t r1 = std::min(j.rows, r0 + j.br);
    const uint8_t* groups = j.w + (r0 / quant::fast::kQ4x8Rows) * j.group_bytes;
    for (int64_t c = 0; c < j.n; ++c) {
      quant::fast::gemv_q4_0x8(j.k, groups, (r1 - r0) / quant::fast::kQ4x8Rows, j.act + c * j.act_stride,
                               j.y + c * j.rows + r0);
    }
    if (j.bias != nullptr) {
      for (int64_t c = 0; c < j.n; ++c) add(j.y + c * j.rows + r0, j.bias + r0, r1 - r0);
    }
  }
}

struct FloatJob {
  ToFloatFn expand;  // nullptr for F32 weights, which are used in place
  bool q4_0x8;       // weights in the 8-row group layout: expanded a group at a time
  const uint8_t* w;
  size_t w_stride;
  int64_t rows;
  int64_t k;
  const float* packed_b;
  int64_t n;
  float* y;
  const float* bias;
  int64_t br;
  const AlignedBuffer* scratch;  // [thread]: one block of expanded rows
};

void float_task(void* ctx, int64_t b, int64_t e, int thread) {
  const FloatJob& j = *static_cast<const FloatJob*>(ctx);
  for (int64_t blk = b; blk < e; ++blk) {
    FloatGemmBlock g;
    g.r0 = blk * j.br;
    g.r1 = std::min(j.rows, g.r0 + j.br);
    if (j.expand == nullptr) {
      g.a = reinterpret_cast<const float*>(j.w + g.r0 * j.w_stride);
      g.lda = static_cast<int64_t>(j.w_stride / sizeof(float));
    } else {
      auto* a = static_cast<float*>(j.scratch[thread].data());
      if (j.q4_0x8) {
        // Blocks start on a group (block rows are a multiple of 8) and rows are a multiple of 8.
        for (int64_t r = g.r0; r < g.r1; r += quant::fast::kQ4x8Rows) {
          quant::fast::to_float_q4_0x8(j.w + r * j.w_stride, j.k, a + (r - g.r0) * j.k, j.k);
        }
      } else {
        for (int64_t r = g.r0; r < g.r1; ++r) j.expand(j.w + r * j.w_stride, a + (r - g.r0) * j.k, j.k);
      }
      g.a = a;
      g.lda = j.k;
    }
    g.b = j.packed_b;
    g.k = j.k;
    g.n = j.n;
    g.y = j.y;
    g.ldy = j.rows;
    g.bias = j.bias;
    float_gemm_block(g);
  }
}

// Row-invariant batches (set_row_invariant): each weight row against every activation row at once
// with a kernel bitwise equal to the one-token vec_dot, activations rounded as a one-token call
// rounds them.
using VecDotRowsFn = void (*)(int64_t, float*, size_t, const void*, const float*, size_t, int);
struct RowsJob {
  VecDotRowsFn dot_rows;
  const uint8_t* w;
  size_t w_stride;
  int64_t rows;
  int64_t cols;
  const float* act;  // [n][cols] rounded to vec_dot_type and expanded back
  int64_t n;
  float* y;
  const float* bias;
  int64_t br;
};

void rows_task(void* ctx, int64_t b, int64_t e, int) {
  const RowsJob& j = *static_cast<const RowsJob*>(ctx);
  for (int64_t blk = b; blk < e; ++blk) {
    const int64_t r0 = blk * j.br;
    const int64_t r1 = std::min(j.rows, r0 + j.br);
    for (int64_t r = r0; r < r1; ++r) {
      j.dot_rows(j.cols, j.y + r, static_cast<size_t>(j.rows), j.w + r * j.w_stride, j.act,
                 static_cast<size_t>(j.cols), static_cast<int>(j.n));
    }
    if (j.bias != nullptr) {
      for (int64_t c = 0; c < j.n; ++c) add(j.y + c * j.rows + r0, j.bias + r0, r1 - r0);
    }
  }
}

}  // namespace

void CpuBackend::matmul_row_invariant(const WeightTensor& w, const float* x, int64_t n, float* y, const float* bias) {
  const TypeTraits* tt = type_traits(w.type);
  VecDotRowsFn dot_rows = nullptr;
  // Only where the one-token path is that very vec_dot kernel over rows in the file's layout.
  if (tt != nullptr && w.layout == WeightLayout::kRows) {
    const DType vt = tt->vec_dot_type;
    if (tt->vec_dot == quant::fast::vec_dot_f16 && vt == DType::kF16) dot_rows = quant::fast::vec_dot_rows_f16;
    if (tt->vec_dot == quant::fast::vec_dot_f32 && vt == DType::kF32) dot_rows = quant::fast::vec_dot_rows_f32;
    if (tt->vec_dot == quant::fast::vec_dot_bf16 && vt == DType::kBF16) dot_rows = quant::fast::vec_dot_rows_bf16;
  }
  if (dot_rows == nullptr) {
    // Any other type or layout: one one-token product per row (exact by construction).
    for (int64_t t = 0; t < n; ++t) matmul(w, x + t * w.cols, 1, y + t * w.rows, bias);
    return;
  }
  RowsJob j;
  j.dot_rows = dot_rows;
  j.w = static_cast<const uint8_t*>(w.data);
  j.w_stride = w.row_stride;
  j.rows = w.rows;
  j.cols = w.cols;
  j.n = n;
  j.y = y;
  j.bias = bias;
  if (tt->vec_dot_type == DType::kF32) {
    j.act = x;
  } else {
    // The values the one-token kernel reads: rounded to vec_dot_type, expanded back (exactly).
    const TypeTraits* vt = type_traits(tt->vec_dot_type);
    const FromFloatFn from_float = vt->from_float != nullptr ? vt->from_float : vt->from_float_ref;
    const ToFloatFn to_float = vt->to_float != nullptr ? vt->to_float : vt->to_float_ref;
    const auto cols = static_cast<size_t>(w.cols);
    const size_t rounded_bytes = static_cast<size_t>(row_bytes(tt->vec_dot_type, w.cols));
    auto* buf = static_cast<uint8_t*>(act_.ensure(static_cast<size_t>(n) * (cols * sizeof(float) + rounded_bytes)));
    auto* act = reinterpret_cast<float*>(buf);
    uint8_t* rounded = buf + static_cast<size_t>(n) * cols * sizeof(float);
    for (int64_t t = 0; t < n; ++t) {
      from_float(x + t * w.cols, rounded, w.cols);
      to_float(rounded, act + static_cast<size_t>(t) * cols, w.cols);
    }
    j.act = act;
  }
  j.br = plan_block_rows(j.rows, kBlockWeightBytes / static_cast<int64_t>(std::max<size_t>(1, j.w_stride)), 1,
                         pool_.size());
  pool_.dispatch(rows_task, &j, ceil_div(j.rows, j.br), 1);
}

namespace {

// FluxBin by its byte GEMV (quant/fluxbin.h, gemv_bytes). One token: rows split over the threads,
// each computing the per-call column products u = c * x and their bytes for its rows. Several tokens: tokens
// split over the threads. Each output depends on its token and row only, so results do not
// change with the batch (row invariance holds by construction).
void matmul_fluxbin(ThreadPool& pool, const WeightTensor& w, const float* x, int64_t n, float* y, const float* bias) {
  const quant::fluxbin::View v{w.rows, w.cols, w.fluxbin.salient, static_cast<const uint8_t*>(w.data),
                               w.fluxbin.col_scales, w.fluxbin.salient_idx, w.fluxbin.salient_vals};
  auto finish = [&](float* yt, int64_t r0, int64_t r1) {
    if (bias == nullptr) return;
    for (int64_t r = r0; r < r1; ++r) yt[r] += bias[r];
  };
  // The column bytes live in a buffer of each chunk (cols / 2 floats and a few per group, small
  // beside the products they serve); a thread_local one would outlive the call in every
  // pool thread.
  if (n == 1) {
    // One chunk per thread: every chunk computes the column bytes again.
    const int64_t chunk = std::max<int64_t>(16, (w.rows + pool.size() - 1) / pool.size());
    pool.parallel_for(w.rows, chunk, [&](int64_t b, int64_t e, int) {
      std::vector<float> scratch;
      quant::fluxbin::gemv_bytes(v, x, y, b, e, scratch);
      finish(y, b, e);
    });
    return;
  }
  pool.parallel_for(n, 1, [&](int64_t b, int64_t e, int) {
    std::vector<float> scratch;
    for (int64_t t = b; t < e; ++t) {
      quant::fluxbin::gemv_bytes(v, x + t * w.cols, y + t * w.rows, 0, w.rows, scratch);
      finish(y + t * w.rows, 0, w.rows);
    }
  });
}

}  // namespace

void CpuBackend::matmul(const WeightTensor& w, const float* x, int64_t n, float* y, const float* bias) {
  if (n <= 0 || w.rows <= 0) return;
  if (w.scale != 1.f) {
    // A per-tensor scale (NVFP4's global scale): the product of the unscaled blocks, then one
    // pass over the n x rows outputs, which costs little next to the product.
    WeightTensor unscaled = w;
    unscaled.scale = 1.f;
    matmul(unscaled, x, n, y, nullptr);
    const int64_t rows = w.rows;
    const float scale = w.scale;
    pool_.parallel_for(n, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, rows)), [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t) {
        float* yt = y + t * rows;
        for (int64_t r = 0; r < rows; ++r) yt[r] = yt[r] * scale + (bias != nullptr ? bias[r] : 0.f);
      }
    });
    return;
  }
  if (w.type == DType::kFLUXBIN) {
    matmul_fluxbin(pool_, w, x, n, y, bias);
    return;
  }
  if (row_invariant_ && n > 1) {
    matmul_row_invariant(w, x, n, y, bias);
    return;
  }
  const TypeTraits* tt = type_traits(w.type);
  const bool is_float = w.type == DType::kF32 || w.type == DType::kF16 || w.type == DType::kBF16;
  const int64_t min_tokens = is_float ? kFloatPathMinTokens : kQuantFloatPathMinTokens;
  if (w.layout == WeightLayout::kQ4_0x8) {
    matmul_q4_0x8(w, x, n, y, bias);
    return;
  }
  if ((w.type == DType::kQ4_0 || w.type == DType::kQ8_0) && n >= min_tokens && quant::fast::q4_0_panels_are_fast()) {
    matmul_int8_panels(w, x, n, y, bias);
    return;
  }
  if (n >= min_tokens && tt != nullptr && tt->to_float != nullptr) {
    matmul_float(w, tt, x, n, y, bias);
    return;
  }
  const TypeTraits* vt = tt != nullptr ? type_traits(tt->vec_dot_type) : nullptr;
  FromFloatFn from_float = nullptr;
  if (vt != nullptr) from_float = vt->from_float != nullptr ? vt->from_float : vt->from_float_ref;
  if (tt == nullptr || tt->vec_dot == nullptr || (tt->vec_dot_type != DType::kF32 && from_float == nullptr)) {
    matmul_dequant(w, tt, x, n, y, bias);
    return;
  }

  NativeJob j;
  j.tt = tt;
  j.vec_dot = tt->vec_dot;
  j.tiles = tt->gemm_tile != nullptr && n > 1;
  j.w = static_cast<const uint8_t*>(w.data);
  j.w_stride = w.row_stride;
  j.rows = w.rows;
  j.cols = w.cols;
  j.n = n;
  j.y = y;
  j.bias = bias;
  // One-token Q4_0 products: the Q8 group layout lets the wide kernel keep up with memory.
  const bool q4_group = w.type == DType::kQ4_0 && n == 1 && quant::fast::q4_0_q8_group_is_wide();
  if (q4_group) {
    j.vec_dot = quant::fast::vec_dot_q4_0_q8_group;
    j.tiles = false;
    j.act_stride = static_cast<size_t>(quant::fast::q8_group_bytes(w.cols));
    auto* act = static_cast<uint8_t*>(act_.ensure(j.act_stride));
    quant::fast::from_float_q8_group(x, act, w.cols);
    j.act = act;
  } else if (tt->vec_dot_type == DType::kF32) {
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
  j.br = plan_block_rows(j.rows, kBlockWeightBytes / static_cast<int64_t>(std::max<size_t>(1, j.w_stride)),
                         tt->gemm_tile != nullptr ? tt->tile_rows : 1, pool_.size());
  pool_.dispatch(native_task, &j, ceil_div(j.rows, j.br), 1);
}

void CpuBackend::matmul_int8_panels(const WeightTensor& w, const float* x, int64_t n, float* y, const float* bias) {
  Q4PanelJob j;
  j.w = static_cast<const uint8_t*>(w.data);
  j.w_stride = w.row_stride;
  j.rows = w.rows;
  j.k = w.cols;
  j.act_stride = static_cast<size_t>(quant::fast::q8_group_bytes(w.cols));
  auto* act = static_cast<uint8_t*>(act_.ensure(j.act_stride * static_cast<size_t>(n)));
  const int64_t cols = w.cols;
  const size_t stride = j.act_stride;
  pool_.parallel_for(n, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, cols)), [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) quant::fast::from_float_q8_group(x + t * cols, act + t * stride, cols);
  });
  j.act = act;
  j.n = n;
  j.y = y;
  j.bias = bias;
  const int64_t row_bytes_packed = std::max<int64_t>(1, quant::fast::q4_0_panels_bytes(16, w.cols) / 16);
  const int64_t cap = std::clamp<int64_t>(kQ4PanelBlockBytes / row_bytes_packed, 16, kQ4PanelMaxRows);
  j.br = plan_block_rows(w.rows, cap, quant::fast::kQ4PanelRows, pool_.size());
  j.q4_0x8 = w.layout == WeightLayout::kQ4_0x8;
  j.q8_0 = w.type == DType::kQ8_0;
  j.panel_bytes = static_cast<size_t>(quant::fast::q4_0_panels_bytes(j.br, w.cols) + 63) / 64 * 64;
  ensure_thread_scratch(j.panel_bytes + (j.q4_0x8 ? static_cast<size_t>(j.br) * w.row_stride : 0));
  j.scratch = scratch_.data();
  pool_.dispatch(q4_panel_task, &j, ceil_div(j.rows, j.br), 1);
}

void CpuBackend::matmul_q4_0x8(const WeightTensor& w, const float* x, int64_t n, float* y, const float* bias) {
  if (n >= kQuantFloatPathMinTokens) {
    // Prefill: the int8 panels where they run VNNI (AVX-512), else whole groups expanded to floats.
    if (quant::fast::q4_0_panels_are_fast()) {
      matmul_int8_panels(w, x, n, y, bias);
    } else {
      matmul_float(w, type_traits(w.type), x, n, y, bias);
    }
    return;
  }
  Q4x8Job j;
  j.w = static_cast<const uint8_t*>(w.data);
  j.group_bytes = quant::fast::kQ4x8Rows * w.row_stride;
  j.rows = w.rows;
  j.k = w.cols;
  j.act_stride = static_cast<size_t>(quant::fast::q8_group_bytes(w.cols));
  auto* act = static_cast<uint8_t*>(act_.ensure(j.act_stride * static_cast<size_t>(n)));
  for (int64_t t = 0; t < n; ++t) quant::fast::from_float_q8_group(x + t * w.cols, act + t * j.act_stride, w.cols);
  j.act = act;
  j.n = n;
  j.y = y;
  j.bias = bias;
  j.br = plan_block_rows(w.rows, kBlockWeightBytes / static_cast<int64_t>(std::max<size_t>(1, w.row_stride)),
                         quant::fast::kQ4x8Rows, pool_.size());
  pool_.dispatch(q4x8_task, &j, ceil_div(j.rows, j.br), 1);
}

void CpuBackend::matmul_float(const WeightTensor& w, const TypeTraits* tt, const float* x, int64_t n, float* y,
                              const float* bias) {
  const int64_t k = w.cols;
  const int nr = float_gemm_panel_cols();
  const int64_t n_panels = ceil_div(n, nr);
  auto* packed = static_cast<float*>(act_.ensure(static_cast<size_t>(n_panels * k * nr) * sizeof(float)));
  pool_.parallel_for(n_panels, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t p = b; p < e; ++p) {
      float_gemm_pack_b(x, k, p * nr, std::min<int64_t>(nr, n - p * nr), packed + p * k * nr);
    }
  });

  FloatJob j;
  // F32 rows are used in place when their stride keeps floats aligned.
  const bool in_place = w.type == DType::kF32 && w.row_stride % sizeof(float) == 0;
  j.expand = in_place ? nullptr : tt->to_float;
  j.q4_0x8 = w.layout == WeightLayout::kQ4_0x8;
  j.w = static_cast<const uint8_t*>(w.data);
  j.w_stride = w.row_stride;
  j.rows = w.rows;
  j.k = k;
  j.packed_b = packed;
  j.n = n;
  j.y = y;
  j.bias = bias;
  // Groups of 8 rows are expanded whole: blocks of a multiple of 24 rows (8 and the tile's 6).
  j.br = plan_block_rows(w.rows, kFloatBlockRows, j.q4_0x8 ? 4 * kFloatTileRows : kFloatTileRows, pool_.size());
  j.scratch = scratch_.data();
  if (!in_place) ensure_thread_scratch(static_cast<size_t>(j.br * k) * sizeof(float));
  pool_.dispatch(float_task, &j, ceil_div(w.rows, j.br), 1);
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
