#include "frugal/quant/w8a8/int8_gemm.h"

namespace frugal::quant::w8a8 {
namespace {

const Int8GemmKernel* const kKernels[] = {&scale_product_kernel(), &sequential_fma_kernel()};

}  // namespace

std::vector<std::string> int8_kernel_names() {
  std::vector<std::string> out;
  for (const Int8GemmKernel* k : kKernels) out.emplace_back(k->name());
  return out;
}

const Int8GemmKernel* find_int8_kernel(std::string_view name) {
  for (const Int8GemmKernel* k : kKernels) {
    if (k->name() == name) return k;
  }
  return nullptr;
}

}  // namespace frugal::quant::w8a8
