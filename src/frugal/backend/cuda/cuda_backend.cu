// CudaBackend: uploads a Model once, keeps the KV cache and every activation on the device, and
// runs Model::forward's whole step there (Backend::forward_model). Per step the host sends one
// packet of token ids, positions, sequence ids, cache slots and logit rows, launches the step (a
// replayed CUDA graph for steps of up to kGraphMaxTokens tokens), and copies the logits back.
#include "frugal/backend/cuda/cuda_backend.h"

#include <cuda_bf16.h>
#include <execinfo.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <tuple>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <vector>

#include "frugal/backend/cuda/common.cuh"
#include "frugal/backend/cuda/fluxbin.cuh"
#include "frugal/backend/cuda/gemv_q8.cuh"
#include "frugal/backend/cuda/round_stats.cuh"
#include "frugal/core/half.h"
#include "frugal/model/model.h"
#include "frugal/quant/type_traits.h"

namespace frugal {
namespace cuda {
namespace {

constexpr int kGemvMaxTokens = 8;    // larger batches: the tensor-core kernel or cuBLAS
constexpr int kCpuFloatPathMinTokens = 8;  // backend/cpu/matmul.cc: kFloatPathMinTokens
// Q4_K products from this many tokens on (up to 8) take the tensor-core kernel instead of the
// GEMV; 9: none. With one weight row per warp the kernel won from 7 tokens (H100, 8B Q4_K_M, tok/s
// of 5..8 sequences, GEMV against the kernel: 7: 686 / 744, 8: 705 / 825); with two rows per warp
// (q8_rows_per_warp) the GEMV wins at every count (H100, same file, 2026-12-06: 7: 927.4 / 747.4,
// 8: 967.0 / 830.0; from 5 tokens the kernel gave 573.8 / 663.4 at 5 / 6 against 839.2 / 889.9).
// FRUGAL_CUDA_MMA_MIN_TOKENS=1..8 brings the kernel back for comparison.
constexpr int kQ4KTensorCoreMinTokens = 9;
constexpr int kGraphMaxTokens = 64;  // steps up to this size are captured as graphs
// A row-invariant step (Batch::row_invariant: speculative verification) runs in passes of at most
// this many tokens, each taking the kernels of a one-token step: GEMVs (below 8 tokens, where
// F16/BF16 inputs are rounded as for one token) and split attention with one token per block and
// the key chunks of a one-token step. Their sums per token do not depend on the other tokens.
constexpr int kRowInvariantTokens = kCpuFloatPathMinTokens - 1;
constexpr size_t kCublasWorkspace = 32u << 20;

// Host-side conversion for types without a device decoder: F16 rows when the row length allows
// 16-byte units, else F32.
Status convert_on_host(const WeightTensor& w, const std::string& name, std::vector<uint8_t>* out, DType* type) {
  const TypeTraits* tt = type_traits(w.type);
  if (tt == nullptr || tt->to_float == nullptr) {
    return fail(ErrorCode::kNotSupported, "cuda: tensor '", name, "' has type ", std::string(dtype_name(w.type)),
                " with no conversion");
  }
  if (w.cols % 4 != 0) {
    return fail(ErrorCode::kNotSupported, "cuda: tensor '", name, "' has rows of ", w.cols,
                " elements (need a multiple of 4)");
  }
  const bool half = w.cols % 8 == 0;
  *type = half ? DType::kF16 : DType::kF32;
  const size_t esz = half ? 2 : 4;
  out->resize(static_cast<size_t>(w.rows * w.cols) * esz);
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    tt->to_float(static_cast<const uint8_t*>(w.data) + r * w.row_stride, row.data(), w.cols);
    // A per-tensor scale (NVFP4's global scale) is folded into the converted rows.
    if (w.scale != 1.f) {
      for (float& v : row) v *= w.scale;
    }
    if (half) {
      uint16_t* o = reinterpret_cast<uint16_t*>(out->data()) + r * w.cols;
      for (int64_t c = 0; c < w.cols; ++c) o[c] = f32_to_fp16(row[static_cast<size_t>(c)]);
    } else {
      std::memcpy(out->data() + static_cast<size_t>(r * w.cols) * 4, row.data(), static_cast<size_t>(w.cols) * 4);
    }
  }
  return ok_status();
}

bool needs_host_conversion(const WeightTensor& w) {
  // Types without a device decoder are converted here; so is a per-tensor scale on any type but
  // NVFP4 (whose decoders apply its global scale), folded in by the conversion.
  if (!device_type_supported(w.type) || (w.scale != 1.f && w.type != DType::kNVFP4)) return true;
  if (const SplitLayout lay = split_layout(w.type); lay.block_elems != 0) {
    // Split at upload, which reads whole rows of contiguous blocks.
    return w.cols % lay.block_elems != 0 ||
           static_cast<int64_t>(w.row_stride) != w.cols / lay.block_elems * lay.block_bytes;
  }
  switch (w.type) {
    case DType::kF32: return w.cols % 4 != 0;
    case DType::kF16: case DType::kBF16: return w.cols % 8 != 0 || w.row_stride % 16 != 0;
    case DType::kQ8_0: case DType::kQ4_0: return w.cols % 32 != 0;
    case DType::kQ4_K: return w.cols % 256 != 0 || w.row_stride % 16 != 0;
    case DType::kQ6_K:  // padded at upload, which reads whole rows of contiguous blocks
      return w.cols % 256 != 0 || static_cast<int64_t>(w.row_stride) != w.cols / 256 * kQ6KBlockBytes;
    case DType::kFLUXBIN: return false;  // upload_fluxbin checks the shape and names what is wrong
    default: return w.cols % 256 != 0 || w.row_stride % 2 != 0;
  }
}

// Device bytes a weight takes once uploaded (host-converted types become F16 or F32 rows), and
// the F16 scratch its cuBLAS path needs when it is dequantized per product.
uint64_t device_bytes(const WeightTensor& w, uint64_t* dequant_halves) {
  if (w.data == nullptr || w.rows == 0) return 0;
  if (needs_host_conversion(w)) {
    return static_cast<uint64_t>(w.rows) * w.cols * (w.cols % 8 == 0 ? 2 : 4);
  }
  if (w.type != DType::kF32 && w.type != DType::kF16 && w.type != DType::kBF16) {
    *dequant_halves = std::max<uint64_t>(*dequant_halves, static_cast<uint64_t>(w.rows) * w.cols);
  }
  if (w.type == DType::kFLUXBIN) return fluxbin_device_bytes(w.rows, w.cols, w.fluxbin.salient);
  if (w.type == DType::kQ6_K) {  // padded blocks (common.cuh)
    return static_cast<uint64_t>(w.rows) * (w.cols / 256) * kQ6KDeviceBlockBytes;
  }
  if (const SplitLayout lay = split_layout(w.type); lay.block_elems != 0) {  // headers padded
    return static_cast<uint64_t>(w.rows) * (w.cols / lay.block_elems) *
           (lay.block_bytes - lay.header_bytes + lay.header_device_bytes);
  }
  return static_cast<uint64_t>(w.rows) * w.row_stride;
}

std::string gib(uint64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GiB", static_cast<double>(bytes) / (1ull << 30));
  return b;
}

// Refuses, before anything is allocated, what cannot fit: `need` bytes against the device's free
// memory less a reserve for the CUDA context growth, cuBLAS workspaces and graphs.
Status check_fits(uint64_t need, const std::string& what) {
  constexpr uint64_t kReserve = 512ull << 20;
  size_t free_b = 0, total_b = 0;
  FRUGAL_CUDA(cudaMemGetInfo(&free_b, &total_b));
  if (need + kReserve > free_b) {
    return fail(ErrorCode::kOverBudget, "cuda: ", what, " needs ", gib(need), " of GPU memory (+", gib(kReserve),
                " reserve); ", gib(free_b), " free of ", gib(total_b),
                ". Use a smaller model, context (-c) or parallel count, or --device cpu");
  }
  return ok_status();
}

}  // namespace

int tensor_core_min_tokens(DType weight) {
  // FRUGAL_CUDA_MMA_MIN_TOKENS=1..9 sets it for Q8_0 and Q4_K alike (9: no product of 8 tokens or
  // fewer leaves the GEMV); Q8_0's GEMV is the faster at every count up to 8.
  static const int forced = [] {
    const char* e = std::getenv("FRUGAL_CUDA_MMA_MIN_TOKENS");
    const int v = e != nullptr ? std::atoi(e) : 0;
    return v >= 1 && v <= kGemvMaxTokens + 1 ? v : 0;
  }();
  if (weight != DType::kQ8_0 && weight != DType::kQ4_K) return kGemvMaxTokens + 1;
  if (forced != 0) return forced;
  return weight == DType::kQ4_K ? kQ4KTensorCoreMinTokens : kGemvMaxTokens + 1;
}

bool gemv_runs_product(DType weight, int64_t n) {
  if (n > kGemvMaxTokens) return false;
  const char* mma = std::getenv("FRUGAL_CUDA_MMA");
  const bool off = mma != nullptr && std::strcmp(mma, "0") == 0;
  return n < tensor_core_min_tokens(weight) || off || !gemm_mma_built_for_device();
}

namespace {

// Uploads weights and runs products; shared by the backend and the test hooks.
class Gemm {
 public:
  Status init(cudaStream_t s) {
    stream_ = s;
    FRUGAL_RETURN_IF_ERROR(load_cublas().status());
    FRUGAL_CUBLAS(cublas().create(&handle_));
    FRUGAL_CUBLAS(cublas().set_stream(handle_, s));
    FRUGAL_CUDA(cudaMalloc(&workspace_, kCublasWorkspace));
    // A fixed workspace lets cuBLAS run inside graph capture without allocating.
    FRUGAL_CUBLAS(cublas().set_workspace(handle_, workspace_, kCublasWorkspace));
    const char* q8 = std::getenv("FRUGAL_GEMV_Q8");
    q8_ = q8 == nullptr || std::strcmp(q8, "0") != 0;
    const char* mma = std::getenv("FRUGAL_CUDA_MMA");
    mma_mode_ = mma == nullptr ? -1 : (std::strcmp(mma, "0") == 0 ? 0 : (std::strcmp(mma, "1") == 0 ? 1 : -1));
    mma_built_ = gemm_mma_built_for_device();
    const char* ph = std::getenv("FRUGAL_CUDA_PRODUCER_HALF");
    producer_half_ = ph == nullptr || std::strcmp(ph, "0") != 0;
    int dev = 0;
    FRUGAL_CUDA(cudaGetDevice(&dev));
    FRUGAL_CUDA(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, dev));
    return ok_status();
  }
  ~Gemm() {
    if (handle_ != nullptr) cublas().destroy(handle_);
    cudaFree(workspace_);
    cudaFree(dq_);
    cudaFree(act_);
    cudaFree(qact_);
  }

  Status upload(const WeightTensor& w, const std::string& name, DeviceArena& arena, DevWeight* out,
                HostConsumed consumed = {}) {
    std::vector<uint8_t> conv;
    DType type = w.type;
    const void* src = w.data;
    size_t stride = w.row_stride;
    if (needs_host_conversion(w)) {
      FRUGAL_RETURN_IF_ERROR(convert_on_host(w, name, &conv, &type));
      src = conv.data();
      stride = static_cast<size_t>(w.cols) * (type == DType::kF16 ? 2 : 4);
    }
    void* mem = nullptr;
    uint64_t bytes = 0;
    // A converted copy is our own heap memory: nothing to give back slice by slice.
    Status st = type == DType::kFLUXBIN
                    ? upload_fluxbin(w, out, &mem, &bytes, stream_, consumed)
                    : upload_weight(type, w.rows, w.cols, stride, src, out, &mem, &bytes, stream_,
                                    src == w.data ? consumed : HostConsumed{});
    if (!st.ok()) return st.with_context("tensor '" + name + "'");
    // A converted copy has its per-tensor scale folded in; NVFP4's decoders apply it.
    if (src == w.data) out->scale = w.scale;
    arena.adopt(mem, bytes);
    if (type != DType::kF32 && type != DType::kF16 && type != DType::kBF16) {
      dq_need_ = std::max<size_t>(dq_need_, static_cast<size_t>(w.rows * w.cols));
    }
    act_need_ = std::max<size_t>(act_need_, static_cast<size_t>(w.cols));
    return ok_status();
  }

  // Scratch for the cuBLAS path: dequantized weights and 2-byte activations for n tokens.
  Status reserve(int64_t n_tokens) {
    if (dq_need_ > dq_cap_) {
      cudaFree(dq_);
      dq_ = nullptr;
      FRUGAL_CUDA(cudaMalloc(&dq_, dq_need_ * sizeof(__half)));
      dq_cap_ = dq_need_;
    }
    const size_t qbytes = q8_activation_bytes(kGemvMaxTokens, static_cast<int64_t>(act_need_));
    if (qbytes > qact_cap_) {
      cudaFree(qact_);
      qact_ = nullptr;
      FRUGAL_CUDA(cudaMalloc(&qact_, qbytes));
      qact_cap_ = qbytes;
    }
    const size_t act = act_need_ * static_cast<size_t>(n_tokens);
    if (act > act_cap_) {
      cudaFree(act_);
      act_ = nullptr;
      FRUGAL_CUDA(cudaMalloc(&act_, act * 4));
      act_cap_ = act;
    }
    return ok_status();
  }

  // Whether the product of `w` at n tokens runs as a GEMV: up to 8 tokens, except that Q4_K weights
  // take the tensor-core kernel from tensor_core_min_tokens on.
  bool gemv_takes(const DevWeight& w, int n) const {
    if (n > kGemvMaxTokens) return false;
    if (row_invariant_) return true;
    MmaPart p;
    return n < tensor_core_min_tokens(w.type) || !mma_part(w, n, &p);
  }

  // y [n][rows] (+)= x [n][cols] W^T (+ bias). Enqueued only; errors land in `err_`.
  void run(const DevWeight& w, const float* x, int n, float* y, const float* bias, bool acc) {
    if (gemv_takes(w, n)) {
      if (const QActView* qx = q8_input(w.type, x, n, w.cols)) {
        GemvSet set;
        set.n = 1;
        set.w0 = w;
        set.y0 = y;
        set.b0 = bias;
        launch_gemv_q8_set(set, *qx, n, acc, stream_);
        return;
      }
      launch_gemv(w, gemv_input(w.type, x, n, w.cols), n, y, bias, acc, stream_);
      return;
    }
    cublas_run(w, x, n, y, bias, acc);
  }

