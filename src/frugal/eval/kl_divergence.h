// llama-perplexity's --kl-divergence-base / --kl-divergence, in its file format: a base model's
// log-probabilities are saved once (16 bits per vocabulary entry), and a quantized model is then
// scored against them token by token on the same windows. Files from either tool work with
// either tool.
//
// File layout (little-endian): "_logits_", u32 n_ctx, i32 n_vocab, i32 n_chunk,
// i32 tokens[n_chunk * n_ctx], then per window and per scored position
// (n_ctx - 1 - n_ctx/2 of them) nv = 2*((n_vocab + 1)/2) + 4 u16: the first four hold two f32
// (scale, min_log_prob), then log p[v] ~= scale * q[v] + min_log_prob (q = 0: below
// max - 16 nats, ignored by the divergence).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "frugal/backend/backend.h"
#include "frugal/core/status.h"
#include "frugal/eval/harness.h"
#include "frugal/model/model.h"

namespace frugal::eval {

// Perplexity as perplexity() computes it, also writing the base file to `path`.
Result<PerplexityResult> save_kl_base(Model& model, Backend& backend, const std::vector<TokenId>& tokens,
                                      int32_t n_ctx, DType kv_dtype, TokenId bos, const std::string& path);

struct KlDivergenceResult {
  int64_t count = 0;  // scored positions
  int32_t n_ctx = 0;
  int32_t n_chunk = 0;
  double sum_nll = 0, sum_nll2 = 0, sum_nll_base = 0, sum_nll_base2 = 0, sum_nll_nll_base = 0;
  double sum_kld = 0, sum_kld2 = 0;
  double sum_p_diff = 0, sum_p_diff2 = 0, sum_p_diff4 = 0;
  float max_p_diff = 0;
  int64_t n_same_top = 0;
  std::vector<float> kld_values;     // per position, in order
  std::vector<float> p_diff_values;  // p(token) - p_base(token) per position

  double mean_kld() const;
  double mean_kld_stderr() const;
  double same_top() const;  // fraction of positions whose argmax agrees with the base's
};

// Scores `model` against the base file (its windows and tokens; `bos` as for perplexity()).
// Errors name the file and what does not fit (vocabulary size, truncation).
Result<KlDivergenceResult> kl_divergence(Model& model, Backend& backend, const std::string& base_path,
                                         DType kv_dtype, TokenId bos);

// llama-perplexity's summary: perplexities, their ratio, KLD mean and percentiles, Δp and
// "Same top p".
std::string kl_report(const KlDivergenceResult& r);

}  // namespace frugal::eval
