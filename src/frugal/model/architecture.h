// Registry of supported architectures, keyed by general.architecture. Each architecture is one
// file (arch_*.cc) that reads its hyperparameters and binds its tensors; the forward pass is the
// shared one in model.cc, steered by the flags in ModelConfig. Nothing else switches on the
// architecture name.
#pragma once

#include <string>
#include <vector>

#include "frugal/model/model.h"

namespace frugal {

struct Architecture {
  const char* name;
  Status (*read_config)(const GgufFile& f, ModelConfig& cfg);
  Status (*bind_weights)(const GgufFile& f, const ModelConfig& cfg, ModelWeights& w);
};

const Architecture* find_architecture(const std::string& name);
std::vector<std::string> architecture_names();

// Shared by the llama-family architectures.
Status read_llama_like_config(const GgufFile& f, ModelConfig& cfg);
Status bind_llama_like_weights(const GgufFile& f, const ModelConfig& cfg, ModelWeights& w);

// Tensor binding helpers: check shape (ggml order dims) and type; messages name the tensor.
// A kFLUXBIN weight's companions (quant/fluxbin.h): "<base>.fluxbin_cols", and for the hybrid
// "<base>.fluxbin_sidx" and "<base>.fluxbin_svals"; a missing or malformed one is an error naming it.
Result<FluxBinParts> bind_fluxbin_parts(const GgufFile& f, const std::string& weight_name, int64_t cols, int64_t rows);
Result<WeightTensor> bind_matrix(const GgufFile& f, const std::string& name, int64_t cols, int64_t rows);
Result<std::vector<float>> load_vector(const GgufFile& f, const std::string& name, int64_t n);
bool has_tensor(const GgufFile& f, const std::string& name);
// NVFP4's per-tensor FP32 global scale lives in a companion tensor: "blk.0.attn_q.weight" has
// "blk.0.attn_q.scale" (one f32; llama.cpp's naming of these per-tensor scales). A file without
// it reads as scale 1; a malformed one is an error naming it.
std::string global_scale_name(const std::string& weight_name);
Result<float> read_global_scale(const GgufFile& f, const std::string& weight_name);

}  // namespace frugal