  // Several weights of one input (y_i = x W_i^T + b_i): one GEMV launch when they share a type,
  // or when the 8-bit GEMV takes their types together (Q4_K_M's Q4_K Q and K with a Q6_K V), else
  // one product each. FRUGAL_CUDA_FUSE=0 turns the merged launch off, FRUGAL_CUDA_FUSE_MIXED=0 the
  // two-type one only.
  void run_set(const DevWeight* const* w, float* const* y, const float* const* bias, int count, const float* x,
               int n) {
    bool same = fuse_ && count <= 3;
    for (int i = 0; i < count && same; ++i) same = gemv_takes(*w[i], n);
    bool one_type = true;
    for (int i = 1; i < count && same; ++i) {
      same = w[i]->cols == w[0]->cols;
      one_type = one_type && w[i]->type == w[0]->type;
    }
    if (same && !one_type) {
      DType types[3] = {};
      for (int i = 0; i < count; ++i) types[i] = w[i]->type;
      same = fuse_mixed_ && q8_ && gemv_q8_set_supported(types, count);
    }
    if (!same && fuse_ && !row_invariant_ && count <= kMmaMaxParts && mma_set(w, y, bias, count, x, n)) return;
    if (!same) {
      for (int i = 0; i < count; ++i) run(*w[i], x, n, y[i], bias[i], false);
      return;
    }
    GemvSet set;
    set.n = count;
    set.w0 = *w[0];
    set.y0 = y[0];
    set.b0 = bias[0];
    if (count > 1) {
      set.w1 = *w[1];
      set.y1 = y[1];
      set.b1 = bias[1];
    }
    if (count > 2) {
      set.w2 = *w[2];
      set.y2 = y[2];
      set.b2 = bias[2];
    }
    if (const QActView* qx = q8_input(w[0]->type, x, n, w[0]->cols)) {
      launch_gemv_q8_set(set, *qx, n, false, stream_);
      return;
    }
    if (!one_type) {  // only the 8-bit GEMV takes two types (q8_input has recorded why it could not)
      for (int i = 0; i < count; ++i) run(*w[i], x, n, y[i], bias[i], false);
      return;
    }
    launch_gemv_set(set, gemv_input(w[0]->type, x, n, w[0]->cols), n, false, stream_);
  }
  void set_fuse(bool on) { fuse_ = on; }
  // Row-invariant steps (at most kRowInvariantTokens tokens): every product a GEMV, which computes
  // each token's row as a one-token product does (the tensor-core kernel's sums differ).
  void set_row_invariant(bool on) { row_invariant_ = on; }
  // Every product the tensor-core kernel can take on it, or none (on only where the device runs it).
  void set_mma(bool on) { mma_mode_ = on ? 1 : 0; }
  bool mma_on() const { return mma_mode_ != 0 && mma_built_; }
  void set_fuse_mixed(bool on) { fuse_mixed_ = on; }
  // FRUGAL_GEMV_Q8=0: quantized weights take the float-activation GEMV (for comparison).
  void set_q8(bool on) { q8_ = on; }

 private:
  // The step's activations x [n][cols] quantized for the integer GEMV of `type` (once per input:
  // Q, K and V, or gate and up, share it), or null when that type runs the float GEMV.
  const QActView* q8_input(DType type, const float* x, int n, int64_t cols) {
    const QActKind kind = q8_ && n <= kGemvMaxTokens ? q8_activation_kind(type) : QActKind::kNone;
    if (kind == QActKind::kNone) return nullptr;
    if (qact_ == nullptr || q8_activation_bytes(n, cols) > qact_cap_) {
      set_error(cat("cuda: 8-bit activation scratch holds ", static_cast<uint64_t>(qact_cap_), " bytes, ", n, " x ",
                    cols, " needs ", static_cast<uint64_t>(q8_activation_bytes(n, cols)),
                    " (Gemm::reserve not called after upload)"));
      return nullptr;
    }
    if (qsrc_ != x || qkind_ != kind || qn_ != n || qview_.cols != cols) {
      qview_ = launch_quantize_activations(kind, x, n, cols, qact_, stream_);
      qsrc_ = x;
      qkind_ = kind;
      qn_ = n;
    }
    return &qview_;
  }

 public:
  // For a producer that quantizes its own output (rms_norm, swiglu) for the integer GEMV of these
  // weights at n tokens: where to write and in which blocks, or null when they do not all take
  // the same 8-bit activations. The view then counts as the quantized copy of x (until new_input).
  const QActView* prequantize(std::initializer_list<const DevWeight*> ws, const float* x, int n, int64_t cols,
                              QActKind* kind) {
    QActKind k = QActKind::kNone;
    for (const DevWeight* w : ws) {
      const QActKind wk = q8_ && gemv_takes(*w, n) ? q8_activation_kind(w->type) : QActKind::kNone;
      if (wk == QActKind::kNone || (k != QActKind::kNone && wk != k)) return nullptr;
      k = wk;
    }
    if (k == QActKind::kNone || qact_ == nullptr || q8_activation_bytes(n, cols) > qact_cap_) return nullptr;
    qview_ = q8_activation_view(qact_, n, cols);
    qsrc_ = x;
    qkind_ = k;
    qn_ = n;
    *kind = k;
    return &qview_;
  }

  // The rounding gemv_input would apply to the input of these weights' GEMV at n tokens (1: F16,
  // 2: BF16, 0: none), when all of them agree; a producer that writes its output rounded so lets
  // the product skip its rounding kernel (mark_rounded).
  static int input_rounding(std::initializer_list<const DevWeight*> ws, int n) {
    if (n >= kCpuFloatPathMinTokens || n > kGemvMaxTokens) return 0;
    int mode = -1;
    for (const DevWeight* w : ws) {
      const int m = w->type == DType::kF16 ? 1 : (w->type == DType::kBF16 ? 2 : 0);
      if (mode >= 0 && m != mode) return 0;
      mode = m;
    }
    return mode < 0 ? 0 : mode;
  }
  // x (until the next new_input) already holds values rounded as input_rounding said.
  void mark_rounded(const float* x, int mode) {
    pre_src_ = mode != 0 ? x : nullptr;
    pre_mode_ = mode;
  }

  // For a producer of x [n][cols] (rms_norm, swiglu) whose products take 16-bit operands (F16 or
  // BF16 weights, more than 8 tokens): where to write them as well, and whether as BF16, or null.
  // The copy then counts as converted (half_input skips its kernel) until new_input.
  // FRUGAL_CUDA_PRODUCER_HALF=0: the products convert x themselves.
  void* prehalf(std::initializer_list<const DevWeight*> ws, const float* x, int n, int64_t cols, bool* bf16) {
    if (!producer_half_ || n <= kGemvMaxTokens || n < kCpuFloatPathMinTokens) return nullptr;
    DType t = DType::kF32;
    for (const DevWeight* w : ws) {
      if (w->type != DType::kF16 && w->type != DType::kBF16) return nullptr;
      if (t != DType::kF32 && w->type != t) return nullptr;
      t = w->type;
    }
    const int64_t xn = static_cast<int64_t>(n) * cols;
    if (act_ == nullptr || static_cast<size_t>(xn) > act_cap_) return nullptr;
    rounded_src_ = nullptr;  // act_ is about to hold 2-byte operands
    half_src_ = x;
    half_n_ = xn;
    half_bf16_ = t == DType::kBF16;
    *bf16 = half_bf16_;
    return act_;
  }


 private:
  const float* gemv_input(DType type, const float* x, int n, int64_t cols) {
    {
      const float* xin = x;
      if ((type == DType::kF16 || type == DType::kBF16) && n < kCpuFloatPathMinTokens) {
        if (x == pre_src_ && pre_mode_ == (type == DType::kBF16 ? 2 : 1)) return x;
        // Below 8 tokens the CPU backend converts activations to the weight's half type before
        // its dot products (from 8 on it keeps them in F32); doing the same keeps greedy
        // decoding token-identical.
        const int64_t xn = static_cast<int64_t>(n) * cols;
        if (act_ == nullptr || static_cast<size_t>(xn) > act_cap_) {
          // reserve() was not called for this many tokens: writing act_ would run past it.
          set_error(cat("cuda: activation scratch holds ", static_cast<uint64_t>(act_cap_), " floats, ", n, " x ",
                        cols, " needed (Gemm::reserve not called for this batch)"));
          return x;
        }
        if (rounded_src_ != x || rounded_type_ != type || rounded_n_ != xn) {
          launch_round(x, xn, static_cast<float*>(act_), type == DType::kBF16, stream_);
          half_src_ = nullptr;  // act_ now holds rounded floats
          rounded_src_ = x;
          rounded_type_ = type;
          rounded_n_ = xn;
        }
        xin = static_cast<const float*>(act_);
      }
      return xin;
    }
  }

  // x [n][cols] as 2-byte operands in act_, converted once per input: Q, K and V (gate and up)
  // read the same input (a 64-sequence F16 step on the H200 ran 224 conversions of ~4.5 us, 129 so).
  void half_input(const float* x, int64_t xn, bool bf16) {
    if (half_src_ == x && half_n_ == xn && half_bf16_ == bf16) return;
    if (bf16) {
      launch_to_bf16(x, xn, act_, stream_);
    } else {
      launch_to_half(x, xn, static_cast<__half*>(act_), stream_);
    }
    half_src_ = x;
    half_n_ = xn;
    half_bf16_ = bf16;
  }

  // The tensor-core product (gemm_mma.cu) for `w` at n tokens, or false. By default Q8_0 and Q4_K
  // weights only, read as they are (against dequantizing the whole weight to F16 for cuBLAS); F16,
  // BF16 and the dequantized types with FRUGAL_CUDA_MMA=1: in 16-, 32- and 64-sequence F16 decode
  // on an H100 it did not beat cuBLAS (docs/benchmarks.md, 2026-12-06). FRUGAL_CUDA_MMA=0: none.
  bool mma_part(const DevWeight& w, int n, MmaPart* p) const {
    if (mma_mode_ == 0 || !mma_built_ || n > kMmaMaxTokens) return false;
    if (n < tensor_core_min_tokens(w.type)) return false;
    p->rows = w.rows;
    p->type = w.type;
    if (reads_quantized(w.type)) {
      p->w = w.data;
      p->scales = w.type == DType::kQ8_0 ? w.scales : nullptr;
      p->ld = w.row_stride;
    } else if (mma_mode_ != 1 || w.type == DType::kF32) {
      return false;
    } else if (w.type == DType::kF16 || w.type == DType::kBF16) {
      p->w = w.data;
      p->ld = w.row_stride / 2;
    } else {
      p->type = DType::kF16;
      p->w = dq_;  // dequantized there first (cublas_run)
      p->ld = w.cols;
    }
    return p->w != nullptr && gemm_mma_fits(*p, w.cols);
  }
  // Formats the tensor-core kernel reads in their device layout.
  static bool reads_quantized(DType t) { return t == DType::kQ8_0 || t == DType::kQ4_K; }

  // Q, K and V (gate and up) of one input as one tensor-core launch when it takes them all (one
  // type: F16, BF16 or Q8_0); false leaves them to the caller.
  bool mma_set(const DevWeight* const* w, float* const* y, const float* const* bias, int count, const float* x, int n) {
    const DType t = w[0]->type;
    if (t != DType::kF16 && t != DType::kBF16 && !reads_quantized(t)) return false;
    MmaPart parts[kMmaMaxParts];
    for (int i = 0; i < count; ++i) {
      if (w[i]->type != t || w[i]->cols != w[0]->cols || !mma_part(*w[i], n, &parts[i])) return false;
      parts[i].y = y[i];
      parts[i].bias = bias[i];
    }
    const int64_t xn = static_cast<int64_t>(n) * w[0]->cols;
    if (act_ == nullptr || static_cast<size_t>(xn) > act_cap_) return false;  // cublas_run says why
    rounded_src_ = nullptr;  // act_ is about to hold 2-byte operands
    half_input(x, xn, t == DType::kBF16);
    launch_gemm_mma(parts, count, act_, n, w[0]->cols, t == DType::kBF16, false, true, sm_count_, stream_);
    return true;
  }

  void cublas_run(const DevWeight& w, const float* x, int n, float* y, const float* bias, bool acc) {
    rounded_src_ = nullptr;  // act_ is about to hold 2-byte operands
    const float alpha = 1.f, beta = acc ? 1.f : 0.f;
    const void* a = w.data;
    const void* b = x;
    cudaDataType at = CUDA_R_32F, bt = CUDA_R_32F;
    int64_t lda = w.row_stride / 4;
    const int64_t xn = static_cast<int64_t>(n) * w.cols;
    // Scratch checks before anything is enqueued: the dequantized weight needs rows x cols halves
    // in dq_, the 2-byte activations n x cols in act_. Without them a batch larger than the one
    // reserve() saw, or a product before reserve(), wrote past the scratch (or to null) and
    // surfaced, if at all, as a fault in a later kernel or in cuBLAS.
    const bool quantized = w.type != DType::kF32 && w.type != DType::kF16 && w.type != DType::kBF16;
    if (quantized && (dq_ == nullptr || static_cast<size_t>(w.rows * w.cols) > dq_cap_)) {
      set_error(cat("cuda: dequantization scratch holds ", static_cast<uint64_t>(dq_cap_), " halves, the ",
                    w.rows, " x ", w.cols, " weight needs ", w.rows * w.cols, " (Gemm::reserve not called after upload)"));
      return;
    }
    if (w.type != DType::kF32 && (act_ == nullptr || static_cast<size_t>(xn) > act_cap_)) {
      set_error(cat("cuda: activation scratch holds ", static_cast<uint64_t>(act_cap_), " floats, ", n, " x ", w.cols,
                    " needed (Gemm::reserve not called for this batch)"));
      return;
    }
    if (w.rows > INT32_MAX || w.cols > INT32_MAX || lda > INT32_MAX) {
      set_error(cat("cuda: cublasGemmEx: weight ", w.rows, " x ", w.cols, " exceeds int dimensions"));
      return;
    }
    if (MmaPart p; reads_quantized(w.type) && mma_part(w, n, &p)) {
      // Codes and scales as they are: no F16 copy of the weight.
      p.y = y;
      p.bias = bias;
      half_input(x, xn, false);
      launch_gemm_mma(&p, 1, act_, n, w.cols, false, acc, true, sm_count_, stream_);
      return;
    }
    switch (w.type) {
      case DType::kF32:
        break;
      case DType::kF16:
        at = bt = CUDA_R_16F;
        lda = w.row_stride / 2;
        half_input(x, xn, false);
        b = act_;
        break;
      case DType::kBF16:
        at = bt = CUDA_R_16BF;
        lda = w.row_stride / 2;
        half_input(x, xn, true);
        b = act_;
        break;
      default:
        launch_dequant_f16(w, static_cast<__half*>(dq_), stream_);
        a = dq_;
        at = bt = CUDA_R_16F;
        lda = w.cols;
        half_input(x, xn, false);
        b = act_;
        break;
    }
    if (MmaPart p; !reads_quantized(w.type) && mma_part(w, n, &p)) {
      p.y = y;
      p.bias = bias;
      launch_gemm_mma(&p, 1, b, n, w.cols, w.type == DType::kBF16, acc, a == w.data, sm_count_, stream_);
      return;
    }
    if (trace_level() >= 3) {
      trace(3, "cublasGemmEx(T, N, m ", w.rows, ", n ", n, ", k ", w.cols, ", lda ", lda, ", weight ",
            std::string(dtype_name(w.type)), ")");
    }
    const cublasStatus_t st = cublas().gemm_ex(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.rows), n,
                                           static_cast<int>(w.cols), &alpha, a, at, static_cast<int>(lda), b, bt,
                                           static_cast<int>(w.cols), &beta, y, CUDA_R_32F, static_cast<int>(w.rows),
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) {
      // The whole call, so the message alone says which product failed.
      set_error(cublas_status(st, "cublasGemmEx").message() +
                cat(" [OP_T, OP_N, m ", w.rows, ", n ", n, ", k ", w.cols, ", lda ", lda, ", ldb ", w.cols, ", ldc ",
                    w.rows, ", A/B type ", static_cast<int>(at), ", C CUDA_R_32F, CUBLAS_COMPUTE_32F, weight ",
                    std::string(dtype_name(w.type)), "]"));
    }
    if (profiling()) {
      profile_label(cat("cublasGemmEx ", std::string(dtype_name(w.type)), " ", w.rows, "x", w.cols, " n=", n), 0);
    }
    if (sync_each_launch() || profiling()) after_launch("cublasGemmEx", dim3(1), dim3(1), stream_);
    if (bias != nullptr) launch_add_bias(y, bias, n, w.rows, stream_);
  }

  // The first error of a step is kept (later ones are usually its consequences) and printed at once.
  void set_error(const std::string& m) {
    if (!err_.ok()) return;
    err_ = Status(ErrorCode::kIo, m);
    std::fprintf(stderr, "%s\n", m.c_str());
    std::fflush(stderr);
  }

