#include "frugal/quant/w8a8/fault_injection.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "frugal/core/thread_pool.h"

namespace frugal::quant::w8a8 {
namespace {

enum class Fault {
  kScalePrecision,
  kDoubleRounding,
  kMultiplicationOrder,
  kOutputTruncation,
  kFusedOrdering,
  kAccumulatorWrap,
};

// Toward zero: the bf16 value is the float's top half.
float truncate_to_output(float v, OutputType t) {
  if (t != OutputType::kBF16) return v;
  uint32_t u = 0;
  std::memcpy(&u, &v, 4);
  u &= 0xffff0000u;
  float r = 0;
  std::memcpy(&r, &u, 4);
  return r;
}

int32_t dot_i32(const int8_t* a, const int8_t* w, int64_t k) {
  int32_t s = 0;
  for (int64_t i = 0; i < k; ++i) s += static_cast<int32_t>(a[i]) * static_cast<int32_t>(w[i]);
  return s;
}

// The bug: an int16 accumulator, each addition wrapping modulo 2^16 as the narrow register would.
int32_t dot_i16_wrapping(const int8_t* a, const int8_t* w, int64_t k) {
  uint16_t s = 0;
  for (int64_t i = 0; i < k; ++i) {
    s = static_cast<uint16_t>(s + static_cast<uint16_t>(static_cast<int32_t>(a[i]) * static_cast<int32_t>(w[i])));
  }
  return static_cast<int16_t>(s);
}

class FaultKernel final : public Int8GemmKernel {
 public:
  FaultKernel(Fault f, std::string_view name, std::string_view epilogue) : fault_(f), name_(name), epilogue_(epilogue) {}
  std::string_view name() const override { return name_; }
  std::string_view epilogue() const override { return epilogue_; }

  void gemm(const GemmArgs& g) const override {
    const int64_t rows = g.w->rows;
    const int64_t k = g.w->cols;
    const auto run = [&](int64_t r0, int64_t r1, int /*thread*/) {
      for (int64_t t = 0; t < g.a->n; ++t) {
        const int8_t* qa = g.a->q.data() + t * k;
        const float sa = g.a->scale[static_cast<size_t>(t)];
        for (int64_t r = r0; r < r1; ++r) {
          const int8_t* qw = g.w->q.data() + r * k;
          const int32_t acc = fault_ == Fault::kAccumulatorWrap ? dot_i16_wrapping(qa, qw, k) : dot_i32(qa, qw, k);
          const float sw = g.w->scale[static_cast<size_t>(r)];
          const float b = g.bias != nullptr ? g.bias[r] : 0.0f;
          const float fa = static_cast<float>(acc);
          float y = 0;
          switch (fault_) {
            case Fault::kScalePrecision: {
              const float s = round_to_output(sa * sw, OutputType::kBF16);
              y = round_to_output(g.bias != nullptr ? fa * s + b : fa * s, g.out);
              break;
            }
            case Fault::kDoubleRounding: {
              const float v = round_to_output(fa * (sa * sw), g.out);
              y = round_to_output(g.bias != nullptr ? v + b : v, g.out);
              break;
            }
            case Fault::kMultiplicationOrder: {
              const float v = (fa * sw) * sa;
              y = round_to_output(g.bias != nullptr ? v + b : v, g.out);
              break;
            }
            case Fault::kOutputTruncation: {
              const float v = fa * (sa * sw);
              y = truncate_to_output(g.bias != nullptr ? v + b : v, g.out);
              break;
            }
            case Fault::kFusedOrdering:
              y = round_to_output(std::fma(fa, sa * sw, b), g.out);
              break;
            case Fault::kAccumulatorWrap: {
              const float v = fa * (sa * sw);
              y = round_to_output(g.bias != nullptr ? v + b : v, g.out);
              break;
            }
          }
          g.y[t * rows + r] = y;
          if (g.acc != nullptr) g.acc[t * rows + r] = acc;
        }
      }
    };
    if (g.pool != nullptr && g.pool->size() > 1) {
      g.pool->parallel_for(rows, 16, run);
    } else {
      run(0, rows, 0);
    }
  }

 private:
  Fault fault_;
  std::string_view name_, epilogue_;
};

const FaultKernel kFaults[] = {
    {Fault::kScalePrecision, "scale_precision", "fl(acc * bf16(sa * sw)) + b"},
    {Fault::kDoubleRounding, "double_rounding", "out(out(acc * fl(sa * sw)) + b)"},
    {Fault::kMultiplicationOrder, "multiplication_order", "fl(fl(acc * sw) * sa) + b"},
    {Fault::kOutputTruncation, "output_truncation", "truncate(fl(acc * fl(sa * sw)) + b)"},
    {Fault::kFusedOrdering, "fused_ordering", "fma(acc, fl(sa * sw), b)"},
    {Fault::kAccumulatorWrap, "accumulator_wrap", "int16 accumulator, then fl(acc * fl(sa * sw)) + b"},
};

}  // namespace

std::vector<std::string> fault_names() {
  std::vector<std::string> out;
  for (const auto& f : kFaults) out.emplace_back(f.name());
  return out;
}

const Int8GemmKernel* find_fault_kernel(std::string_view name) {
  for (const auto& f : kFaults) {
    if (f.name() == name) return &f;
  }
  return nullptr;
}

}  // namespace frugal::quant::w8a8
