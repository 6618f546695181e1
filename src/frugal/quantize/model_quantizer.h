// `frugal quantize`: a GGUF model in, the same model with its weights in other types out, the
// way llama-quantize writes it (same per-tensor types, same bytes, same metadata order), so
// llama.cpp loads our files and the two tools' outputs can be compared byte for byte.
//
// Everything that can be wrong with the input (unknown names, a quantized input without
// allow_requantize, an imatrix of the wrong shape, a missing imatrix where a type needs one) is
// found before the output is created; the output is streamed through an AtomicFile, so a failure
// or an interrupt later on leaves no file behind.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "frugal/core/dtype.h"
#include "frugal/core/status.h"
#include "frugal/quant/hbq.h"
#include "frugal/quant/nvfp4_hscale.h"
#include "frugal/quantize/imatrix_file.h"
#include "frugal/quantize/mix_rules.h"
#include "frugal/quantize/ocg_fold.h"
#include "frugal/quantize/target.h"

namespace frugal::quantize {

// A --tensor-type rule: tensors whose name matches the regular expression `pattern` (searched
// anywhere in the name, first rule wins) get `type`, after the mix rules.
struct TensorTypeRule {
  std::string pattern;
  DType type;
};

struct TensorProgress {
  int index = 0;  // 1-based
  int count = 0;
  std::string name;
  DType from = DType::kF32;
  DType to = DType::kF32;
  bool quantized = false;     // false: copied as it was
  bool used_imatrix = false;
  uint64_t bytes_in = 0;      // of the input tensor
  uint64_t bytes_out = 0;
};

// How NVFP4 tensors get their per-16 UE4M3 scales.
enum class Nvfp4Scale {
  kRtn,     // amax / 6 rounded to E4M3 (NVIDIA Model-Optimizer's rule)
  kHScale,  // H-Scale's search (quant/nvfp4_hscale.h), weighted by the imatrix where it has the tensor
};

struct QuantizeOptions {
  std::string input;
  std::string output;
  Target target{};
  MixOptions mix;                         // pure, output/token-embedding types (has_imatrix is set from `imatrix`)
  const Imatrix* imatrix = nullptr;       // read with read_imatrix(); nullptr: none
  std::string imatrix_path;               // recorded in the output's metadata
  std::vector<TensorTypeRule> tensor_types;
  // Exact tensor name -> type, applied last (over the mix rules and tensor_types): a mixed-precision
  // allocation such as FAMPWQ's (bit_allocator.h). Every name must be a quantizable tensor.
  std::map<std::string, DType> assigned_types;
  // Extra string metadata written to the output (provenance, e.g. quantize.fampwq.*); readers
  // need none of it.
  std::vector<std::pair<std::string, std::string>> provenance;
  bool allow_requantize = false;          // accept quantized input tensors (dequantized first)
  Nvfp4Scale nvfp4_scale = Nvfp4Scale::kRtn;  // kHScale needs at least one NVFP4 tensor in the plan
  int hscale_radius = quant::kHScaleDefaultRadius;  // candidates on each side of RTN's code, 0..kHScaleMaxRadius
  // HBQ tensors' second-level multipliers: the paper's significand sets, or the power-of-two or
  // integer sets it compares them with (quant/hbq.h); same layout and kernels for all three.
  quant::HbqScaleStrategy hbq_scale = quant::HbqScaleStrategy::kSig;
  // Outlier-Companion Grouping (ocg_fold.h): channel orders from `imatrix` (required) folded into
  // the weights before they are quantized. Needs a type with NVFP4 tensors, or a float type
  // (F32, F16, BF16: the reordering alone), and float input weights for every tensor it reorders.
  bool ocg = false;
  int n_threads = 0;                      // 0: one per CPU
  std::function<void(const TensorProgress&)> on_tensor;  // after each tensor is written
  const std::atomic<bool>* cancel = nullptr;            // set: stop, remove the partial output
};

struct QuantizeReport {
  int n_tensors = 0;
  int n_quantized = 0;
  int n_fallback = 0;           // tensors whose row length forced another type
  int n_imatrix_missing = 0;    // quantized tensors the imatrix had no entry for
  uint64_t input_tensor_bytes = 0;
  uint64_t output_tensor_bytes = 0;
  uint64_t output_file_bytes = 0;
  std::vector<OcgSite> ocg_sites;  // with QuantizeOptions::ocg: each reordered activation
  double seconds = 0;
};

Result<QuantizeReport> quantize_model(const QuantizeOptions& opts);

}  // namespace frugal::quantize