 public:
  // The buffer behind `x` pointers passed so far was rewritten: round again on next use.
  void new_input() {
    rounded_src_ = nullptr;
    half_src_ = nullptr;
    qsrc_ = nullptr;
    pre_src_ = nullptr;
  }

  // This object's first error, else the first failed kernel launch (common.cuh: after_launch).
  Status take_error() {
    Status s = err_;
    err_ = ok_status();
    Status l = take_launch_error();
    return s.ok() ? l : s;
  }
  cublasHandle_t handle() const { return handle_; }

 private:
  cudaStream_t stream_ = nullptr;
  cublasHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  void* dq_ = nullptr;
  void* act_ = nullptr;
  size_t dq_need_ = 0, dq_cap_ = 0, act_need_ = 0, act_cap_ = 0;
  bool fuse_ = true;
  bool fuse_mixed_ = true;
  bool q8_ = true;
  bool row_invariant_ = false;
  // Tensor-core products (mma_part; 9..64 tokens, Q4_K from tensor_core_min_tokens): -1 the types
  // it reads as they are (Q8_0, Q4_K), 1 every type, 0 none.
  int mma_mode_ = -1;
  bool mma_built_ = false;  // this GPU runs the kernel (asked once at init, not per product)
  int sm_count_ = 0;
  bool producer_half_ = true;  // prehalf
  const float* half_src_ = nullptr;  // input whose 2-byte copy act_ holds (half_input)
  int64_t half_n_ = 0;
  bool half_bf16_ = false;
  void* qact_ = nullptr;  // quantized activations of the integer GEMV
  size_t qact_cap_ = 0;
  const float* qsrc_ = nullptr;  // input whose quantized copy qact_ holds
  QActKind qkind_ = QActKind::kNone;
  int qn_ = 0;
  QActView qview_;
  const float* pre_src_ = nullptr;  // input its producer already rounded (mark_rounded)
  int pre_mode_ = 0;
  const float* rounded_src_ = nullptr;  // input whose rounded copy act_ holds
  DType rounded_type_ = DType::kF32;
  int64_t rounded_n_ = 0;
  Status err_;
};

struct DevLayer {
  DevWeight wq, wk, wv, wo, w_gate, w_up, w_down;
  float* attn_norm = nullptr;
  float* ffn_norm = nullptr;
  float* bq = nullptr;
  float* bk = nullptr;
  float* bv = nullptr;
  float* q_norm = nullptr;
  float* k_norm = nullptr;
};

// Activation buffers for up to `cap` tokens; pointers stay fixed until they grow, so captured
// graphs stay valid until then.
struct Buffers {
  int64_t cap = 0;
  float *x = nullptr, *h = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *att = nullptr;
  float *gate = nullptr, *up = nullptr, *hout = nullptr, *logits = nullptr;
  int32_t* packet = nullptr;  // tokens, pos, seq, slot, out_rows: [cap] each
  int32_t* greedy = nullptr;  // [cap] greedy token per logit row (forward_model with `greedy`)
  uint8_t* attn_scratch = nullptr;  // partial results of the split-KV decode attention
  size_t attn_scratch_bytes = 0;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(const CudaBackendOptions& o, std::unique_ptr<Backend> cpu) : opts_(o), cpu_(std::move(cpu)) {}
  ~CudaBackend() override {
    drop_graphs();
    const std::string prof = profile_report();
    if (!prof.empty()) std::fprintf(stderr, "%s", prof.c_str());
    if (round_prof_.calls > 0) {
      const double n = static_cast<double>(round_prof_.calls);
      std::fprintf(stderr,
                   "cuda profile: %llu rounds' statistics, ms per round: host preparation %.3f, device (copies, "
                   "kernels, synchronisation) %.3f, unpacking %.3f\n",
                   static_cast<unsigned long long>(round_prof_.calls), round_prof_.prep_ms / n,
                   round_prof_.device_ms / n, round_prof_.unpack_ms / n);
    }
    if (stream_ != nullptr) {
      // cuBLAS outlives the stream (members go after this body): detach it first.
      if (gemm_.handle() != nullptr) cublas().set_stream(gemm_.handle(), nullptr);
      // A fault of the last step that nothing checked shows up here: say so rather than exit quietly.
      const cudaError_t e = cudaStreamSynchronize(stream_);
      if (e != cudaSuccess && e != cudaErrorCudartUnloading) {
        std::fprintf(stderr, "%s\n", cuda_status(e, "~CudaBackend: cudaStreamSynchronize").message().c_str());
      }
      cudaStreamDestroy(stream_);
    }
    if (pinned_ != nullptr) cudaFreeHost(pinned_);
    if (keep_host_ != nullptr) cudaFreeHost(keep_host_);
    if (rs_host_ != nullptr) cudaFreeHost(rs_host_);
    if (rs_dev_ != nullptr) cudaFree(rs_dev_);
  }

  Status init() {
    FRUGAL_CUDA(cudaSetDevice(opts_.device));
    FRUGAL_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    FRUGAL_RETURN_IF_ERROR(gemm_.init(stream_));
    const char* g = std::getenv("FRUGAL_CUDA_GRAPHS");
    if (g != nullptr && std::strcmp(g, "0") == 0) opts_.graphs = false;
    const char* fl = std::getenv("FRUGAL_CUDA_FLASH");
    flash_ = fl == nullptr || std::strcmp(fl, "0") != 0;
    const char* f = std::getenv("FRUGAL_CUDA_FUSE");
    if (f != nullptr && std::strcmp(f, "0") == 0) gemm_.set_fuse(false);
    const char* fm = std::getenv("FRUGAL_CUDA_FUSE_MIXED");
    if (fm != nullptr && std::strcmp(fm, "0") == 0) gemm_.set_fuse_mixed(false);
    const char* qr = std::getenv("FRUGAL_CUDA_QUERY_RING");
    if (qr != nullptr && std::strcmp(qr, "0") == 0) opts_.query_ring = false;

    // Per-launch synchronization and per-kernel events cannot happen inside graph capture.
    if (sync_each_launch() || profiling()) opts_.graphs = false;
    trace(1, "backend ready on device ", opts_.device, ": graphs ", opts_.graphs ? "on" : "off", ", fuse ",
          (f != nullptr && std::strcmp(f, "0") == 0) ? "off" : "on", ", sync each launch ",
          sync_each_launch() ? "on" : "off");
    return ok_status();
  }

  std::string name() const override { return "cuda"; }
  int n_threads() const override { return cpu_->n_threads(); }

  // Op-level calls on host pointers go to the CPU backend: the device path is forward_model.
  void matmul(const WeightTensor& w, const float* x, int64_t n, float* y, const float* bias) override {
    cpu_->matmul(w, x, n, y, bias);
  }
  void get_rows(const WeightTensor& w, const int32_t* ids, int64_t n, float* y) override { cpu_->get_rows(w, ids, n, y); }
  void rms_norm(const float* x, const float* weight, int64_t n_rows, int64_t dim, float eps, float* y) override {
    cpu_->rms_norm(x, weight, n_rows, dim, eps, y);
  }
  void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos,
            const RopeParams& p) override {
    cpu_->rope(x, n_tokens, n_heads, head_dim, pos, p);
  }
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override { cpu_->swiglu(gate, up, n, out); }
  void add(float* x, const float* y, int64_t n) override { cpu_->add(x, y, n); }
  void attention(const float* q, const KvView& kv, int layer, const int32_t* seq, const int32_t* pos, int64_t n,
                 const AttentionParams& p, float* out) override {
    cpu_->attention(q, kv, layer, seq, pos, n, p, out);
  }

  Result<bool> forward_model(const Model& model, const Batch& batch, const KvView& kv, float* logits,
                             int32_t* greedy, const QueryCapture* queries) override;
  bool keeps_queries(int n_head, int n_head_kv, int32_t ring_rows) const override {
    return opts_.query_ring && ring_rows > 0 && n_head_kv > 0 && n_head % n_head_kv == 0 &&
           n_head / n_head_kv <= kRoundStatsMaxRep;
  }
  Result<bool> copy_kv_rows(int src, int dst, int32_t begin, int32_t end) override;
  Result<KvTokenStore*> device_kv(const Model& model, const KvCacheOptions& shape) override;

 private:
  // The device cache's token tables as eviction sees them (kv/token_store.h). Positions are
  // mirrored on the host; keep_tokens() changes the mirror at once and queues the device's
  // compaction, which runs (one kernel per sequence) before the next step or read.
  class Store final : public KvTokenStore {
   public:
    explicit Store(CudaBackend& b) : b_(b) {}
    KvStoreShape store_shape() const override {
      return KvStoreShape{b_.kv_.n_layer, b_.kv_.n_seq, b_.kv_.n_head_kv, b_.kv_.head_dim};
    }
    int32_t size(int layer, int seq, int head) const override {
      const std::vector<int32_t>* v = b_.head_positions(layer, seq, head);
      return v != nullptr ? static_cast<int32_t>(v->size()) : 0;
    }
    const int32_t* positions(int layer, int seq, int head) const override {
      const std::vector<int32_t>* v = b_.head_positions(layer, seq, head);
      return v != nullptr ? v->data() : nullptr;
    }
    void read_rows(int layer, int seq, int head, float* k, float* v) const override {
      b_.read_head_rows(layer, seq, head, k, v);
    }
    Status keep_tokens(int layer, int seq, int head, const std::vector<int32_t>& slots) override {
      return b_.keep_head_tokens(layer, seq, head, slots);
    }
    // The rows each head holds as eviction sees them: a head thinned by a round whose compaction
    // is still queued counts its kept rows, not the device slot's old row count.
    uint64_t used_bytes(int seq) const override {
      if (seq < 0 || seq >= b_.kv_.n_seq) return 0;
      uint64_t rows = 0;
      for (int l = 0; l < b_.kv_.n_layer; ++l) {
        for (int h = 0; h < b_.kv_.n_head_kv; ++h) rows += static_cast<uint64_t>(size(l, seq, h));
      }
      return rows * static_cast<uint64_t>(b_.kv_.head_dim) * 2 * sizeof(__half);
    }
    bool enable_token_stats() override {
      b_.stats_on_ = true;
      return true;
    }
    float* token_stats(int layer, int seq, int head) override { return b_.head_token_stats(layer, seq, head); }
    Result<bool> round_stats(int seq, const std::vector<RoundStatsRequest>& layers,
                             std::vector<std::vector<HeadRoundStats>>& out) override {
      return b_.round_stats(seq, layers, out);
    }

   private:
    CudaBackend& b_;
  };
  const std::vector<int32_t>* head_positions(int layer, int seq, int head) const;
  void read_head_rows(int layer, int seq, int head, float* k, float* v);
  Status keep_head_tokens(int layer, int seq, int head, const std::vector<int32_t>& slots);
  // The per-token statistics of one head (host memory, beside the position mirror), one float per
  // token it holds, new tokens at 0; null until a policy enabled them.
  float* head_token_stats(int layer, int seq, int head);
  // An eviction round's statistics of every KV head of every layer of `seq`, on the device
  // (round_stats.cu): one copy of the queries in, the kernels layer after layer, one copy of the
  // vectors out. false where the device rows do not line up with the heads' tokens (a keep still
  // queued: a second round before a step) or the group is wider than the kernels hold.
  Result<bool> round_stats(int seq, const std::vector<RoundStatsRequest>& layers,
                           std::vector<std::vector<HeadRoundStats>>& out);
  // Runs the compaction queued for `seq` (or for every sequence with seq < 0) on the step stream.
  Status apply_keeps(int seq);
  Status upload(const Model& m);
  Status ensure_kv(const KvCacheOptions& o);
  Status ensure_buffers(int64_t n);
  Status prepare(const Batch& b, int* n_out);
  // One step of `batch` on the uploaded model: prepare, run (a graph when it can) and copy the
  // logit rows or greedy tokens out.
  Status step(const Batch& batch, float* logits, int32_t* greedy, const QueryCapture* queries = nullptr);
  // Room for `m` captured query rows per layer (growing it drops the graphs: the pointers move).
  Status ensure_capture(int64_t m);
  void enqueue(int n, int n_out);
  cudaGraphExec_t capture(int n, int n_out);
  void layer(int il, int n);
  void drop_graphs() {
    for (auto& [k, g] : graphs_) {
      if (g != nullptr) cudaGraphExecDestroy(g);
    }
    graphs_.clear();
  }

  CudaBackendOptions opts_;
  std::unique_ptr<Backend> cpu_;
  cudaStream_t stream_ = nullptr;
  Gemm gemm_;
  const Model* model_ = nullptr;
  ModelConfig cfg_;
  DeviceArena weights_;
  DevWeight tok_embd_, output_;
  float* out_norm_ = nullptr;
  std::vector<DevLayer> layers_;
  RopeDev rope_;
  DeviceArena state_;  // KV cache and activation buffers
  KvDev kv_;
  bool flash_ = true;  // tensor-core attention kernels (FRUGAL_CUDA_FLASH=0: the scalar kernel)
  Buffers buf_;
  int32_t* pinned_ = nullptr;  // host staging of the packet
  std::vector<std::vector<int32_t>> seq_pos_;  // [seq] positions of the device rows, in slot order
                                               // (of layer 0, KV head 0 once the sequence evicted)
  // [seq][layer * n_head_kv + head]: positions per head once an eviction round thinned the
  // sequence (empty before: every head holds seq_pos_), and the compaction queued since the last
  // step (device slots kept, in order; empty: none for that head).
  std::vector<std::vector<std::vector<int32_t>>> head_pos_, keep_;
  // H2O's accumulated attention per token: [seq][layer * KV head][token], kept in step with the
  // position mirror (thinned by keep_head_tokens, cut by a sequence's restart).
  bool stats_on_ = false;
  std::vector<std::vector<std::vector<float>>> head_stats_;
  int32_t* keep_map_ = nullptr;   // device [n_layer * n_head_kv][kept]: one sequence's compaction
  int32_t* keep_host_ = nullptr;  // its pinned host staging (n_layer * n_head_kv * capacity)
  // round_stats' device scratch and pinned staging (queries in, sums out), grown on demand.
  char* rs_dev_ = nullptr;
  size_t rs_dev_bytes_ = 0;
  char* rs_host_ = nullptr;
  size_t rs_host_bytes_ = 0;
  // With FRUGAL_CUDA_PROFILE: where round_stats' time goes (host preparation, the device's part
  // from the first copy to the synchronisation, unpacking), printed when the backend ends.
  struct RoundProfile {
    uint64_t calls = 0;
    double prep_ms = 0, device_ms = 0, unpack_ms = 0;
  } round_prof_;
  std::vector<char> keep_dirty_;  // [seq]: a compaction is queued
  // FRUGAL_CUDA_TRACE=1: device memory in use (cudaMemGetInfo) after each step, compaction and
  // round, printed when it moved by 1 MiB or more, with what the backend holds by then, so memory
  // taken while serving is attributed to the event that took it.
  void watch_memory(const char* after);
  size_t mem_seen_ = 0;
  Store store_{*this};
  int attn_tokens_per_block_ = 0;              // of the step being prepared (prepare())
  bool row_invariant_ = false;                 // of the step being run (kRowInvariantTokens)
  // (n, n_out, attention tokens per block, row-invariant) -> graph; null: seen once
  // Keyed by tokens, logit rows, attention tokens per block, row invariance, captured query rows.
  std::map<std::tuple<int, int, int, bool, int>, cudaGraphExec_t> graphs_;
  // Query capture for attention observers (QueryCapture): the batch rows to copy, [cap] on the
  // device, and the copies [n_layer][m][n_head * head_dim]; m of this step (0: none).
  int32_t* qcap_rows_ = nullptr;
  float* qcap_ = nullptr;
  int64_t qcap_cap_ = 0;
  int qcap_m_ = 0;
  // Queries kept on the device (QueryCapture::ring_rows > 0): the rings [n_layer][n_seq][rows]
  // [n_head * head_dim], a query of position p at row p % rows of its sequence's ring; the position
  // each row holds (-1: none), mirrored on the host; this step's ring row (seq * rows + row) of
  // each captured row.
  bool qcap_ring_ = false;
  int32_t* qcap_dst_ = nullptr;
  std::vector<int32_t> qcap_dst_host_;
  float* qring_ = nullptr;
  int32_t qring_rows_ = 0;
  std::vector<int32_t> qring_pos_;  // [n_seq][rows]
  Status ensure_query_ring(int32_t rows);
};

