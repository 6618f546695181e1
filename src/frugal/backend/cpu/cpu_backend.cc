#include "frugal/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

#include "frugal/backend/cpu/simd_ops.h"
#include "frugal/quant/fluxbin.h"
#include "frugal/quant/simd_kernels.h"
#include "frugal/quant/type_traits.h"

namespace frugal {
namespace cpu {
namespace {

// Below these sizes an op runs on the calling thread: waking the pool costs more than it saves.
constexpr int64_t kParallelElems = 32 * 1024;
constexpr int64_t kParallelExpElems = 8 * 1024;  // swiglu: exp makes each element dearer

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

void* AlignedBuffer::ensure(size_t bytes) {
  if (bytes <= size_ && p_) return p_.get();
  // Grow geometrically so a slowly growing batch does not reallocate every call.
  const size_t want = std::max(bytes, size_ + size_ / 2);
  const size_t rounded = (want + 63) / 64 * 64 + 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) throw std::bad_alloc();
  p_.reset(p);
  size_ = rounded - 64;  // keep 64 bytes of slack for kernels that read a vector past the end
  return p;
}

CpuBackend::CpuBackend(int n_threads) : pool_(n_threads) { scratch_.resize(pool_.size()); }

void CpuBackend::ensure_thread_scratch(size_t bytes) {
  if (bytes <= scratch_bytes_) return;
  for (AlignedBuffer& b : scratch_) b.ensure(bytes);
  scratch_bytes_ = bytes;
}

void CpuBackend::get_rows(const WeightTensor& w, const int32_t* ids, int64_t n, float* y) {
  const TypeTraits* tt = type_traits(w.type);
  ToFloatFn to_float = nullptr;
  if (tt != nullptr) to_float = tt->to_float != nullptr ? tt->to_float : tt->to_float_ref;
  const int64_t cols = w.cols;
  const auto* base = static_cast<const uint8_t*>(w.data);
  auto body = [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      float* dst = y + i * cols;
      const int32_t id = ids[i];
      if (w.type == DType::kFLUXBIN && id >= 0 && id < w.rows) {
        const quant::fluxbin::View v{w.rows, w.cols, w.fluxbin.salient, base, w.fluxbin.col_scales,
                                     w.fluxbin.salient_idx, w.fluxbin.salient_vals};
        quant::fluxbin::dequantize_row(v, id, dst);
        continue;
      }
      if (id < 0 || id >= w.rows || (to_float == nullptr && w.type != DType::kF32)) {
        // Out-of-range ids were rejected by the caller; never read outside the tensor.
        std::fill(dst, dst + cols, 0.f);
        continue;
      }
      if (w.layout == WeightLayout::kQ4_0x8) {
        const int64_t g = id / quant::fast::kQ4x8Rows;
        quant::fast::to_float_q4_0x8_row(base + static_cast<size_t>(g * quant::fast::kQ4x8Rows) * w.row_stride,
                                         id % quant::fast::kQ4x8Rows, cols, dst);
        continue;
      }
      const uint8_t* src = base + static_cast<size_t>(id) * w.row_stride;
      if (w.type == DType::kF32) {
        std::memcpy(dst, src, static_cast<size_t>(cols) * sizeof(float));
      } else {
        to_float(src, dst, cols);
      }
      if (w.scale != 1.f) {
        for (int64_t c = 0; c < cols; ++c) dst[c] *= w.scale;
      }
    }
  };
  const int64_t chunk = std::max<int64_t>(1, kParallelElems / std::max<int64_t>(1, cols));
  pool_.parallel_for(n, chunk, body);
}

void CpuBackend::rms_norm(const float* x, const float* weight, int64_t n_rows, int64_t dim, float eps,
                          float* y) {
  const int64_t chunk = std::max<int64_t>(1, kParallelElems / std::max<int64_t>(1, dim));
  pool_.parallel_for(n_rows, chunk, [&](int64_t b, int64_t e, int) {
    rms_norm_rows(x + b * dim, weight, e - b, dim, eps, y + b * dim);
  });
}

// Angles follow ggml's rope cache: theta_i = pos * base^(-2i/n_rot), built by repeated float
// multiplication, divided by the frequency factor and multiplied by freq_scale, then cosf/sinf.
void CpuBackend::rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos,
                      const RopeParams& p) {
  const int n_rot = std::min<int>(p.n_rot, static_cast<int>(head_dim)) & ~1;
  if (n_rot <= 0 || n_tokens <= 0) return;
  const int half = n_rot / 2;
  ensure_thread_scratch(static_cast<size_t>(n_rot) * sizeof(float));
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(n_rot));
  const int64_t per_token = n_heads * head_dim;
  const int64_t chunk = std::max<int64_t>(1, kParallelElems / std::max<int64_t>(1, per_token));
  pool_.parallel_for(n_tokens, chunk, [&](int64_t b, int64_t e, int thread) {
    float* cos_t = thread_scratch(thread);
    float* sin_t = cos_t + half;
    for (int64_t t = b; t < e; ++t) {
      float theta = static_cast<float>(pos[t]);
      for (int i = 0; i < half; ++i) {
        const float ff = p.freq_factors != nullptr ? p.freq_factors[i] : 1.0f;
        const float angle = p.freq_scale * (theta / ff);
        cos_t[i] = std::cos(angle);
        sin_t[i] = std::sin(angle);
        theta *= theta_scale;
      }
      rope_token(x + t * per_token, n_heads, head_dim, n_rot, p.neox, cos_t, sin_t);
    }
  });
}

void CpuBackend::swiglu(const float* gate, const float* up, int64_t n, float* out) {
  const int64_t chunk = n >= 2 * kParallelExpElems ? ceil_div(n, 4 * pool_.size()) : n;
  pool_.parallel_for(n, std::max<int64_t>(chunk, 256), [&](int64_t b, int64_t e, int) {
    cpu::swiglu(gate + b, up + b, e - b, out + b);
  });
}

void CpuBackend::add(float* x, const float* y, int64_t n) {
  const int64_t chunk = n >= 2 * kParallelElems ? ceil_div(n, 4 * pool_.size()) : n;
  pool_.parallel_for(n, std::max<int64_t>(chunk, 1024), [&](int64_t b, int64_t e, int) {
    cpu::add(x + b, y + b, e - b);
  });
}

}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& opts) {
  return std::make_unique<cpu::CpuBackend>(opts.n_threads > 0 ? opts.n_threads : ThreadPool::available_cpus());
}

}  // namespace frugal
