// FAMPWQ's cost table: for every allocation unit (a layer's block matrices together, or one
// tensor) and every candidate type, the size in bytes and the Fisher-weighted squared error
//   cost = sum_i F_i * (W_i - deq(Q(W_i)))^2
// measured by really quantizing and dequantizing the weights with the row quantizers
// `frugal quantize` writes with (with the importance matrix when one is given, as the written
// file will be). The sum is a second-order estimate of the loss increase the quantization causes
// when F is the diagonal of the Fisher information.
#pragma once

#include <vector>

#include "frugal/core/dtype.h"
#include "frugal/core/status.h"
#include "frugal/format/gguf.h"
#include "frugal/quantize/bit_allocator.h"
#include "frugal/quantize/fisher_file.h"
#include "frugal/quantize/imatrix_file.h"

namespace frugal::quantize {

enum class AllocationGranularity {
  kLayer,   // every quantizable matrix of blk.N takes one type (the paper's layer-wise allocation)
  kTensor,  // each matrix on its own
};

struct FisherCostOptions {
  AllocationGranularity granularity = AllocationGranularity::kLayer;
  const Imatrix* imatrix = nullptr;  // passed to the row quantizers, as quantize_model does
  int n_threads = 0;                 // 0: one per CPU
};

// The tensors FAMPWQ allocates: the quantizable matrices inside a layer (blk.N.*). The token
// embedding, the output matrix and anything else outside the layers keep the mix rules' types
// and are not part of the budget.
bool is_allocated_tensor(const GgufTensorInfo& t);

// The candidate types for a unit whose matrices have these row lengths: Q2_K, Q3_K, Q4_K, Q5_K,
// Q6_K, Q8_0, F16 when every row length is a multiple of 256; else Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL,
// Q8_0, F16 when every row length is a multiple of 32; else F16 alone.
std::vector<DType> candidate_types(const std::vector<int64_t>& row_lengths);

// Units in llama-quantize's tensor order (by layer, then name), each with its candidate options.
Result<std::vector<AllocationUnit>> fisher_cost_table(const GgufFile& model, const FisherFile& fisher,
                                                      const FisherCostOptions& opts);

}  // namespace frugal::quantize