Status upload_floats(const std::vector<float>& v, DeviceArena& arena, float** out, cudaStream_t s) {
  if (v.empty()) {
    *out = nullptr;
    return ok_status();
  }
  FRUGAL_RETURN_IF_ERROR(arena.alloc(v.size(), out));
  FRUGAL_CUDA(cudaMemcpyAsync(*out, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice, s));
  return cuda_status(cudaStreamSynchronize(s), "upload");
}

Status CudaBackend::upload(const Model& m) {
  drop_graphs();
  weights_.release();
  state_.release();
  buf_ = Buffers{};
  qcap_rows_ = nullptr;  // freed with the arena
  qcap_ = nullptr;
  qcap_cap_ = 0;
  qcap_dst_ = nullptr;
  qring_ = nullptr;
  qring_rows_ = 0;
  qring_pos_.clear();
  kv_ = KvDev{};
  layers_.clear();
  model_ = nullptr;
  cfg_ = m.config();
  if (cfg_.head_dim > 256) {
    return fail(ErrorCode::kNotSupported, "cuda: head size ", cfg_.head_dim, " (at most 256)");
  }
  const ModelWeights& w = m.weights();
  {
    uint64_t need = 0, dq = 0;
    need += device_bytes(w.token_embd, &dq) + device_bytes(w.output, &dq);
    for (const LayerWeights& L : w.layers) {
      for (const WeightTensor* t : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) need += device_bytes(*t, &dq);
    }
    FRUGAL_RETURN_IF_ERROR(check_fits(need + dq * 2, cat("the model's weights (", gib(need),
                                                           ", plus ", gib(dq * 2), " dequantization scratch)")));
  }
  // Host pages go back as soon as they are on the device, 64 MiB at a time
  // (opts_.release_host_weights), so the host's peak is a slice, never the model or a whole tensor.
  HostConsumed release;
  if (opts_.release_host_weights) {
    release.fn = [](void* ctx, const void* data, size_t bytes) {
      static_cast<const GgufFile*>(ctx)->release_resident_pages(data, bytes);
    };
    release.ctx = const_cast<GgufFile*>(&m.gguf());
  }
  const auto upload = [&](const WeightTensor& t, const std::string& name, DevWeight* out) -> Status {
    FRUGAL_RETURN_IF_ERROR(gemm_.upload(t, name, weights_, out, release));
    // Slices release whole pages only; the pages straddling two slices go back here.
    if (release.fn != nullptr) m.gguf().release_resident_pages(t.data, static_cast<uint64_t>(t.rows) * t.row_stride);
    return ok_status();
  };
  FRUGAL_RETURN_IF_ERROR(upload(w.token_embd, "token_embd.weight", &tok_embd_));
  FRUGAL_RETURN_IF_ERROR(upload(w.output, "output.weight", &output_));
  FRUGAL_RETURN_IF_ERROR(upload_floats(w.output_norm, weights_, &out_norm_, stream_));
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& L = w.layers[i];
    DevLayer d;
    const std::string p = "blk." + std::to_string(i) + ".";
    FRUGAL_RETURN_IF_ERROR(upload(L.wq, p + "attn_q.weight", &d.wq));
    FRUGAL_RETURN_IF_ERROR(upload(L.wk, p + "attn_k.weight", &d.wk));
    FRUGAL_RETURN_IF_ERROR(upload(L.wv, p + "attn_v.weight", &d.wv));
    FRUGAL_RETURN_IF_ERROR(upload(L.wo, p + "attn_output.weight", &d.wo));
    FRUGAL_RETURN_IF_ERROR(upload(L.w_gate, p + "ffn_gate.weight", &d.w_gate));
    FRUGAL_RETURN_IF_ERROR(upload(L.w_up, p + "ffn_up.weight", &d.w_up));
    FRUGAL_RETURN_IF_ERROR(upload(L.w_down, p + "ffn_down.weight", &d.w_down));
    FRUGAL_RETURN_IF_ERROR(upload_floats(L.attn_norm, weights_, &d.attn_norm, stream_));
    FRUGAL_RETURN_IF_ERROR(upload_floats(L.ffn_norm, weights_, &d.ffn_norm, stream_));
    FRUGAL_RETURN_IF_ERROR(upload_floats(L.bq, weights_, &d.bq, stream_));
    FRUGAL_RETURN_IF_ERROR(upload_floats(L.bk, weights_, &d.bk, stream_));
    FRUGAL_RETURN_IF_ERROR(upload_floats(L.bv, weights_, &d.bv, stream_));
    FRUGAL_RETURN_IF_ERROR(upload_floats(L.q_norm, weights_, &d.q_norm, stream_));
    FRUGAL_RETURN_IF_ERROR(upload_floats(L.k_norm, weights_, &d.k_norm, stream_));
    layers_.push_back(d);
  }
  const RopeParams& r = cfg_.rope;
  rope_.n_rot = std::min<int>(r.n_rot, static_cast<int>(cfg_.head_dim)) & ~1;
  rope_.theta_scale = rope_.n_rot > 0 ? std::pow(r.freq_base, -2.0f / static_cast<float>(rope_.n_rot)) : 1.f;
  rope_.freq_scale = r.freq_scale;
  rope_.neox = r.neox;
  float* ff = nullptr;
  FRUGAL_RETURN_IF_ERROR(upload_floats(w.rope_freqs, weights_, &ff, stream_));
  rope_.freq_factors = ff;
  model_ = &m;
  return ok_status();
}

Status CudaBackend::ensure_kv(const KvCacheOptions& o) {
  if (kv_.k != nullptr && kv_.n_seq == o.n_seq && kv_.capacity == o.capacity) return ok_status();
  // New shape: the state arena (cache and buffers) is rebuilt, so graphs go too.
  drop_graphs();
  state_.release();
  buf_ = Buffers{};
  qcap_rows_ = nullptr;  // freed with the arena
  qcap_ = nullptr;
  qcap_cap_ = 0;
  qcap_dst_ = nullptr;
  qring_ = nullptr;
  qring_rows_ = 0;
  qring_pos_.clear();
  kv_ = KvDev{};
  kv_.n_layer = static_cast<int>(cfg_.n_layer);
  kv_.n_seq = o.n_seq;
  kv_.n_head_kv = static_cast<int>(cfg_.n_head_kv);
  kv_.head_dim = static_cast<int>(cfg_.head_dim);
  kv_.capacity = o.capacity;
  const size_t elems = static_cast<size_t>(kv_.n_layer) * o.n_seq * kv_.n_head_kv * o.capacity * kv_.head_dim;
  FRUGAL_RETURN_IF_ERROR(check_fits(4 * elems, cat("the KV cache (", o.n_seq, " sequences x ", o.capacity,
                                                     " tokens, F16)")));
  trace(1, "kv cache: ", o.n_seq, " sequences x ", o.capacity, " tokens, ", static_cast<uint64_t>(4 * elems),
        " bytes");
  FRUGAL_RETURN_IF_ERROR(state_.alloc(elems, &kv_.k));
  FRUGAL_RETURN_IF_ERROR(state_.alloc(elems, &kv_.v));
  const size_t heads = static_cast<size_t>(kv_.n_layer) * kv_.n_head_kv;
  FRUGAL_RETURN_IF_ERROR(state_.alloc(static_cast<size_t>(o.n_seq) * heads * o.capacity, &kv_.pos));
  FRUGAL_RETURN_IF_ERROR(state_.alloc(static_cast<size_t>(o.n_seq), &kv_.seq_len));
  FRUGAL_RETURN_IF_ERROR(state_.alloc(heads * o.capacity, &keep_map_));
  seq_pos_.assign(static_cast<size_t>(o.n_seq), {});
  head_pos_.assign(static_cast<size_t>(o.n_seq), {});
  head_stats_.assign(static_cast<size_t>(o.n_seq), {});
  keep_.assign(static_cast<size_t>(o.n_seq), {});
  keep_dirty_.assign(static_cast<size_t>(o.n_seq), 0);
  if (keep_host_ != nullptr) cudaFreeHost(keep_host_);
  keep_host_ = nullptr;
  FRUGAL_CUDA(cudaMallocHost(&keep_host_, heads * o.capacity * sizeof(int32_t)));
  return ok_status();
}

Status CudaBackend::ensure_buffers(int64_t n) {
  if (n <= buf_.cap) return ok_status();
  // Grown buffers move, so graphs captured over the old ones are dropped, and the old ones are
  // freed once the stream is idle (every step ends synchronized; this waits for anything queued
  // since), so a step one token larger than any before does not keep two sets on the device.
  drop_graphs();
  if (buf_.cap > 0) {
    FRUGAL_CUDA(cudaStreamSynchronize(stream_));
    for (const void* p : std::initializer_list<const void*>{buf_.x, buf_.h, buf_.q, buf_.k, buf_.v, buf_.att,
                                                            buf_.gate, buf_.up, buf_.hout, buf_.logits,
                                                            buf_.packet, buf_.greedy, buf_.attn_scratch}) {
      state_.free(p);
    }
    buf_ = Buffers{};
  }
  const int64_t cap = std::max<int64_t>(n, 8);
  trace(1, "buffers for ", cap, " tokens");
  const ModelConfig& c = cfg_;
  const auto sz = [cap](int64_t per) { return static_cast<size_t>(cap * per); };
  Buffers b;
  b.cap = cap;
  FRUGAL_RETURN_IF_ERROR(state_.alloc(sz(c.n_embd), &b.x));
  FRUGAL_RETURN_IF_ERROR(state_.alloc(sz(c.n_embd), &b.h));
  FRUGAL_RETURN_IF_ERROR(state_.alloc(sz(c.n_head * c.head_dim), &b.q));
  FRUGAL_RETURN_IF_ERROR(state_.alloc(sz(c.n_head_kv * c.head_dim), &b.k));
  FRUGAL_RETURN_IF_ERROR(state_.alloc(sz(c.n_head_kv * c.head_dim), &b.v));
  FRUGAL_RETURN_IF_ERROR(state_.alloc(sz(c.n_head * c.head_dim), &b.att));
  FRUGAL_RETURN_IF_ERROR(state_.alloc(sz(c.n_ff), &b.gate));
  FRUGAL_RETURN_IF_ERROR(state_.alloc(sz(c.n_ff), &b.up));
  FRUGAL_RETURN_IF_ERROR(state_.alloc(sz(c.n_embd), &b.hout));
  FRUGAL_RETURN_IF_ERROR(state_.alloc(sz(c.n_vocab), &b.logits));
  FRUGAL_RETURN_IF_ERROR(state_.alloc(sz(5), &b.packet));
  FRUGAL_RETURN_IF_ERROR(state_.alloc(sz(1), &b.greedy));
  {
    // The split attention's scratch for the largest step it may run (its size is not monotonic
    // in the token count, so take the maximum over every count that prefers it).
    AttnDev ap;
    ap.n_head = static_cast<int>(c.n_head);
    ap.n_head_kv = static_cast<int>(c.n_head_kv);
    ap.head_dim = static_cast<int>(c.head_dim);
    size_t bytes = 0;
    for (int t = 1; t <= cap; ++t) {
      if (attention_prefer_split(t, ap)) bytes = std::max(bytes, attention_split_scratch_bytes(t, ap, kv_.capacity));
    }
    ap.split_as_tokens = 1;  // row-invariant steps (kRowInvariantTokens)
    for (int t = 1; t <= std::min<int64_t>(cap, kRowInvariantTokens); ++t) {
      bytes = std::max(bytes, attention_split_scratch_bytes(t, ap, kv_.capacity));
    }
    if (bytes > 0) FRUGAL_RETURN_IF_ERROR(state_.alloc(bytes, &b.attn_scratch));
    b.attn_scratch_bytes = bytes;
  }
  FRUGAL_RETURN_IF_ERROR(gemm_.reserve(cap));
  if (pinned_ != nullptr) cudaFreeHost(pinned_);
  pinned_ = nullptr;
  FRUGAL_CUDA(cudaMallocHost(&pinned_, (sz(5) + static_cast<size_t>(kv_.n_seq)) * sizeof(int32_t)));
  buf_ = b;
  return ok_status();
}

// Host bookkeeping of the step: truncates each sequence's device rows to the positions before its
// first token in the batch, assigns cache slots and fills the packet.
Status CudaBackend::prepare(const Batch& b, int* n_out) {
  const int64_t n = b.size();
  std::map<int32_t, int32_t> first;  // seq -> first position in the batch
  std::map<int32_t, int32_t> added;
  for (int64_t i = 0; i < n; ++i) {
    first.emplace(b.seq[static_cast<size_t>(i)], b.pos[static_cast<size_t>(i)]);
    added[b.seq[static_cast<size_t>(i)]]++;
  }
  for (const auto& [s, p0] : first) {
    if (s < 0 || s >= kv_.n_seq) {
      return fail(ErrorCode::kInvalidArgument, "forward: sequence ", s, " outside the cache's ", kv_.n_seq);
    }
    const auto& v = seq_pos_[static_cast<size_t>(s)];
    const int64_t keep = std::lower_bound(v.begin(), v.end(), p0) - v.begin();
    if (keep + added[s] > kv_.capacity) {
      return fail(ErrorCode::kOverBudget, "forward: sequence ", s, " needs ", keep + added[s],
                  " tokens of context but the cache holds ", kv_.capacity);
    }
    // An evicted sequence is truncated head by head; every head must keep as many rows (its
    // rows share one slot counter), which holds for a new request (nothing kept) and for
    // continuing past the newest token (everything kept), not for a rollback into thinned rows.
    for (const auto& hp : head_pos_[static_cast<size_t>(s)]) {
      if (std::lower_bound(hp.begin(), hp.end(), p0) - hp.begin() != keep) {
        return fail(ErrorCode::kNotSupported, "forward: sequence ", s, " was thinned by eviction and cannot be ",
                    "rolled back to position ", p0, " (its heads keep different tokens before it)");
      }
    }
  }
  for (const auto& [s, p0] : first) {
    auto& v = seq_pos_[static_cast<size_t>(s)];
    const size_t keep = static_cast<size_t>(std::lower_bound(v.begin(), v.end(), p0) - v.begin());
    v.resize(keep);
    auto& heads = head_pos_[static_cast<size_t>(s)];
    if (keep == 0) heads.clear();  // a fresh start: every head holds the same tokens again
    for (auto& hp : heads) hp.resize(keep);
    for (auto& st : head_stats_[static_cast<size_t>(s)]) {
      if (st.size() > keep) st.resize(keep);
    }
  }
  const int64_t cap = buf_.cap;
  int32_t* tokens = pinned_;
  int32_t* pos = pinned_ + cap;
  int32_t* seq = pinned_ + 2 * cap;
  int32_t* slot = pinned_ + 3 * cap;
  int32_t* rows = pinned_ + 4 * cap;
  int32_t* lens = pinned_ + 5 * cap;
  int no = 0;
  for (int64_t i = 0; i < n; ++i) {
    const size_t u = static_cast<size_t>(i);
    auto& v = seq_pos_[static_cast<size_t>(b.seq[u])];
    tokens[i] = b.tokens[u];
    pos[i] = b.pos[u];
    seq[i] = b.seq[u];
    slot[i] = static_cast<int32_t>(v.size());
    v.push_back(b.pos[u]);
    for (auto& hp : head_pos_[static_cast<size_t>(b.seq[u])]) hp.push_back(b.pos[u]);
    if (b.want_logits[u]) rows[no++] = static_cast<int32_t>(i);
  }
  for (int s = 0; s < kv_.n_seq; ++s) lens[s] = static_cast<int32_t>(seq_pos_[static_cast<size_t>(s)].size());
  // Attention blocks hold G heads of T consecutive tokens; a block straddling sequences runs once
  // per sequence. T is the longest run of one sequence's consecutive tokens, rounded up to a power
  // of two (capped by the kernel): 1 for a decode step of many sequences (64 sequences at T = 16
  // made every block run 16 passes), the full block for a prompt.
  int64_t longest = n > 0 ? 1 : 0;
  for (int64_t i = 1, run = 1; i < n; ++i) {
    run = b.seq[static_cast<size_t>(i)] == b.seq[static_cast<size_t>(i - 1)] ? run + 1 : 1;
    longest = std::max(longest, run);
  }
  int tokens_per_block = 1;
  while (!row_invariant_ && tokens_per_block < longest && tokens_per_block < 64) tokens_per_block *= 2;
  attn_tokens_per_block_ = tokens_per_block;
  FRUGAL_CUDA(cudaMemcpyAsync(buf_.packet, pinned_, static_cast<size_t>(5 * cap) * sizeof(int32_t),
                              cudaMemcpyHostToDevice, stream_));
  FRUGAL_CUDA(cudaMemcpyAsync(kv_.seq_len, lens, static_cast<size_t>(kv_.n_seq) * sizeof(int32_t),
                              cudaMemcpyHostToDevice, stream_));
  *n_out = no;
  return ok_status();
}

