#include "frugal/quantize/importance_collector.h"

#include <algorithm>

namespace frugal::quantize {
namespace {

// llama-imatrix ignores products of fewer rows: single-token decode steps would weigh a few
// positions as much as a whole chunk.
constexpr int64_t kMinRows = 16;

}  // namespace

ImportanceCollector::ImportanceCollector(const Model& model, Backend& inner) : ForwardingBackend(inner) {
  for (const auto& t : model.gguf().tensors()) {
    if (t.name.rfind("blk.", 0) == 0 && t.dims.size() >= 2) names_.emplace(t.data, t.name);
  }
}

void ImportanceCollector::matmul(const WeightTensor& w, const float* x, int64_t n, float* y, const float* bias) {
  if (n >= kMinRows) {
    auto it = names_.find(w.data);
    if (it != names_.end()) {
      Stats& s = stats_[it->second];
      const auto cols = static_cast<size_t>(w.cols);
      if (s.sum.empty()) {
        s.sum.assign(cols, 0.0);
        s.counts.assign(cols, 0);
      }
      ++s.ncall;
      for (int64_t r = 0; r < n; ++r) {
        const float* row = x + static_cast<size_t>(r) * cols;
        for (size_t j = 0; j < cols; ++j) s.sum[j] += static_cast<double>(row[j]) * row[j];
      }
      for (size_t j = 0; j < cols; ++j) s.counts[j] += n;
    }
  }
  inner_.matmul(w, x, n, y, bias);
}

Imatrix ImportanceCollector::result(int32_t chunks, const std::string& dataset) const {
  Imatrix m;
  m.chunks = chunks;
  m.dataset = dataset;
  for (const auto& [name, s] : stats_) {
    ImatrixEntry e;
    e.ncall = s.ncall;
    e.values.resize(s.sum.size());
    for (size_t j = 0; j < s.sum.size(); ++j) {
      // Stored as mean * ncall, the .dat convention (readers divide by ncall).
      e.values[j] = static_cast<float>(s.sum[j] / static_cast<double>(s.counts[j]) * s.ncall);
    }
    m.entries.emplace(name, std::move(e));
  }
  return m;
}

Result<Imatrix> collect_imatrix(Model& model, Backend& backend, const std::vector<TokenId>& tokens,
                                const ImatrixRunOptions& opts) {
  if (opts.n_ctx < kMinRows) {
    return error(ErrorCode::kInvalidArgument, "imatrix: context {} is below {} tokens, which are not counted",
                 opts.n_ctx, kMinRows);
  }
  int32_t n_chunk = static_cast<int32_t>(tokens.size() / static_cast<size_t>(opts.n_ctx));
  if (opts.max_chunks >= 0) n_chunk = std::min(n_chunk, opts.max_chunks);
  if (n_chunk < 1) {
    return error(ErrorCode::kInvalidArgument, "imatrix: the text has {} tokens, fewer than one chunk of {}",
                 tokens.size(), opts.n_ctx);
  }
  ImportanceCollector collector(model, backend);
  std::vector<float> logits(static_cast<size_t>(model.config().n_vocab));
  for (int32_t c = 0; c < n_chunk; ++c) {
    FRUGAL_ASSIGN_OR_RETURN(KvCache kv, KvCache::create(model.kv_options(1, opts.n_ctx, opts.kv_dtype)));
    Batch b;
    const size_t start = static_cast<size_t>(c) * static_cast<size_t>(opts.n_ctx);
    for (int32_t j = 0; j < opts.n_ctx; ++j) {
      const TokenId t = (j == 0 && opts.bos >= 0) ? opts.bos : tokens[start + static_cast<size_t>(j)];
      // Only the last position's logits: the output projection is not part of the matrix.
      b.add(t, j, 0, j == opts.n_ctx - 1);
    }
    FRUGAL_RETURN_IF_ERROR(model.forward(b, kv, collector, logits.data()));
    if (opts.progress) opts.progress(c + 1, n_chunk);
  }
  return collector.result(n_chunk, opts.dataset);
}

}  // namespace frugal::quantize
