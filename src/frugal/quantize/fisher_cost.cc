#include "frugal/quantize/fisher_cost.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "frugal/core/thread_pool.h"
#include "frugal/quant/type_traits.h"
#include "frugal/quantize/mix_rules.h"

namespace frugal::quantize {
namespace {

constexpr int64_t kMinChunkElements = 32 * 512;  // rows handed to one thread at a time, at least

int layer_index(const std::string& name) {
  int layer = -1;
  if (std::sscanf(name.c_str(), "blk.%d.", &layer) != 1) return -1;
  return layer;
}

// Sum of F * (W - deq(Q(W)))^2 over tensor t stored as `type`. Chunks of rows go to the pool;
// the per-chunk sums are added in chunk order, so the result does not depend on the threads.
Result<double> tensor_cost(const GgufTensorInfo& t, const std::vector<float>& w, const float* fisher, DType type,
                           const float* importance, ThreadPool& pool) {
  const TypeTraits* to = type_traits(type);
  if (to == nullptr || to->quantize_rows == nullptr || to->to_float_ref == nullptr) {
    return error(ErrorCode::kNotSupported, "tensor '{}': frugal cannot write {}", t.name, dtype_name(type));
  }
  const int64_t cols = t.dims[0];
  const int64_t rows = t.n_elements() / cols;
  const size_t qrow = static_cast<size_t>(row_bytes(type, cols));
  const int64_t rows_per_chunk = std::max<int64_t>(1, (kMinChunkElements + cols - 1) / cols);
  const int64_t n_chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
  std::vector<double> sums(static_cast<size_t>(n_chunks), 0.0);
  pool.parallel_for(n_chunks, 1, [&](int64_t begin, int64_t end, int) {
    std::vector<uint8_t> q;
    std::vector<float> back;
    for (int64_t c = begin; c < end; ++c) {
      const int64_t r0 = c * rows_per_chunk;
      const int64_t nr = std::min(rows_per_chunk, rows - r0);
      const size_t off = static_cast<size_t>(r0 * cols);
      q.resize(qrow * static_cast<size_t>(nr));
      back.resize(static_cast<size_t>(nr * cols));
      to->quantize_rows(w.data() + off, q.data(), nr, cols, importance);
      to->to_float_ref(q.data(), back.data(), nr * cols);
      double s = 0;
      for (size_t i = 0; i < back.size(); ++i) {
        const double d = static_cast<double>(w[off + i]) - static_cast<double>(back[i]);
        s += static_cast<double>(fisher[off + i]) * d * d;
      }
      sums[static_cast<size_t>(c)] = s;
    }
  });
  double total = 0;
  for (double s : sums) total += s;
  return total;
}

}  // namespace

bool is_allocated_tensor(const GgufTensorInfo& t) {
  return layer_index(t.name) >= 0 && is_quantizable(t.name, static_cast<int>(t.dims.size()));
}

std::vector<DType> candidate_types(const std::vector<int64_t>& row_lengths) {
  auto all_multiple = [&](int64_t m) {
    return std::all_of(row_lengths.begin(), row_lengths.end(), [m](int64_t n) { return n % m == 0; });
  };
  if (all_multiple(256)) {
    return {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_0, DType::kF16};
  }
  if (all_multiple(32)) {
    return {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL, DType::kQ8_0, DType::kF16};
  }
  return {DType::kF16};
}

Result<std::vector<AllocationUnit>> fisher_cost_table(const GgufFile& model, const FisherFile& fisher,
                                                      const FisherCostOptions& opts) {
  std::vector<const GgufTensorInfo*> tensors;
  for (const auto& t : model.tensors()) {
    if (is_allocated_tensor(t)) tensors.push_back(&t);
  }
  if (tensors.empty()) return error(ErrorCode::kInvalidArgument, "{}: no layer matrices to allocate", model.path());
  std::stable_sort(tensors.begin(), tensors.end(), [](const GgufTensorInfo* a, const GgufTensorInfo* b) {
    return tensor_order_less(a->name, b->name);
  });
  // Every Fisher tensor is checked before any work, so a bad file fails at once, naming the tensor.
  std::map<std::string, const float*> fisher_values;
  for (const GgufTensorInfo* t : tensors) {
    FRUGAL_ASSIGN_OR_RETURN(const float* v, fisher.values_for(*t));
    fisher_values[t->name] = v;
    const TypeTraits* from = type_traits(t->type);
    if (from == nullptr || from->to_float_ref == nullptr) {
      return error(ErrorCode::kNotSupported, "tensor '{}': cannot convert from {}", t->name, dtype_name(t->type));
    }
    if (dtype_layout(t->type).block_size > 1) {
      return error(ErrorCode::kInvalidArgument,
                   "tensor '{}' is already {}: FAMPWQ allocates from float weights (F32, F16, BF16)", t->name,
                   dtype_name(t->type));
    }
  }
  std::vector<AllocationUnit> units;
  for (const GgufTensorInfo* t : tensors) {
    const std::string unit_name = opts.granularity == AllocationGranularity::kLayer
                                      ? "blk." + std::to_string(layer_index(t->name))
                                      : t->name;
    if (units.empty() || units.back().name != unit_name) {
      AllocationUnit u;
      u.name = unit_name;
      units.push_back(std::move(u));
    }
    units.back().tensors.push_back(t->name);
    units.back().n_weights += t->n_elements();
  }
  ThreadPool pool(opts.n_threads);
  for (AllocationUnit& u : units) {
    std::vector<int64_t> row_lengths;
    for (const std::string& name : u.tensors) row_lengths.push_back(model.find_tensor(name)->dims[0]);
    const std::vector<DType> types = candidate_types(row_lengths);
    for (DType type : types) u.options.push_back({type, 0, 0.0});
    for (const std::string& name : u.tensors) {
      const GgufTensorInfo& t = *model.find_tensor(name);
      std::vector<float> w(static_cast<size_t>(t.n_elements()));
      type_traits(t.type)->to_float_ref(t.data, w.data(), t.n_elements());
      std::vector<float> importance;
      if (opts.imatrix != nullptr) {
        auto it = opts.imatrix->entries.find(name);
        if (it != opts.imatrix->entries.end() && static_cast<int64_t>(it->second.values.size()) == t.dims[0]) {
          importance = it->second.mean();
        }
      }
      const float* imp = importance.empty() ? nullptr : importance.data();
      for (AllocationOption& o : u.options) {
        FRUGAL_ASSIGN_OR_RETURN(double c, tensor_cost(t, w, fisher_values[name], o.type, imp, pool));
        o.cost += c;
        o.bytes += static_cast<uint64_t>(row_bytes(o.type, t.dims[0]) * (t.n_elements() / t.dims[0]));
      }
    }
  }
  return units;
}

}  // namespace frugal::quantize