void CudaBackend::layer(int il, int n) {
  const ModelConfig& c = cfg_;
  const DevLayer& L = layers_[static_cast<size_t>(il)];
  Buffers& b = buf_;
  cudaStream_t s = stream_;
  const int64_t cap = b.cap;
  const int32_t* pos = b.packet + cap;
  const int32_t* seq = b.packet + 2 * cap;
  const int32_t* slot = b.packet + 3 * cap;
  const int embd = static_cast<int>(c.n_embd), hd = static_cast<int>(c.head_dim);
  const int nh = static_cast<int>(c.n_head), nkv = static_cast<int>(c.n_head_kv);

  // Producers round their outputs when the next GEMV would (F16/BF16 weights, few tokens), and
  // rope, rotation of K and the cache store are one kernel: fewer launches per decode step.
  // Quantized weights: the norm writes the 8-bit activations of the integer GEMV itself.
  const int nr = row_invariant_ ? 1 : n;  // the token count kernel choices follow
  const int round_qkv = Gemm::input_rounding({&L.wq, &L.wk, &L.wv}, nr);
  gemm_.new_input();
  QActKind kind = QActKind::kNone;
  if (const QActView* qv = gemm_.prequantize({&L.wq, &L.wk, &L.wv}, b.h, n, embd, &kind)) {
    launch_rms_norm_q8(b.x, L.attn_norm, n, embd, c.rms_eps, b.h, kind, *qv, s);
  } else {
    bool bf16 = false;
    void* half = gemm_.prehalf({&L.wq, &L.wk, &L.wv}, b.h, n, embd, &bf16);
    launch_rms_norm(b.x, L.attn_norm, n, embd, c.rms_eps, b.h, nullptr, s, round_qkv, half, bf16);
    gemm_.mark_rounded(b.h, round_qkv);
  }
  {
    const DevWeight* w[3] = {&L.wq, &L.wk, &L.wv};
    float* y[3] = {b.q, b.k, b.v};
    const float* bias[3] = {L.bq, L.bk, L.bv};
    gemm_.run_set(w, y, bias, 3, b.h, n);
  }
  if (c.qk_norm) {
    launch_rms_norm(b.q, L.q_norm, static_cast<int64_t>(n) * nh, hd, c.rms_eps, b.q, nullptr, s);
    launch_rms_norm(b.k, L.k_norm, static_cast<int64_t>(n) * nkv, hd, c.rms_eps, b.k, nullptr, s);
  }
  launch_rope_store(b.q, b.k, b.v, n, nh, kv_, il, seq, pos, slot, rope_, s);
  if (qcap_m_ > 0 && qcap_ring_) {  // the observed rows' rotated queries into their rings
    const int64_t ring_layer = static_cast<int64_t>(kv_.n_seq) * qring_rows_ * nh * hd;
    launch_scatter_query_rows(b.q, qcap_rows_, qcap_dst_, qcap_m_, nh * hd, qring_ + il * ring_layer, s);
  } else if (qcap_m_ > 0) {  // the observed rows' rotated queries, gathered as the rows of an F32 matrix
    DevWeight qw;
    qw.type = DType::kF32;
    qw.rows = n;
    qw.cols = static_cast<int64_t>(nh) * hd;
    qw.row_stride = qw.cols * 4;
    qw.data = reinterpret_cast<const uint8_t*>(b.q);
    launch_get_rows(qw, qcap_rows_, qcap_m_, qcap_ + static_cast<int64_t>(il) * qcap_m_ * qw.cols, s);
  }
  AttnDev ap;
  ap.n_head = nh;
  ap.n_head_kv = nkv;
  ap.head_dim = hd;
  ap.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  ap.window = c.sliding_window;
  ap.tokens_per_block = attn_tokens_per_block_;
  if (row_invariant_) ap.split_as_tokens = 1;
  // Tensor-core kernels where they handle the shape (FRUGAL_CUDA_FLASH=0 keeps the scalar one, for
  // comparison): split-KV for decode-sized batches, tiled flash attention for prefill.
  bool launched = false;
  bool att_rounded = false;
  if (flash_) {
    const bool split = row_invariant_ || attention_prefer_split(n, ap);
    if (split) {
      ap.round_out = Gemm::input_rounding({&L.wo}, nr);
      att_rounded = ap.round_out != 0;
    }
    launched = split
                   ? launch_attention_split(kv_, il, b.q, n, seq, pos, ap, kv_.capacity, b.attn_scratch,
                                            b.attn_scratch_bytes, b.att, s)
                   : launch_attention_flash(kv_, il, b.q, n, seq, pos, ap, b.att, s);
  }
  if (!launched) launch_attention(kv_, il, b.q, n, seq, pos, ap, b.att, s);
  gemm_.new_input();
  if (launched && att_rounded) gemm_.mark_rounded(b.att, ap.round_out);
  gemm_.run(L.wo, b.att, n, b.x, nullptr, true);

  const int round_ffn = Gemm::input_rounding({&L.w_gate, &L.w_up}, nr);
  gemm_.new_input();
  if (const QActView* qv = gemm_.prequantize({&L.w_gate, &L.w_up}, b.h, n, embd, &kind)) {
    launch_rms_norm_q8(b.x, L.ffn_norm, n, embd, c.rms_eps, b.h, kind, *qv, s);
  } else {
    bool bf16 = false;
    void* half = gemm_.prehalf({&L.w_gate, &L.w_up}, b.h, n, embd, &bf16);
    launch_rms_norm(b.x, L.ffn_norm, n, embd, c.rms_eps, b.h, nullptr, s, round_ffn, half, bf16);
    gemm_.mark_rounded(b.h, round_ffn);
  }
  {
    const DevWeight* w[2] = {&L.w_gate, &L.w_up};
    float* y[2] = {b.gate, b.up};
    const float* bias[2] = {nullptr, nullptr};
    gemm_.run_set(w, y, bias, 2, b.h, n);
  }
  const int round_down = Gemm::input_rounding({&L.w_down}, nr);
  gemm_.new_input();
  if (const QActView* qv = gemm_.prequantize({&L.w_down}, b.gate, n, c.n_ff, &kind)) {
    launch_swiglu_q8(b.gate, b.up, n, static_cast<int>(c.n_ff), kind, *qv, s);
  } else {
    bool bf16 = false;
    void* half = gemm_.prehalf({&L.w_down}, b.gate, n, c.n_ff, &bf16);
    launch_swiglu(b.gate, b.up, static_cast<int64_t>(n) * c.n_ff, s, round_down, half, bf16);
    gemm_.mark_rounded(b.gate, round_down);
  }
  gemm_.run(L.w_down, b.gate, n, b.x, nullptr, true);
}

void CudaBackend::enqueue(int n, int n_out) {
  const int64_t cap = buf_.cap;
  gemm_.new_input();
  launch_get_rows(tok_embd_, buf_.packet, n, buf_.x, stream_);
  for (int il = 0; il < cfg_.n_layer; ++il) layer(il, n);
  if (n_out == 0) return;
  launch_rms_norm(buf_.x, out_norm_, n_out, static_cast<int>(cfg_.n_embd), cfg_.rms_eps, buf_.hout,
                  buf_.packet + 4 * cap, stream_);
  gemm_.new_input();
  gemm_.run(output_, buf_.hout, n_out, buf_.logits, nullptr, false);
}

// The step as a graph, or null (graphs then turn off for this backend, with one warning) when
// capture fails: the step still runs, eagerly.
cudaGraphExec_t CudaBackend::capture(int n, int n_out) {
  trace(1, "graph capture: ", n, " tokens, ", n_out, " logit rows");
  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  const char* step = "cudaStreamBeginCapture";
  cudaError_t e = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed);
  if (e == cudaSuccess) {
    enqueue(n, n_out);
    step = "cudaStreamEndCapture";
    e = cudaStreamEndCapture(stream_, &g);
  }
  // A product that failed while being captured (cuBLAS, scratch) used to be dropped here with the
  // message "graph capture failed (no error)": keep its text.
  Status gst = gemm_.take_error();
  if (e == cudaSuccess && gst.ok()) {
    step = "cudaGraphInstantiate";
    e = cudaGraphInstantiate(&exec, g, 0);
  }
  if (g != nullptr) cudaGraphDestroy(g);
  if (e != cudaSuccess || exec == nullptr) {
    const std::string why = e != cudaSuccess ? cuda_status(e, step).message() : gst.message();
    std::fprintf(stderr, "cuda: graph capture failed (%s); running steps without graphs\n", why.c_str());
    (void)cudaGetLastError();
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    opts_.graphs = false;
    return nullptr;
  }
  return exec;
}

Result<bool> CudaBackend::forward_model(const Model& model, const Batch& batch, const KvView& kv, float* logits,
                                        int32_t* greedy, const QueryCapture* queries) {
  if (kv.quantized()) {
    return fail(ErrorCode::kNotSupported, "cuda: quantized KV caches run on the CPU backend only");
  }
  if (&model != model_) {
    trace(1, "upload: ", model.config().n_layer, " layers, ", static_cast<uint64_t>(model.weights().bytes),
          " bytes of weights (", model.describe_types(), ")");
    FRUGAL_RETURN_IF_ERROR(upload(model));
    trace(1, "upload done");
  }
  FRUGAL_RETURN_IF_ERROR(ensure_kv(kv.options()));
  if (queries != nullptr && queries->m > 0) {
    for (int64_t i = 0; i < queries->m; ++i) {
      if (queries->rows[i] < 0 || queries->rows[i] >= batch.size()) {
        return fail(ErrorCode::kInvalidArgument, "cuda: captured query row ", queries->rows[i], " of a batch of ",
                    batch.size(), " tokens");
      }
    }
    if (batch.row_invariant && batch.size() > kRowInvariantTokens) {
      return fail(ErrorCode::kNotSupported, "cuda: attention observers on a row-invariant step of ", batch.size(),
                  " tokens (it runs in passes of ", kRowInvariantTokens, ")");
    }
  }
  if (!batch.row_invariant || batch.size() <= kRowInvariantTokens) {
    FRUGAL_RETURN_IF_ERROR(step(batch, logits, greedy, queries));
    return true;
  }
  // Passes of kRowInvariantTokens tokens in batch order: a sequence's later tokens see the rows
  // its earlier ones wrote in a previous pass, as in chunked prefill.
  Batch part;
  part.row_invariant = true;
  int64_t out_rows = 0;
  for (int64_t t0 = 0; t0 < batch.size(); t0 += kRowInvariantTokens) {
    part.clear();
    const int64_t t1 = std::min<int64_t>(batch.size(), t0 + kRowInvariantTokens);
    for (int64_t t = t0; t < t1; ++t) {
      const auto u = static_cast<size_t>(t);
      part.add(batch.tokens[u], batch.pos[u], batch.seq[u], batch.want_logits[u] != 0);
    }
    FRUGAL_RETURN_IF_ERROR(step(part, logits != nullptr ? logits + out_rows * cfg_.n_vocab : nullptr,
                                greedy != nullptr ? greedy + out_rows : nullptr));
    out_rows += part.n_logits();
  }
  return true;
}

Status CudaBackend::ensure_capture(int64_t m) {
  if (m <= qcap_cap_) return ok_status();
  drop_graphs();
  // The capture is read within the step that fills it: the old one goes once the stream is idle.
  if (qcap_cap_ > 0) {
    FRUGAL_CUDA(cudaStreamSynchronize(stream_));
    state_.free(qcap_rows_);
    state_.free(qcap_dst_);
    state_.free(qcap_);
    qcap_rows_ = nullptr;
    qcap_dst_ = nullptr;
    qcap_ = nullptr;
    qcap_cap_ = 0;
  }
  const int64_t cap = std::max<int64_t>(m, 8);
  FRUGAL_RETURN_IF_ERROR(state_.alloc(static_cast<size_t>(cap), &qcap_rows_));
  FRUGAL_RETURN_IF_ERROR(state_.alloc(static_cast<size_t>(cap), &qcap_dst_));
  FRUGAL_RETURN_IF_ERROR(
      state_.alloc(static_cast<size_t>(cfg_.n_layer * cap * cfg_.n_head * cfg_.head_dim), &qcap_));
  qcap_cap_ = cap;
  return ok_status();
}

// Rings of at least `rows` rows per sequence, in the state arena: 2 GiB for 64 sequences of an 8B
// shape with 64 rows. They only grow (the graphs are dropped: the pointer moves), and a grown
// ring takes over the queries the old one held, each at its position's row in the new one.
Status CudaBackend::ensure_query_ring(int32_t rows) {
  if (qring_ != nullptr && qring_rows_ >= rows) return ok_status();
  drop_graphs();
  const int64_t row = static_cast<int64_t>(cfg_.n_head) * cfg_.head_dim;
  float* ring = nullptr;
  FRUGAL_RETURN_IF_ERROR(state_.alloc(static_cast<size_t>(kv_.n_layer) * kv_.n_seq * rows * row, &ring));
  std::vector<int32_t> pos(static_cast<size_t>(kv_.n_seq) * rows, -1);
  if (qring_ != nullptr) {
    // Held positions are distinct modulo the old size but not always modulo the new one (a slot
    // also keeps the positions of the sequence it held before): the newest takes a contested row.
    std::vector<int32_t> from, to;
    std::vector<std::pair<int32_t, int32_t>> held;  // (position, old row)
    for (int sq = 0; sq < kv_.n_seq; ++sq) {
      held.clear();
      for (int32_t r = 0; r < qring_rows_; ++r) {
        const int32_t p = qring_pos_[static_cast<size_t>(sq) * qring_rows_ + r];
        if (p >= 0) held.emplace_back(p, r);
      }
      std::sort(held.begin(), held.end(), std::greater<>());
      for (const auto& [p, r] : held) {
        int32_t& dst = pos[static_cast<size_t>(sq) * rows + p % rows];
        if (dst >= 0) continue;
        dst = p;
        from.push_back(sq * qring_rows_ + r);
        to.push_back(sq * rows + p % rows);
      }
    }
    if (!from.empty()) {
      int32_t* d = nullptr;
      FRUGAL_RETURN_IF_ERROR(state_.alloc(from.size() * 2, &d));
      FRUGAL_CUDA(cudaMemcpyAsync(d, from.data(), from.size() * 4, cudaMemcpyHostToDevice, stream_));
      FRUGAL_CUDA(cudaMemcpyAsync(d + from.size(), to.data(), to.size() * 4, cudaMemcpyHostToDevice, stream_));
      for (int l = 0; l < kv_.n_layer; ++l) {
        launch_scatter_query_rows(qring_ + l * kv_.n_seq * qring_rows_ * row, d, d + from.size(),
                                  static_cast<int>(from.size()), static_cast<int>(row),
                                  ring + l * kv_.n_seq * static_cast<int64_t>(rows) * row, stream_);
      }
      FRUGAL_RETURN_IF_ERROR(take_launch_error());
      FRUGAL_CUDA(cudaStreamSynchronize(stream_));  // the host vectors go out of scope
    }
  }
  qring_ = ring;
  qring_rows_ = rows;
  qring_pos_ = std::move(pos);
  return ok_status();
}

Status CudaBackend::step(const Batch& batch, float* logits, int32_t* greedy, const QueryCapture* queries) {
  const int n = static_cast<int>(batch.size());
  row_invariant_ = batch.row_invariant;
  gemm_.set_row_invariant(row_invariant_);
  FRUGAL_RETURN_IF_ERROR(ensure_buffers(n));
  qcap_m_ = queries != nullptr ? static_cast<int>(queries->m) : 0;
  qcap_ring_ = qcap_m_ > 0 && queries->ring_rows > 0;
  if (qcap_m_ > 0) {
    FRUGAL_RETURN_IF_ERROR(ensure_capture(qcap_m_));
    if (qcap_ring_) {
      if (queries->seq == nullptr || queries->pos == nullptr) {
        return fail(ErrorCode::kInvalidArgument, "cuda: a query ring capture without sequences and positions");
      }
      for (int i = 0; i < qcap_m_; ++i) {
        if (queries->seq[i] < 0 || queries->seq[i] >= kv_.n_seq || queries->pos[i] < 0) {
          return fail(ErrorCode::kInvalidArgument, "cuda: captured query ", i, " of sequence ", queries->seq[i],
                      " at position ", queries->pos[i], " (", kv_.n_seq, " sequences)");
        }
      }
      FRUGAL_RETURN_IF_ERROR(ensure_query_ring(queries->ring_rows));
      qcap_dst_host_.resize(static_cast<size_t>(qcap_m_));
      for (int i = 0; i < qcap_m_; ++i) {
        const int32_t sq = queries->seq[i], r = queries->pos[i] % qring_rows_;
        qcap_dst_host_[static_cast<size_t>(i)] = sq * qring_rows_ + r;
        qring_pos_[static_cast<size_t>(sq) * qring_rows_ + r] = queries->pos[i];
      }
      FRUGAL_CUDA(cudaMemcpyAsync(qcap_dst_, qcap_dst_host_.data(), static_cast<size_t>(qcap_m_) * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, stream_));
    }
    FRUGAL_CUDA(cudaMemcpyAsync(qcap_rows_, queries->rows, static_cast<size_t>(qcap_m_) * sizeof(int32_t),
                                cudaMemcpyHostToDevice, stream_));
  }
  FRUGAL_RETURN_IF_ERROR(apply_keeps(-1));
  int n_out = 0;
  FRUGAL_RETURN_IF_ERROR(prepare(batch, &n_out));
  const bool graph = opts_.graphs && n <= kGraphMaxTokens;
  trace(2, "step: ", n, " tokens, ", n_out, " logit rows, ", graph ? "graph" : "eager");
  const std::tuple<int, int, int, bool, int> key{n, n_out, attn_tokens_per_block_, row_invariant_,
                                                 qcap_ring_ ? -qcap_m_ : qcap_m_};
  auto it = graphs_.find(key);
  if (graph && it != graphs_.end() && it->second != nullptr) {
    FRUGAL_CUDA(cudaGraphLaunch(it->second, stream_));
  } else if (graph && it != graphs_.end()) {
    // Second time this shape runs: capture it (the first, eager run loaded every kernel and let
    // cuBLAS pick its algorithms outside capture).
    cudaGraphExec_t exec = capture(n, n_out);
    if (exec != nullptr) {
      it->second = exec;
      FRUGAL_CUDA(cudaGraphLaunch(exec, stream_));
    } else {
      enqueue(n, n_out);
    }
  } else {
    if (graph) graphs_.emplace(key, nullptr);
    profile_step_begin(stream_);
    enqueue(n, n_out);
  }
  FRUGAL_RETURN_IF_ERROR(gemm_.take_error());
  FRUGAL_CUDA(cudaGetLastError());
  if (n_out > 0 && greedy != nullptr) {
    // Outside the graph: one launch, and the same graphs serve greedy and sampled steps.
    launch_argmax_rows(buf_.logits, n_out, cfg_.n_vocab, buf_.greedy, stream_);
    FRUGAL_RETURN_IF_ERROR(take_launch_error());
    FRUGAL_CUDA(cudaMemcpyAsync(greedy, buf_.greedy, static_cast<size_t>(n_out) * sizeof(int32_t),
                                cudaMemcpyDeviceToHost, stream_));
  } else if (n_out > 0) {
    FRUGAL_CUDA(cudaMemcpyAsync(logits, buf_.logits, static_cast<size_t>(n_out) * cfg_.n_vocab * sizeof(float),
                                cudaMemcpyDeviceToHost, stream_));
  }
  if (qcap_m_ > 0 && !qcap_ring_) {
    FRUGAL_CUDA(cudaMemcpyAsync(queries->out, qcap_,
                                static_cast<size_t>(cfg_.n_layer * qcap_m_ * cfg_.n_head * cfg_.head_dim) * sizeof(float),
                                cudaMemcpyDeviceToHost, stream_));
  }
  // A kernel that faults is reported here, by the step's synchronization: name the step's shape.
  const cudaError_t e = cudaStreamSynchronize(stream_);
  profile_step_end();
  if (e != cudaSuccess) {
    return fail(ErrorCode::kIo, cuda_status(e, "cudaStreamSynchronize (end of step)").message(), " [step of ", n,
                " tokens, ", n_out, " logit rows, ", graph ? "graph" : "eager",
                "; FRUGAL_CUDA_SYNC=1 names the kernel]");
  }
  watch_memory(graph ? "a graph step" : "an eager step");
  return ok_status();
}

// Device rows of positions [begin, end) of sequence src into sequence dst (same prefix, dst holding
// [0, begin)): one device-to-device copy per layer and KV head for K and V, and the positions.
// Enqueued on the step stream, so the next forward sees them.
Result<bool> CudaBackend::copy_kv_rows(int src, int dst, int32_t begin, int32_t end) {
  if (src < 0 || dst < 0 || src >= kv_.n_seq || dst >= kv_.n_seq || src == dst || begin < 0 || end < begin) {
    return fail(ErrorCode::kInvalidArgument, "kv copy: sequences ", src, " -> ", dst, " positions [", begin, ", ",
                end, ") out of range (", kv_.n_seq, " sequences)");
  }
  FRUGAL_RETURN_IF_ERROR(apply_keeps(-1));
  if (!head_pos_[static_cast<size_t>(src)].empty()) {
    return fail(ErrorCode::kInvalidArgument, "kv copy: sequence ", src, " was thinned by eviction and is no prefix");
  }
  head_pos_[static_cast<size_t>(dst)].clear();
  auto& from = seq_pos_[static_cast<size_t>(src)];
  auto& to = seq_pos_[static_cast<size_t>(dst)];
  // dst keeps what precedes `begin` (rows past it belong to its previous request).
  to.resize(static_cast<size_t>(std::lower_bound(to.begin(), to.end(), begin) - to.begin()));
  const auto in_order = [](const std::vector<int32_t>& v, int32_t n) {
    if (static_cast<int32_t>(v.size()) < n) return false;
    for (int32_t p = 0; p < n; ++p) {
      if (v[static_cast<size_t>(p)] != p) return false;
    }
    return true;
  };
  if (!in_order(from, end) || static_cast<int32_t>(to.size()) != begin || !in_order(to, begin)) {
    return fail(ErrorCode::kInvalidArgument, "kv copy: sequence ", src, " does not hold positions [0, ", end,
                ") in order on the device, or sequence ", dst, " does not hold [0, ", begin, ")");
  }
  if (end == begin) return true;
  if (end > kv_.capacity) {
    return fail(ErrorCode::kOverBudget, "kv copy: ", end, " rows exceed the cache's ", kv_.capacity);
  }
  const size_t hd = static_cast<size_t>(kv_.head_dim);
  const size_t rows = static_cast<size_t>(end - begin);
  for (int l = 0; l < kv_.n_layer; ++l) {
    for (int h = 0; h < kv_.n_head_kv; ++h) {
      const auto base = [&](int s) {
        return ((static_cast<size_t>(l) * kv_.n_seq + s) * kv_.n_head_kv + h) * kv_.capacity * hd + begin * hd;
      };
      FRUGAL_CUDA(cudaMemcpyAsync(kv_.k + base(dst), kv_.k + base(src), rows * hd * sizeof(__half),
                                  cudaMemcpyDeviceToDevice, stream_));
      FRUGAL_CUDA(cudaMemcpyAsync(kv_.v + base(dst), kv_.v + base(src), rows * hd * sizeof(__half),
                                  cudaMemcpyDeviceToDevice, stream_));
      FRUGAL_CUDA(cudaMemcpyAsync(kv_.pos + kv_slot0(kv_, l, dst, h) + begin, kv_.pos + kv_slot0(kv_, l, src, h) + begin,
                                  rows * sizeof(int32_t), cudaMemcpyDeviceToDevice, stream_));
    }
  }
  to.insert(to.end(), from.begin() + begin, from.begin() + end);
  return true;
}

Result<KvTokenStore*> CudaBackend::device_kv(const Model& model, const KvCacheOptions& shape) {
  if (&model != model_) FRUGAL_RETURN_IF_ERROR(upload(model));
  FRUGAL_RETURN_IF_ERROR(ensure_kv(shape));
  return static_cast<KvTokenStore*>(&store_);
}

const std::vector<int32_t>* CudaBackend::head_positions(int layer, int seq, int head) const {
  if (seq < 0 || seq >= kv_.n_seq || layer < 0 || layer >= kv_.n_layer || head < 0 || head >= kv_.n_head_kv) {
    return nullptr;
  }
  const auto& heads = head_pos_[static_cast<size_t>(seq)];
  return heads.empty() ? &seq_pos_[static_cast<size_t>(seq)]
                       : &heads[static_cast<size_t>(layer) * kv_.n_head_kv + head];
}

Status CudaBackend::keep_head_tokens(int layer, int seq, int head, const std::vector<int32_t>& slots) {
  const std::vector<int32_t>* cur = head_positions(layer, seq, head);
  if (cur == nullptr) {
    return fail(ErrorCode::kInvalidArgument, "kv keep: layer ", layer, ", sequence ", seq, ", head ", head,
                " outside the device cache (", kv_.n_layer, " layers, ", kv_.n_seq, " sequences, ", kv_.n_head_kv,
                " KV heads)");
  }
  const auto n = static_cast<int32_t>(cur->size());
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i] < 0 || slots[i] >= n || (i > 0 && slots[i] <= slots[i - 1])) {
      return fail(ErrorCode::kInvalidArgument, "kv keep: slots must be ascending in [0, ", n, "); slot ", i, " is ",
                  slots[i]);
    }
  }
  const size_t heads = static_cast<size_t>(kv_.n_layer) * kv_.n_head_kv;
  auto& hp_all = head_pos_[static_cast<size_t>(seq)];
  if (hp_all.empty()) hp_all.assign(heads, seq_pos_[static_cast<size_t>(seq)]);
  auto& keep_all = keep_[static_cast<size_t>(seq)];
  if (keep_all.size() != heads) keep_all.assign(heads, {});
  const size_t idx = static_cast<size_t>(layer) * kv_.n_head_kv + head;
  std::vector<int32_t>& hp = hp_all[idx];
  std::vector<int32_t>& pending = keep_all[idx];
  // In place, front to back (slots[i] >= i), into buffers that keep their capacity across rounds.
  // A head kept twice before a step: its device rows are still the first keep's sources.
  const bool first = pending.empty();
  if (first) pending.resize(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    const auto from = static_cast<size_t>(slots[i]);
    hp[i] = hp[from];
    pending[i] = first ? slots[i] : pending[from];
  }
  hp.resize(slots.size());
  pending.resize(slots.size());
  keep_dirty_[static_cast<size_t>(seq)] = 1;
  auto& stats_all = head_stats_[static_cast<size_t>(seq)];
  if (stats_all.size() == heads) {
    std::vector<float>& st = stats_all[idx];
    st.resize(static_cast<size_t>(n), 0.f);  // tokens appended since the last read start at 0
    for (size_t i = 0; i < slots.size(); ++i) st[i] = st[static_cast<size_t>(slots[i])];
    st.resize(slots.size());
  }
  return ok_status();
}

float* CudaBackend::head_token_stats(int layer, int seq, int head) {
  const std::vector<int32_t>* cur = head_positions(layer, seq, head);
  if (!stats_on_ || cur == nullptr) return nullptr;
  const size_t heads = static_cast<size_t>(kv_.n_layer) * kv_.n_head_kv;
  auto& stats_all = head_stats_[static_cast<size_t>(seq)];
  if (stats_all.size() != heads) stats_all.assign(heads, {});
  std::vector<float>& st = stats_all[static_cast<size_t>(layer) * kv_.n_head_kv + head];
  st.resize(cur->size(), 0.f);
  return st.data();
}

Result<bool> CudaBackend::round_stats(int seq, const std::vector<RoundStatsRequest>& layers,
                                      std::vector<std::vector<HeadRoundStats>>& out) {
  if (seq < 0 || seq >= kv_.n_seq || layers.size() != static_cast<size_t>(kv_.n_layer)) {
    return fail(ErrorCode::kInvalidArgument, "kv round statistics: sequence ", seq, " with ", layers.size(),
                " layer requests; the device cache has ", kv_.n_seq, " sequences and ", kv_.n_layer, " layers");
  }
  const int hkv = kv_.n_head_kv, hd = kv_.head_dim;
  // FRUGAL_CUDA_PROFILE: the clock is read only then.
  using PClock = std::chrono::steady_clock;
  const bool prof = profiling();
  const auto now = [prof] { return prof ? PClock::now() : PClock::time_point{}; };
  const auto ms = [](PClock::time_point a, PClock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  const auto p0 = now();
  // A round queued since the last step: move the rows now, so they sit where the positions say.
  if (keep_dirty_[static_cast<size_t>(seq)]) FRUGAL_RETURN_IF_ERROR(apply_keeps(seq));
  const auto up = [](size_t b) { return (b + 255) / 256 * 256; };
  // Per layer: where its queries, positions, sums and similarities sit in the in and out buffers.
  struct Plan {
    int32_t n = 0, n_cand = 0;
    int n_rep = 1, nq = 0;
    bool ring = false;  // the queries are in this backend's rings (the request's queries null)
    size_t q = 0, qpos = 0, sums = 0, sim = 0;
  };
  std::vector<Plan> plan(layers.size());
  size_t in_bytes = 0, out_bytes = 0, probs_bytes = 0, inv_bytes = 0;
  for (size_t l = 0; l < layers.size(); ++l) {
    const RoundStatsRequest& rq = layers[l];
    Plan& p = plan[l];
    p.n = static_cast<int32_t>(head_positions(static_cast<int>(l), seq, 0)->size());
    for (int h = 1; h < hkv; ++h) {
      if (static_cast<int32_t>(head_positions(static_cast<int>(l), seq, h)->size()) != p.n) return false;
    }
    const bool attention = rq.attention && rq.nq > 0;
    if (attention) {
      p.ring = rq.queries == nullptr;
      if (p.ring && (qring_ == nullptr || rq.nq > qring_rows_ || rq.n_head != cfg_.n_head)) {
        // (nq <= the rows: the newest nq positions are consecutive, so each has its own row)
        return fail(ErrorCode::kInvalidArgument, "kv round statistics: layer ", l, " asks for ", rq.nq,
                    " queries kept on the device, which holds ",
                    qring_ == nullptr ? std::string("none") : std::to_string(qring_rows_) + " per sequence");
      }
      if (rq.n_head <= 0 || rq.n_head % hkv != 0 || rq.n_head / hkv > kRoundStatsMaxRep || rq.head_dim != hd ||
          rq.ring_rows < rq.nq) {
        if (p.ring) {
          return fail(ErrorCode::kInvalidArgument, "kv round statistics: layer ", l, "'s request (", rq.n_head,
                      " query heads of ", rq.head_dim, ", ring of ", rq.ring_rows, " for ", rq.nq,
                      " queries) does not match the device cache");
        }
        return false;
      }
      p.n_rep = rq.n_head / hkv;
      p.nq = rq.nq;
    }
    p.n_cand = std::clamp(rq.similarity_candidates, 0, p.n);
    // Queries from the host, or, from the rings, the ring row of each (its position's).
    const size_t qf = p.ring ? 0 : static_cast<size_t>(p.nq) * p.n_rep * hkv * hd;
    p.q = in_bytes;
    in_bytes += up((p.ring ? static_cast<size_t>(p.nq) : qf) * 4);
    p.qpos = in_bytes;
    in_bytes += up(static_cast<size_t>(p.nq) * 4);
    p.sums = out_bytes;
    out_bytes += up((p.nq > 0 ? static_cast<size_t>(hkv) * 3 * p.n : 0) * 4);
    p.sim = out_bytes;
    out_bytes += up(static_cast<size_t>(hkv) * p.n_cand * 4);
    probs_bytes = std::max(probs_bytes, up(static_cast<size_t>(p.n_rep) * hkv * p.nq * p.n * 4));
    inv_bytes = std::max(inv_bytes, up(static_cast<size_t>(hkv) * p.n_cand * 4) +
                                        up(static_cast<size_t>(hkv) * round_stats_chunks(p.n_cand) * hd * 4));
  }
  const size_t dev_bytes = in_bytes + out_bytes + probs_bytes + inv_bytes;
  if (dev_bytes > rs_dev_bytes_) {
    if (rs_dev_ != nullptr) {
      FRUGAL_CUDA(cudaStreamSynchronize(stream_));
      cudaFree(rs_dev_);
      rs_dev_ = nullptr;
      rs_dev_bytes_ = 0;
    }
    FRUGAL_CUDA(cudaMalloc(&rs_dev_, dev_bytes));
    rs_dev_bytes_ = dev_bytes;
  }
  if (std::max(in_bytes, out_bytes) > rs_host_bytes_) {
    if (rs_host_ != nullptr) cudaFreeHost(rs_host_);
    rs_host_ = nullptr;
    rs_host_bytes_ = 0;
    FRUGAL_CUDA(cudaMallocHost(&rs_host_, std::max(in_bytes, out_bytes)));
    rs_host_bytes_ = std::max(in_bytes, out_bytes);
  }
  char* d_in = rs_dev_;
  char* d_out = rs_dev_ + in_bytes;
  auto* probs = reinterpret_cast<float*>(rs_dev_ + in_bytes + out_bytes);
  auto* inv = reinterpret_cast<float*>(rs_dev_ + in_bytes + out_bytes + probs_bytes);
  // The queries oldest first, straight from each layer's ring into the pinned buffer.
  for (size_t l = 0; l < layers.size(); ++l) {
    const Plan& p = plan[l];
    const RoundStatsRequest& rq = layers[l];
    const size_t row = static_cast<size_t>(p.n_rep) * hkv * hd;
    auto* q = reinterpret_cast<float*>(rs_host_ + p.q);
    auto* qslot = reinterpret_cast<int32_t*>(rs_host_ + p.q);
    auto* qpos = reinterpret_cast<int32_t*>(rs_host_ + p.qpos);
    for (int j = 0; j < p.nq; ++j) {
      qpos[j] = request_pos(rq, j);
      if (p.ring) {
        qslot[j] = qpos[j] % qring_rows_;
        if (qpos[j] < 0 || qring_pos_[static_cast<size_t>(seq) * qring_rows_ + qslot[j]] != qpos[j]) {
          return fail(ErrorCode::kInvalidArgument, "kv round statistics: the query of sequence ", seq, " at position ",
                      qpos[j], " is not in the device's ring (layer ", l, ")");
        }
      } else {
        std::memcpy(q + j * row, request_query(rq, j), row * sizeof(float));
      }
    }
  }
  const auto p1 = now();
  if (prof) {
    round_prof_.prep_ms += ms(p0, p1);
    profile_step_begin(stream_);  // the kernels below join the per-kernel profile
  }
  if (in_bytes > 0) FRUGAL_CUDA(cudaMemcpyAsync(d_in, rs_host_, in_bytes, cudaMemcpyHostToDevice, stream_));
  for (size_t l = 0; l < layers.size(); ++l) {
    const Plan& p = plan[l];
    const RoundStatsRequest& rq = layers[l];
    RoundStatsDev a;
    a.k = kv_.k + kv_slot0(kv_, static_cast<int>(l), seq, 0) * static_cast<int64_t>(hd);
    a.kpos = kv_.pos + kv_slot0(kv_, static_cast<int>(l), seq, 0);
    a.head_stride = kv_.capacity;
    a.n = p.n;
    a.n_head_kv = hkv;
    a.n_rep = p.n_rep;
    a.head_dim = hd;
    if (p.ring) {
      const int64_t row = static_cast<int64_t>(cfg_.n_head) * hd;
      a.q = qring_ + ((static_cast<int64_t>(l) * kv_.n_seq + seq) * qring_rows_) * row;
      a.qslot = reinterpret_cast<const int32_t*>(d_in + p.q);
    } else {
      a.q = reinterpret_cast<const float*>(d_in + p.q);
    }
    a.qpos = reinterpret_cast<const int32_t*>(d_in + p.qpos);
    a.nq = p.nq;
    a.scale = rq.scale;
    a.window = rq.window;
    a.fresh_after = rq.fresh_after;
    a.probs = probs;  // reused layer after layer: the stream orders them
    a.sums = reinterpret_cast<float*>(d_out + p.sums);
    a.n_cand = p.n_cand;
    a.sim = reinterpret_cast<float*>(d_out + p.sim);
    a.inv = inv;
    a.unit_sums = inv + up(static_cast<size_t>(hkv) * p.n_cand * 4) / 4;
    launch_round_stats(a, stream_);
  }
  FRUGAL_RETURN_IF_ERROR(take_launch_error());
  // The pinned buffer held the queries: the copy in is ordered before the copy out on the stream.
  if (out_bytes > 0) FRUGAL_CUDA(cudaMemcpyAsync(rs_host_, d_out, out_bytes, cudaMemcpyDeviceToHost, stream_));
  FRUGAL_CUDA(cudaStreamSynchronize(stream_));
  const auto p2 = now();
  if (prof) {
    profile_step_end();
    round_prof_.device_ms += ms(p1, p2);
  }
  out.resize(layers.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    const Plan& p = plan[l];
    const auto* sums = reinterpret_cast<const float*>(rs_host_ + p.sums);
    const auto* sim = reinterpret_cast<const float*>(rs_host_ + p.sim);
    const auto n = static_cast<size_t>(p.n);
    out[l].resize(static_cast<size_t>(hkv));
    for (int h = 0; h < hkv; ++h) {
      HeadRoundStats& o = out[l][static_cast<size_t>(h)];
      if (p.nq > 0) {
        const float* b = sums + static_cast<size_t>(h) * 3 * n;
        o.attention.assign(b, b + n);
        o.last.assign(b + n, b + 2 * n);
        o.fresh.assign(b + 2 * n, b + 3 * n);
      } else {
        o.attention.clear();
        o.last.clear();
        o.fresh.clear();
      }
      o.similarity.assign(sim + static_cast<size_t>(h) * p.n_cand, sim + static_cast<size_t>(h + 1) * p.n_cand);
    }
  }
  if (prof) {
    round_prof_.unpack_ms += ms(p2, now());
    ++round_prof_.calls;
  }
  watch_memory("a round's statistics");
  return true;
}

Status CudaBackend::apply_keeps(int only) {
  for (int s = 0; s < kv_.n_seq; ++s) {
    if (only >= 0 && s != only) continue;
    if (!keep_dirty_[static_cast<size_t>(s)]) continue;
    keep_dirty_[static_cast<size_t>(s)] = 0;
    auto& keep_all = keep_[static_cast<size_t>(s)];
    const auto clear_pending = [&] {
      for (auto& k : keep_all) k.clear();  // their capacity stays for the next round
    };
    const auto& hp_all = head_pos_[static_cast<size_t>(s)];
    const size_t kept = hp_all[0].size();
    const size_t held = seq_pos_[static_cast<size_t>(s)].size();
    // The map, [head][kept], in pinned memory: a small asynchronous copy.
    int32_t* map = keep_host_;
    for (size_t h = 0; h < hp_all.size(); ++h) {
      if (hp_all[h].size() != kept) {
        clear_pending();
        return fail(ErrorCode::kInvalidArgument, "kv keep: sequence ", s, " would hold ", kept, " tokens in its first head and ",
                    hp_all[h].size(), " in head ", h, " (layer x head); the device cache keeps one count per sequence, so ",
                    "a round must cut every head alike");
      }
      int32_t* m = map + h * kept;
      const auto& pending = keep_all[h];
      for (size_t i = 0; i < kept; ++i) m[i] = pending.empty() ? static_cast<int32_t>(i) : pending[i];
      if (pending.empty() && kept != held) {
        clear_pending();
        return fail(ErrorCode::kInvalidArgument, "kv keep: head ", h, " of sequence ", s, " was not thinned but holds ", kept,
                    " of ", held, " rows");
      }
    }
    FRUGAL_CUDA(cudaMemcpyAsync(keep_map_, map, hp_all.size() * kept * sizeof(int32_t), cudaMemcpyHostToDevice,
                                stream_));
    launch_kv_compact(kv_, s, keep_map_, static_cast<int>(kept), stream_);
    FRUGAL_RETURN_IF_ERROR(take_launch_error());
    // The next sequence's map reuses the pinned buffer: the copy must have read this one.
    FRUGAL_CUDA(cudaStreamSynchronize(stream_));
    seq_pos_[static_cast<size_t>(s)] = hp_all[0];
    clear_pending();
    watch_memory("a compaction");
  }
  return ok_status();
}

void CudaBackend::watch_memory(const char* after) {
  if (trace_level() < 1) return;
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  const size_t used = total_b - free_b;
  const size_t mib = size_t{1} << 20;
  const size_t moved = used > mem_seen_ ? used - mem_seen_ : mem_seen_ - used;
  if (mem_seen_ != 0 && moved < mib) return;
  uint64_t graphs = 0;
  for (const auto& [key, exec] : graphs_) graphs += exec != nullptr ? 1 : 0;
  const auto in_mib = [&](size_t b) { return static_cast<uint64_t>(b / mib); };
  trace(1, "device memory ", in_mib(used), " MiB in use after ", after, " (",
        mem_seen_ == 0 ? std::string("first reading") : cat(used >= mem_seen_ ? "+" : "-", in_mib(moved), " MiB"),
        "); graphs ", graphs, ", round scratch ", in_mib(rs_dev_bytes_), " MiB, query capture rows ",
        static_cast<int64_t>(qcap_cap_));
  mem_seen_ = used;
}

void CudaBackend::read_head_rows(int layer, int seq, int head, float* k, float* v) {
  const std::vector<int32_t>* cur = head_positions(layer, seq, head);
  if (cur == nullptr) return;
  const size_t n = cur->size(), hd = static_cast<size_t>(kv_.head_dim);
  // No compaction here: a round thins the heads one after another and reads each head's keys
  // before choosing, so while it runs some heads are thinned and others not (the device moves the
  // rows at the next step, when every head is cut alike). A head with a pending keep holds device
  // slots pending[i]; the others hold slots 0 .. n - 1.
  const size_t idx = static_cast<size_t>(layer) * kv_.n_head_kv + head;
  const auto& keep_all = keep_[static_cast<size_t>(seq)];
  const std::vector<int32_t>* pending =
      keep_dirty_[static_cast<size_t>(seq)] && idx < keep_all.size() && !keep_all[idx].empty() ? &keep_all[idx]
                                                                                                  : nullptr;
  const size_t rows = pending != nullptr ? seq_pos_[static_cast<size_t>(seq)].size() : n;
  std::vector<uint16_t> h(rows * hd);
  const int64_t base = kv_slot0(kv_, layer, seq, head) * static_cast<int64_t>(hd);
  for (int which = 0; which < 2; ++which) {
    float* out = which == 0 ? k : v;
    if (out == nullptr) continue;
    cudaError_t e = cudaMemcpyAsync(h.data(), (which == 0 ? kv_.k : kv_.v) + base, rows * hd * sizeof(__half),
                                    cudaMemcpyDeviceToHost, stream_);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
    // Rows that cannot be read are NaN, never stale numbers.
    for (size_t i = 0; i < n; ++i) {
      const size_t from = pending != nullptr ? static_cast<size_t>((*pending)[i]) : i;
      for (size_t d = 0; d < hd; ++d) out[i * hd + d] = e == cudaSuccess && from < rows ? fp16_to_f32(h[from * hd + d]) : NAN;
    }
  }
}

// Test hooks: a one-off stream, cuBLAS handle and weight.
struct OneShot {
  cudaStream_t s = nullptr;
  Gemm gemm;
  DeviceArena arena;
  ~OneShot() {
    if (gemm.handle() != nullptr) cublas().set_stream(gemm.handle(), nullptr);
    if (s != nullptr) cudaStreamDestroy(s);
  }
  Status init() {
    FRUGAL_CUDA(cudaStreamCreate(&s));
    return gemm.init(s);
  }
};

__global__ void fill_random_bf16(__nv_bfloat16* p, int64_t n, uint32_t seed) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  p[i] = __float2bfloat16_rn(static_cast<float>(h & 0xFFFF) / 65536.f - 0.5f);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

Result<DeviceInfo> device_info(int device) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    return fail(ErrorCode::kNotFound, "no usable CUDA device: ", cudaGetErrorString(e));
  }
  if (count <= device) return fail(ErrorCode::kNotFound, "no CUDA device ", device, " (", count, " present)");
  cudaDeviceProp p{};
  FRUGAL_CUDA(cudaGetDeviceProperties(&p, device));
  FRUGAL_CUDA(cudaSetDevice(device));
  DeviceInfo d;
  d.name = p.name;
  d.cc_major = p.major;
  d.cc_minor = p.minor;
  d.sm_count = p.multiProcessorCount;
  size_t free_b = 0, total_b = 0;
  FRUGAL_CUDA(cudaMemGetInfo(&free_b, &total_b));
  d.free_bytes = free_b;
  d.total_bytes = total_b;
  cudaDriverGetVersion(&d.driver_version);
  cudaRuntimeGetVersion(&d.runtime_version);
  return d;
}

Status matmul_on_device(const WeightTensor& w, const float* x, int64_t n, float* y, bool float_activations,
                        bool accumulate) {
  const std::string what = cat("matmul_on_device ", std::string(dtype_name(w.type)), " ", w.rows, "x", w.cols, " n=", n,
                               n <= kGemvMaxTokens ? " (GEMV)" : " (mma or cuBLAS)");
  trace(1, what, ": stream, cuBLAS handle");
  OneShot o;
  FRUGAL_RETURN_IF_ERROR(o.init());
  if (float_activations) o.gemm.set_q8(false);
  trace(1, what, ": upload");
  DevWeight dw;
  FRUGAL_RETURN_IF_ERROR(o.gemm.upload(w, "test", o.arena, &dw));
  FRUGAL_RETURN_IF_ERROR(o.gemm.reserve(n));
  float *dx = nullptr, *dy = nullptr;
  FRUGAL_RETURN_IF_ERROR(o.arena.alloc(static_cast<size_t>(n * w.cols), &dx));
  FRUGAL_RETURN_IF_ERROR(o.arena.alloc(static_cast<size_t>(n * w.rows), &dy));
  FRUGAL_CUDA(cudaMemcpy(dx, x, static_cast<size_t>(n * w.cols) * 4, cudaMemcpyHostToDevice));
  if (accumulate) {
    FRUGAL_CUDA(cudaMemcpy(dy, y, static_cast<size_t>(n * w.rows) * 4, cudaMemcpyHostToDevice));
  } else {
    // Poison the output so an unwritten element cannot pass.
    FRUGAL_CUDA(cudaMemset(dy, 0xFF, static_cast<size_t>(n * w.rows) * 4));
  }
  trace(1, what, ": product");
  o.gemm.run(dw, dx, static_cast<int>(n), dy, nullptr, accumulate);
  FRUGAL_RETURN_IF_ERROR(o.gemm.take_error());
  FRUGAL_RETURN_IF_ERROR(take_launch_error());
  FRUGAL_CUDA(cudaGetLastError());
  trace(1, what, ": synchronize");
  FRUGAL_CUDA(cudaStreamSynchronize(o.s));
  FRUGAL_CUDA(cudaMemcpy(y, dy, static_cast<size_t>(n * w.rows) * 4, cudaMemcpyDeviceToHost));
  trace(1, what, ": done");
  return ok_status();
}

Result<ProductTiming> time_product_on_device(const WeightTensor* const* ws, int count, int64_t n, int reps,
                                             bool fresh_input) {
  if (count < 1 || count > 3 || n < 1 || reps < 1) {
    return fail(ErrorCode::kInvalidArgument, "time_product_on_device: ", count, " weights, ", n, " tokens, ", reps,
                " repetitions");
  }
  OneShot o;
  FRUGAL_RETURN_IF_ERROR(o.init());
  uint64_t bytes = 0;
  for (int i = 0; i < count; ++i) bytes += static_cast<uint64_t>(ws[i]->rows) * ws[i]->row_stride;
  // Copies of the weights cycled through, 256 MiB at least: a weight read again from a 50 MB L2
  // would time the cache, not the weight stream of a step.
  const int copies = static_cast<int>(std::min<uint64_t>(64, (uint64_t{256} << 20) / std::max<uint64_t>(bytes, 1) + 1));
  std::vector<std::array<DevWeight, 3>> dw(static_cast<size_t>(copies));
  std::vector<std::array<const DevWeight*, 3>> dp(static_cast<size_t>(copies));
  float* dy[3] = {};
  const float* nob[3] = {};
  for (int c = 0; c < copies; ++c) {
    for (int i = 0; i < count; ++i) {
      FRUGAL_RETURN_IF_ERROR(o.gemm.upload(*ws[i], "bench", o.arena, &dw[c][i]));
      dp[c][i] = &dw[c][i];
    }
  }
  for (int i = 0; i < count; ++i) FRUGAL_RETURN_IF_ERROR(o.arena.alloc(static_cast<size_t>(n * ws[i]->rows), &dy[i]));
  FRUGAL_RETURN_IF_ERROR(o.gemm.reserve(n));
  float* dx = nullptr;
  FRUGAL_RETURN_IF_ERROR(o.arena.alloc(static_cast<size_t>(n * ws[0]->cols), &dx));
  FRUGAL_CUDA(cudaMemset(dx, 0, static_cast<size_t>(n * ws[0]->cols) * 4));
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  FRUGAL_CUDA(cudaEventCreate(&e0));
  FRUGAL_CUDA(cudaEventCreate(&e1));
  ProductTiming t;
  t.weight_bytes = bytes;
  o.gemm.set_mma(true);
  const bool gemv = n <= kGemvMaxTokens;
  t.mma_used = !gemv && o.gemm.mma_on();
  for (int mode = 0; mode < (gemv ? 1 : 2); ++mode) {
    o.gemm.set_mma(mode == 0);
    for (int c = 0; c < copies; ++c) o.gemm.run_set(dp[c].data(), dy, nob, count, dx, static_cast<int>(n));  // warm-up
    FRUGAL_CUDA(cudaStreamSynchronize(o.s));
    // The repetitions as one graph, as a decode step runs: launched one by one from the host,
    // products of ~10 us wait on the launches rather than on the GPU.
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    FRUGAL_CUDA(cudaStreamBeginCapture(o.s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < reps; ++i) {
      // A fresh input each time (as in a step), so the 2-byte copy is made per product as there.
      if (fresh_input) o.gemm.new_input();
      o.gemm.run_set(dp[static_cast<size_t>(i % copies)].data(), dy, nob, count, dx, static_cast<int>(n));
    }
    FRUGAL_CUDA(cudaStreamEndCapture(o.s, &graph));
    const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    FRUGAL_CUDA(inst);
    FRUGAL_CUDA(cudaGraphLaunch(exec, o.s));  // warm-up
    FRUGAL_CUDA(cudaEventRecord(e0, o.s));
    FRUGAL_CUDA(cudaGraphLaunch(exec, o.s));
    FRUGAL_CUDA(cudaEventRecord(e1, o.s));
    FRUGAL_CUDA(cudaEventSynchronize(e1));
    cudaGraphExecDestroy(exec);
    float ms = 0;
    FRUGAL_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    (gemv ? t.gemv_us : (mode == 0 ? t.mma_us : t.cublas_us)) = 1000.0 * ms / reps;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  FRUGAL_RETURN_IF_ERROR(o.gemm.take_error());
  FRUGAL_RETURN_IF_ERROR(take_launch_error());
  return t;
}

Status get_rows_on_device(const WeightTensor& w, const int32_t* ids, int64_t n, float* y) {
  trace(1, "get_rows_on_device ", std::string(dtype_name(w.type)), " ", w.rows, "x", w.cols, " n=", n);
  OneShot o;
  FRUGAL_RETURN_IF_ERROR(o.init());
  DevWeight dw;
  FRUGAL_RETURN_IF_ERROR(o.gemm.upload(w, "test", o.arena, &dw));
  int32_t* di = nullptr;
  float* dy = nullptr;
  FRUGAL_RETURN_IF_ERROR(o.arena.alloc(static_cast<size_t>(n), &di));
  FRUGAL_RETURN_IF_ERROR(o.arena.alloc(static_cast<size_t>(n * w.cols), &dy));
  FRUGAL_CUDA(cudaMemcpy(di, ids, static_cast<size_t>(n) * 4, cudaMemcpyHostToDevice));
  FRUGAL_CUDA(cudaMemset(dy, 0xFF, static_cast<size_t>(n * w.cols) * 4));
  launch_get_rows(dw, di, static_cast<int>(n), dy, o.s);
  FRUGAL_RETURN_IF_ERROR(take_launch_error());
  FRUGAL_CUDA(cudaGetLastError());
  FRUGAL_CUDA(cudaStreamSynchronize(o.s));
  FRUGAL_CUDA(cudaMemcpy(y, dy, static_cast<size_t>(n * w.cols) * 4, cudaMemcpyDeviceToHost));
  return ok_status();
}

Status greedy_tokens_on_device(const float* logits, int rows, int64_t n_vocab, int32_t* out) {
  OneShot o;
  FRUGAL_RETURN_IF_ERROR(o.init());
  float* dl = nullptr;
  int32_t* dout = nullptr;
  FRUGAL_RETURN_IF_ERROR(o.arena.alloc(static_cast<size_t>(rows * n_vocab), &dl));
  FRUGAL_RETURN_IF_ERROR(o.arena.alloc(static_cast<size_t>(rows), &dout));
  FRUGAL_CUDA(cudaMemcpy(dl, logits, static_cast<size_t>(rows * n_vocab) * 4, cudaMemcpyHostToDevice));
  FRUGAL_CUDA(cudaMemset(dout, 0xFF, static_cast<size_t>(rows) * 4));  // -1: a row nothing wrote
  launch_argmax_rows(dl, rows, n_vocab, dout, o.s);
  FRUGAL_RETURN_IF_ERROR(take_launch_error());
  FRUGAL_CUDA(cudaGetLastError());
  FRUGAL_CUDA(cudaStreamSynchronize(o.s));
  FRUGAL_CUDA(cudaMemcpy(out, dout, static_cast<size_t>(rows) * 4, cudaMemcpyDeviceToHost));
  return ok_status();
}

Result<Roofline> measure_roofline(uint64_t bytes, int dim, int reps) {
  trace(1, "roofline: copies of ", bytes, " bytes, BF16 GEMM ", dim, "^3");
  OneShot o;
  FRUGAL_RETURN_IF_ERROR(o.init());
  Roofline r;
  cudaEvent_t e0, e1;
  FRUGAL_CUDA(cudaEventCreate(&e0));
  FRUGAL_CUDA(cudaEventCreate(&e1));
  uint8_t *a = nullptr, *b = nullptr;
  FRUGAL_RETURN_IF_ERROR(o.arena.alloc(bytes, &a));
  FRUGAL_RETURN_IF_ERROR(o.arena.alloc(bytes, &b));
  FRUGAL_CUDA(cudaMemsetAsync(a, 0x5A, bytes, o.s));
  std::vector<double> t;
  for (int i = 0; i < reps + 2; ++i) {
    FRUGAL_CUDA(cudaEventRecord(e0, o.s));
    FRUGAL_CUDA(cudaMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, bytes, cudaMemcpyDeviceToDevice, o.s));
    FRUGAL_CUDA(cudaEventRecord(e1, o.s));
    FRUGAL_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    FRUGAL_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 2) t.push_back(ms);
  }
  r.copy_bytes_per_s = 2.0 * static_cast<double>(bytes) / (median(t) * 1e-3);
  const int64_t n = static_cast<int64_t>(dim) * dim;
  __nv_bfloat16 *ma = nullptr, *mb = nullptr;
  float* mc = nullptr;
  FRUGAL_RETURN_IF_ERROR(o.arena.alloc(static_cast<size_t>(n), &ma));
  FRUGAL_RETURN_IF_ERROR(o.arena.alloc(static_cast<size_t>(n), &mb));
  FRUGAL_RETURN_IF_ERROR(o.arena.alloc(static_cast<size_t>(n) * 2, &mc));  // bf16 output
  fill_random_bf16<<<static_cast<unsigned>((n + 255) / 256), 256, 0, o.s>>>(ma, n, 1u);
  fill_random_bf16<<<static_cast<unsigned>((n + 255) / 256), 256, 0, o.s>>>(mb, n, 2u);
  FRUGAL_CUDA(cudaGetLastError());
  const float alpha = 1.f, beta = 0.f;
  t.clear();
  for (int i = 0; i < reps + 3; ++i) {
    FRUGAL_CUDA(cudaEventRecord(e0, o.s));
    FRUGAL_CUBLAS(cublas().gemm_ex(o.gemm.handle(), CUBLAS_OP_N, CUBLAS_OP_N, dim, dim, dim, &alpha, ma, CUDA_R_16BF, dim,
                               mb, CUDA_R_16BF, dim, &beta, mc, CUDA_R_16BF, dim, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
    FRUGAL_CUDA(cudaEventRecord(e1, o.s));
    FRUGAL_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    FRUGAL_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 3) t.push_back(ms);
  }
  r.bf16_flops = 2.0 * static_cast<double>(dim) * dim * dim / (median(t) * 1e-3);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return r;
}

namespace {

// Exit/signal trace state. Written before the handlers can run; read in them with async-signal-safe
// calls only (write, backtrace_symbols_fd).
char g_who[64] = "";
char g_step[256] = "";
std::atomic<bool> g_exit_trace_on{false};
std::atomic<bool> g_exit_finished{false};
std::atomic<bool> g_expect_finish{true};

void write_str(const char* s) {
  const size_t n = std::strlen(s);
  ssize_t r = ::write(2, s, n);
  (void)r;
}

void print_trace(const char* what) {
  write_str(g_who);
  write_str(": ");
  write_str(what);
  if (g_step[0] != 0) {
    write_str(" during [");
    write_str(g_step);
    write_str("]");
  }
  const char* phase = phase_text();
  if (phase[0] != 0) {
    write_str(", last cuda phase [");
    write_str(phase);
    write_str("]");
  }
  write_str("; stack (library+offset: addr2line -e LIB OFFSET):\n");
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, 2);
}

void on_exit_trace() {
  if (!g_exit_trace_on.load() || g_exit_finished.load()) return;
  print_trace(g_expect_finish.load()
                  ? "exit() called before the normal end (the stack shows who ended the process)"
                  : "exit() called (a normal end passes here too: when the frames below libc's exit lead "
                    "straight to __libc_start_main, main returned; another library's frames there mean that "
                    "library called exit)");
}

void on_fatal_signal(int sig) {
  char m[] = "fatal signal 00";  // built by hand: snprintf is not async-signal-safe
  m[13] = static_cast<char>('0' + (sig / 10) % 10);
  m[14] = static_cast<char>('0' + sig % 10);
  print_trace(m);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

void install_exit_trace(const char* who, bool expect_finish) {
  std::snprintf(g_who, sizeof g_who, "%s", who);
  g_expect_finish.store(expect_finish);
  if (g_exit_trace_on.exchange(true)) return;
  // backtrace() loads libgcc on first use, which must not happen inside a signal handler.
  void* warm[1];
  (void)backtrace(warm, 1);
  std::atexit(on_exit_trace);
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) std::signal(sig, on_fatal_signal);
}
void finish_exit_trace() { g_exit_finished.store(true); }
void set_trace_step(const char* step) { std::snprintf(g_step, sizeof g_step, "%s", step); }

}  // namespace cuda

Result<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& opts) {
  // FRUGAL_CUDA_TRACE=1: a process that ends without a message names the library that ended it.
  if (cuda::trace_level() >= 1) cuda::install_exit_trace("frugal (cuda backend)", /*expect_finish=*/false);
  FRUGAL_ASSIGN_OR_RETURN(cuda::DeviceInfo info, cuda::device_info(opts.device));
  cuda::trace(1, "device ", opts.device, ": ", info.name, ", cc ", info.cc_major, ".", info.cc_minor, ", ",
              info.sm_count, " SMs, ", info.free_bytes, " of ", info.total_bytes, " bytes free, driver ",
              info.driver_version, ", runtime ", info.runtime_version);
  CpuBackendOptions co;
  co.n_threads = opts.cpu_threads;
  auto be = std::make_unique<cuda::CudaBackend>(opts, make_cpu_backend(co));
  FRUGAL_RETURN_IF_ERROR(be->init());
  return std::unique_ptr<Backend>(std::move(be));
}

}  // namespace frugal
