#include "frugal/quantize/model_quantizer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <regex>

#include "frugal/core/half.h"
#include "frugal/core/thread_pool.h"
#include "frugal/format/gguf.h"
#include "frugal/model/architecture.h"
#include "frugal/quant/fluxbin.h"
#include "frugal/quant/reference.h"
#include "frugal/quant/type_traits.h"
#include "frugal/quantize/atomic_file.h"

namespace frugal::quantize {
namespace {

constexpr uint32_t kQuantizationVersion = 2;  // ggml's GGML_QNT_VERSION: the block layouts we write
constexpr size_t kMaxMetaString = 127;        // llama-quantize truncates its imatrix strings here
constexpr int64_t kMinChunkElements = 32 * 512;  // rows handed to one thread at a time, at least

// What happens to one input tensor.
struct TensorPlan {
  const GgufTensorInfo* in = nullptr;
  DType to = DType::kF32;
  bool quantize = false;
  bool fallback = false;
  const ImatrixEntry* importance = nullptr;
  uint64_t out_bytes = 0;
  float in_scale = 1.f;        // the input's NVFP4 global scale, folded in when converting it
  bool global_scale = false;   // the F32 companion `<name>.scale` of the NVFP4 tensor `in` (written after it)
  TensorPermutation perm;      // OCG's reordering of its rows and columns (ocg_fold.h), or none
  bool reorder_only = false;   // kept in its type, but rewritten because OCG reorders it
  const char* fluxbin_part = nullptr;  // a companion of the FluxBin tensor `in` (quant/fluxbin.h), written after it
  DType part_type = DType::kF32;       // its type and element count
  int64_t part_elements = 0;
};

bool is_float_type(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

struct CompiledRule {
  std::regex re;
  DType type;
};

Result<ModelShape> read_shape(const GgufFile& f) {
  ModelShape s;
  FRUGAL_ASSIGN_OR_RETURN(s.arch, f.get_string("general.architecture"));
  FRUGAL_ASSIGN_OR_RETURN(int64_t n_layer, f.get_int(s.arch + ".block_count"));
  FRUGAL_ASSIGN_OR_RETURN(int64_t n_head, f.get_int_or(s.arch + ".attention.head_count", 0));
  FRUGAL_ASSIGN_OR_RETURN(int64_t n_head_kv, f.get_int_or(s.arch + ".attention.head_count_kv", n_head));
  s.n_layer = static_cast<int>(n_layer);
  s.n_head = static_cast<int>(n_head);
  s.n_head_kv = static_cast<int>(n_head_kv);
  s.has_output = f.find_tensor("output.weight") != nullptr;
  for (const auto& t : f.tensors()) {
    if (t.name.find("attn_v.weight") != std::string::npos || t.name.find("attn_qkv.weight") != std::string::npos ||
        t.name.find("attn_kv_b.weight") != std::string::npos) {
      ++s.n_attention_wv;
    }
  }
  return s;
}

int64_t rows_of(const GgufTensorInfo& t) { return t.n_elements() / t.dims[0]; }

// NVFP4's global scales (docs/quantization.md, "FP4 formats"): each tensor converted to NVFP4 is
// followed by its F32 companion `<name>.scale`; an NVFP4 input that is converted has its scale
// folded into the floats, and its companion is dropped.
Result<std::vector<TensorPlan>> plan_global_scales(const GgufFile& in, std::vector<TensorPlan> plan) {
  std::vector<std::string> dropped;
  for (TensorPlan& p : plan) {
    if (!p.quantize || p.in->type != DType::kNVFP4) continue;
    FRUGAL_ASSIGN_OR_RETURN(p.in_scale, read_global_scale(in, p.in->name));
    dropped.push_back(global_scale_name(p.in->name));
  }
  std::vector<TensorPlan> out;
  for (const TensorPlan& p : plan) {
    if (std::find(dropped.begin(), dropped.end(), p.in->name) != dropped.end()) continue;
    out.push_back(p);
    if (!p.quantize || p.to != DType::kNVFP4) continue;
    const std::string companion = global_scale_name(p.in->name);
    if (in.find_tensor(companion) != nullptr && p.in->type != DType::kNVFP4) {
      return error(ErrorCode::kInvalidArgument,
                   "tensor '{}': NVFP4 stores its global scale as '{}', which the input already has", p.in->name,
                   companion);
    }
    TensorPlan c;
    c.in = p.in;
    c.to = DType::kF32;
    c.global_scale = true;
    c.out_bytes = sizeof(float);
    out.push_back(c);
  }
  return out;
}

int fluxbin_salient(const QuantizeOptions& opts) {
  return opts.target.file_type == FileType::kFLUXBIN_HYBRID ? quant::fluxbin::kDefaultSalient : 0;
}

// FluxBin's column scales (and the hybrid's salient columns) follow each tensor converted to it.
std::vector<TensorPlan> plan_fluxbin_parts(std::vector<TensorPlan> plan, int salient) {
  namespace fb = quant::fluxbin;
  std::vector<TensorPlan> out;
  for (const TensorPlan& p : plan) {
    out.push_back(p);
    if (!p.quantize || p.to != DType::kFLUXBIN) continue;
    const int64_t cols = p.in->dims[0];
    const int64_t groups = cols / fb::kGroup;
    auto add = [&](const char* part, DType type, int64_t n) {
      TensorPlan c;
      c.in = p.in;
      c.fluxbin_part = part;
      c.part_type = type;
      c.part_elements = n;
      c.out_bytes = static_cast<uint64_t>(n * dtype_layout(type).block_bytes);
      out.push_back(c);
    };
    add(fb::kColsPart, DType::kF16, fb::kBases * cols);
    if (salient > 0) {
      add(fb::kSalientIdxPart, DType::kI8, groups * salient);
      add(fb::kSalientValsPart, DType::kI8, rows_of(*p.in) * groups * fb::salient_row_bytes(salient));
    }
  }
  return out;
}

// Decides every tensor's fate, or says precisely why the input cannot be quantized as asked.
Result<std::vector<TensorPlan>> plan_tensors(const GgufFile& in, const QuantizeOptions& opts, const OcgFold* fold,
                                              QuantizeReport* report) {
  FRUGAL_ASSIGN_OR_RETURN(ModelShape shape, read_shape(in));
  MixOptions mix = opts.mix;
  mix.has_imatrix = opts.imatrix != nullptr;
  MixRules rules(opts.target, shape, mix);
  std::vector<CompiledRule> user_rules;
  for (const auto& r : opts.tensor_types) {
    try {
      user_rules.push_back({std::regex(r.pattern), r.type});
    } catch (const std::regex_error& e) {
      return error(ErrorCode::kInvalidArgument, "--tensor-type '{}': not a regular expression: {}", r.pattern, e.what());
    }
  }
  for (const auto& [name, type] : opts.assigned_types) {
    const GgufTensorInfo* t = in.find_tensor(name);
    if (t == nullptr || !is_quantizable(name, static_cast<int>(t->dims.size()))) {
      return error(ErrorCode::kInvalidArgument, "a type was assigned to '{}', which is not a quantizable tensor of {}",
                   name, opts.input);
    }
  }
  std::vector<const GgufTensorInfo*> order;
  for (const auto& t : in.tensors()) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(),
                   [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return tensor_order_less(a->name, b->name); });
  std::vector<TensorPlan> plan;
  for (const GgufTensorInfo* t : order) {
    TensorPlan p;
    p.in = t;
    p.to = t->type;
    if (is_quantizable(t->name, static_cast<int>(t->dims.size()))) {
      TypeChoice c = rules.choose(t->name, t->dims[0]);
      for (const auto& r : user_rules) {
        if (std::regex_search(t->name, r.re)) {
          c.type = r.type;
          break;
        }
      }
      if (auto it = opts.assigned_types.find(t->name); it != opts.assigned_types.end()) {
        c.type = it->second;
        c.fallback = false;
      }
      p.to = c.type;
      p.fallback = c.fallback;
      p.quantize = p.to != t->type;
    }
    if (p.quantize) {
      const DTypeLayout& lay = dtype_layout(p.to);
      if (t->dims[0] % lay.block_size != 0) {
        return error(ErrorCode::kInvalidArgument, "tensor '{}': rows of {} elements cannot be stored as {} (blocks of {})",
                     t->name, t->dims[0], lay.name, lay.block_size);
      }
      const TypeTraits* from = type_traits(t->type);
      if (from == nullptr || from->to_float_ref == nullptr) {
        return error(ErrorCode::kNotSupported, "tensor '{}': cannot convert from {}", t->name, dtype_name(t->type));
      }
      if (dtype_layout(t->type).block_size > 1 && !opts.allow_requantize) {
        return error(ErrorCode::kInvalidArgument,
                     "tensor '{}' is already {}: requantizing loses accuracy twice; pass --allow-requantize to do it anyway",
                     t->name, dtype_name(t->type));
      }
      const TypeTraits* to = type_traits(p.to);
      if (p.to != DType::kFLUXBIN && (to == nullptr || to->quantize_rows == nullptr)) {
        return error(ErrorCode::kNotSupported, "tensor '{}': frugal cannot write {}", t->name, dtype_name(p.to));
      }
      if (opts.imatrix != nullptr) {
        auto it = opts.imatrix->entries.find(t->name);
        if (it == opts.imatrix->entries.end()) {
          ++report->n_imatrix_missing;
        } else if (static_cast<int64_t>(it->second.values.size()) != t->dims[0]) {
          // token_embd is looked up by row, not multiplied: a mismatch there is expected.
          if (t->name != "token_embd.weight") {
            return error(ErrorCode::kInvalidArgument, "imatrix entry '{}' has {} values, the tensor has {} columns",
                         t->name, it->second.values.size(), t->dims[0]);
          }
        } else {
          p.importance = &it->second;
        }
      }
      if (opts.target.file_type == FileType::kQ2_K_S && p.to == DType::kQ2_K && p.importance == nullptr &&
          t->name != "token_embd.weight") {
        return error(ErrorCode::kInvalidArgument,
                     "Q2_K_S needs an importance matrix entry for tensor '{}' (pass --imatrix FILE from `frugal imatrix`)",
                     t->name);
      }
      ++report->n_quantized;
      if (p.fallback) ++report->n_fallback;
    }
    if (fold != nullptr) {
      p.perm = fold->for_tensor(t->name);
      if (p.perm.any()) {
        // Reordering a quantized tensor's columns would mean requantizing it with other groups.
        if (!is_float_type(t->type)) {
          return error(ErrorCode::kInvalidArgument,
                       "OCG reorders tensor '{}', which is {}: quantize with --ocg from the float model (F32, F16 or "
                       "BF16 weights)",
                       t->name, dtype_name(t->type));
        }
        p.reorder_only = !p.quantize;
      }
    }
    p.out_bytes = static_cast<uint64_t>(row_bytes(p.to, t->dims[0]) * rows_of(*t));
    plan.push_back(p);
  }
  if (opts.nvfp4_scale == Nvfp4Scale::kHScale) {
    if (opts.hscale_radius < 0 || opts.hscale_radius > quant::kHScaleMaxRadius) {
      return error(ErrorCode::kInvalidArgument, "H-Scale radius {}: expected 0..{} E4M3 codes", opts.hscale_radius,
                   quant::kHScaleMaxRadius);
    }
    const bool any_nvfp4 =
        std::any_of(plan.begin(), plan.end(), [](const TensorPlan& p) { return p.quantize && p.to == DType::kNVFP4; });
    if (!any_nvfp4) {
      return error(ErrorCode::kInvalidArgument,
                   "H-Scale chooses NVFP4 block scales, but type {} quantizes no tensor to NVFP4 (use type NVFP4 or "
                   "--tensor-type PATTERN=nvfp4)",
                   opts.target.name);
    }
  }
  if (opts.ocg) {
    const bool any_nvfp4 =
        std::any_of(plan.begin(), plan.end(), [](const TensorPlan& p) { return p.quantize && p.to == DType::kNVFP4; });
    if (!any_nvfp4 && !is_float_type(opts.target.base)) {
      return error(ErrorCode::kInvalidArgument,
                   "OCG groups channels for NVFP4's 16-element scales, but type {} quantizes no tensor to NVFP4 (use "
                   "type NVFP4, --tensor-type PATTERN=nvfp4, or F32/F16/BF16 for the reordering alone)",
                   opts.target.name);
    }
  }
  FRUGAL_ASSIGN_OR_RETURN(plan, plan_global_scales(in, std::move(plan)));
  plan = plan_fluxbin_parts(std::move(plan), fluxbin_salient(opts));
  report->n_tensors = static_cast<int>(plan.size());
  return plan;
}

GgufWriter make_header(const GgufFile& in, const QuantizeOptions& opts, const std::vector<TensorPlan>& plan,
                       int32_t anchors) {
  GgufWriter w;
  for (const auto& [key, v] : in.metadata()) w.set_value(key, v);
  // Overridden keys move to the end, as llama.cpp's writer orders them.
  w.remove("general.quantization_version");
  w.set_u32("general.quantization_version", kQuantizationVersion);
  w.remove("general.file_type");
  w.set_u32("general.file_type", static_cast<uint32_t>(opts.target.file_type));
  for (const char* k : {"split.no", "split.count", "split.tensors.count"}) w.remove(k);
  if (opts.imatrix != nullptr) {
    auto put_string = [&](const std::string& key, const std::string& v) {
      w.remove(key);
      w.set_string(key, v.substr(0, kMaxMetaString));
    };
    auto put_i32 = [&](const std::string& key, int32_t v) {
      w.remove(key);
      w.set_i32(key, v);
    };
    put_string("quantize.imatrix.file", opts.imatrix_path);
    if (!opts.imatrix->dataset.empty()) put_string("quantize.imatrix.dataset", opts.imatrix->dataset);
    put_i32("quantize.imatrix.entries_count", static_cast<int32_t>(opts.imatrix->entries.size()));
    if (opts.imatrix->chunks > 0) put_i32("quantize.imatrix.chunks_count", opts.imatrix->chunks);
  }
  for (const auto& [key, v] : opts.provenance) {
    w.remove(key);
    w.set_string(key, v);
  }
  // An input written with H-Scale does not make its output so.
  for (const char* k : {"quantize.nvfp4.scale", "quantize.nvfp4.hscale_radius"}) w.remove(k);
  for (const char* k : {"quantize.ocg", "quantize.ocg.anchors"}) w.remove(k);
  if (opts.ocg) {
    // Provenance only: the reordering is in the weights, readers need nothing.
    w.set_bool("quantize.ocg", true);
    w.set_i32("quantize.ocg.anchors", anchors);
  }
  if (opts.nvfp4_scale == Nvfp4Scale::kHScale) {
    // Provenance only (readers ignore it): RTN files keep the keys they always had.
    w.set_string("quantize.nvfp4.scale", "hscale");
    w.set_i32("quantize.nvfp4.hscale_radius", opts.hscale_radius);
  }
  for (const TensorPlan& p : plan) {
    // Validated already by the reader (dims, block multiples); cannot fail here.
    if (p.global_scale) {
      (void)w.add_tensor_info(global_scale_name(p.in->name), DType::kF32, {1});
    } else if (p.fluxbin_part != nullptr) {
      (void)w.add_tensor_info(quant::fluxbin::companion_name(p.in->name, p.fluxbin_part), p.part_type,
                              {p.part_elements});
    } else {
      (void)w.add_tensor_info(p.in->name, p.to, p.in->dims);
    }
  }
  return w;
}

// Converts one tensor: rows to floats, then to the target type, in chunks of rows over the pool.
// NVFP4 takes two passes: the tensor's amax first, for the global scale written to *global_scale.
Status convert_tensor(const TensorPlan& p, ThreadPool& pool, std::vector<uint8_t>& out, const QuantizeOptions& opts,
                      float* global_scale, quant::fluxbin::Matrix* fluxbin) {
  const GgufTensorInfo& t = *p.in;
  const int64_t cols = t.dims[0];
  const int64_t rows = rows_of(t);
  const TypeTraits* from = type_traits(t.type);
  const TypeTraits* to = type_traits(p.to);
  const size_t in_row = static_cast<size_t>(row_bytes(t.type, cols));
  const size_t out_row = static_cast<size_t>(row_bytes(p.to, cols));
  out.resize(out_row * static_cast<size_t>(rows));
  std::vector<float> importance;
  if (p.importance != nullptr) importance = p.importance->mean();
  const std::vector<int32_t>* row_order = p.perm.rows;
  const std::vector<int32_t>* col_order = p.perm.cols;
  if (col_order != nullptr && !importance.empty()) {
    // The importance of column j goes where column j goes.
    std::vector<float> moved(importance.size());
    for (size_t i = 0; i < moved.size(); ++i) moved[i] = importance[static_cast<size_t>((*col_order)[i])];
    importance = std::move(moved);
  }
  const float* imp = importance.empty() ? nullptr : importance.data();
  const int64_t rows_per_chunk = std::max<int64_t>(1, (kMinChunkElements + cols - 1) / cols);
  const int64_t n_chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
  std::vector<std::vector<float>> scratch(static_cast<size_t>(pool.size()));
  std::atomic<bool> stopped{false};
  // Rows of chunk c as floats in f: the input's values, its own global scale folded in, rows and
  // columns in OCG's order when it reorders them (output row r is input row row_order[r]).
  auto chunk_floats = [&](int64_t c, std::vector<float>& f, int64_t* r0, int64_t* nr) {
    f.resize(static_cast<size_t>(rows_per_chunk * cols));
    *r0 = c * rows_per_chunk;
    *nr = std::min(rows_per_chunk, rows - *r0);
    if (row_order == nullptr) {
      from->to_float_ref(t.data + static_cast<size_t>(*r0) * in_row, f.data(), *nr * cols);
    } else {
      for (int64_t r = 0; r < *nr; ++r) {
        const auto src = static_cast<size_t>((*row_order)[static_cast<size_t>(*r0 + r)]);
        from->to_float_ref(t.data + src * in_row, f.data() + static_cast<size_t>(r * cols), cols);
      }
    }
    if (p.in_scale != 1.f) {
      for (int64_t i = 0; i < *nr * cols; ++i) f[static_cast<size_t>(i)] *= p.in_scale;
    }
    if (col_order != nullptr) {
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = 0; r < *nr; ++r) {
        float* fr = f.data() + static_cast<size_t>(r * cols);
        for (int64_t j = 0; j < cols; ++j) row[static_cast<size_t>(j)] = fr[(*col_order)[static_cast<size_t>(j)]];
        std::copy(row.begin(), row.end(), fr);
      }
    }
  };
  if (p.to == DType::kFLUXBIN) {
    // The column scales couple all rows: the whole tensor is fitted at once.
    std::vector<float> all(static_cast<size_t>(rows * cols));
    std::vector<float>& f = scratch[0];
    for (int64_t c = 0; c < n_chunks; ++c) {
      int64_t r0 = 0;
      int64_t nr = 0;
      chunk_floats(c, f, &r0, &nr);
      std::copy(f.begin(), f.begin() + nr * cols, all.begin() + r0 * cols);
    }
    quant::fluxbin::FitOptions fo;
    fo.salient = fluxbin_salient(opts);
    fo.importance = imp;
    FRUGAL_ASSIGN_OR_RETURN(*fluxbin, quant::fluxbin::fit(all.data(), rows, cols, fo, t.name.c_str()));
    out = fluxbin->blocks;
    return ok_status();
  }
  float g = 1.f;
  if (p.to == DType::kNVFP4) {
    std::vector<float> chunk_amax(static_cast<size_t>(n_chunks), 0.f);
    pool.parallel_for(n_chunks, 1, [&](int64_t begin, int64_t end, int thread) {
      std::vector<float>& f = scratch[static_cast<size_t>(thread)];
      for (int64_t c = begin; c < end; ++c) {
        int64_t r0 = 0;
        int64_t nr = 0;
        chunk_floats(c, f, &r0, &nr);
        float amax = 0.f;
        for (int64_t i = 0; i < nr * cols; ++i) amax = std::max(amax, std::fabs(f[static_cast<size_t>(i)]));
        chunk_amax[static_cast<size_t>(c)] = amax;
      }
    });
    g = quant::nvfp4_global_scale(*std::max_element(chunk_amax.begin(), chunk_amax.end()));
  }
  pool.parallel_for(n_chunks, 1, [&](int64_t begin, int64_t end, int thread) {
    std::vector<float>& f = scratch[static_cast<size_t>(thread)];
    for (int64_t c = begin; c < end; ++c) {
      if (opts.cancel != nullptr && opts.cancel->load(std::memory_order_relaxed)) {
        stopped = true;
        return;
      }
      int64_t r0 = 0;
      int64_t nr = 0;
      chunk_floats(c, f, &r0, &nr);
      uint8_t* dst = out.data() + static_cast<size_t>(r0) * out_row;
      if (p.to == DType::kNVFP4 && opts.nvfp4_scale == Nvfp4Scale::kHScale) {
        quant::quantize_rows_nvfp4_hscale(f.data(), dst, nr, cols, g, imp, opts.hscale_radius);
      } else if (p.to == DType::kNVFP4) {
        quant::quantize_rows_nvfp4_scaled(f.data(), dst, nr, cols, g);
      } else if (p.to == DType::kHBQ_A) {
        quant::quantize_rows_hbq_a(f.data(), dst, nr, cols, imp, opts.hbq_scale);
      } else if (p.to == DType::kHBQ_E) {
        quant::quantize_rows_hbq_e(f.data(), dst, nr, cols, imp, opts.hbq_scale);
      } else {
        to->quantize_rows(f.data(), dst, nr, cols, imp);
      }
    }
  });
  if (stopped) return error(ErrorCode::kIo, "interrupted");
  *global_scale = g;
  return ok_status();
}

}  // namespace

Result<QuantizeReport> quantize_model(const QuantizeOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  QuantizeReport report;
  if (opts.input == opts.output) {
    return error(ErrorCode::kInvalidArgument, "{}: the output must differ from the input", opts.output);
  }
  FRUGAL_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> in, GgufFile::open(opts.input));
  std::optional<OcgFold> fold;  // the plan points into it
  if (opts.ocg) {
    if (opts.imatrix == nullptr) {
      return error(ErrorCode::kInvalidArgument,
                   "OCG needs calibration statistics: pass --imatrix FILE or --calibration TEXT");
    }
    FRUGAL_ASSIGN_OR_RETURN(fold, OcgFold::plan(*in, *opts.imatrix));
    report.ocg_sites = fold->sites();
  }
  FRUGAL_ASSIGN_OR_RETURN(std::vector<TensorPlan> plan,
                          plan_tensors(*in, opts, fold ? &*fold : nullptr, &report));
  GgufWriter header_writer = make_header(*in, opts, plan, fold ? fold->total_anchors() : 0);
  FRUGAL_ASSIGN_OR_RETURN(std::vector<uint8_t> header, header_writer.header());
  const uint64_t alignment = header_writer.alignment();

  install_interrupt_cleanup();
  FRUGAL_ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::create(opts.output));
  FRUGAL_RETURN_IF_ERROR(out.write(header.data(), header.size()));
  ThreadPool pool(opts.n_threads);
  std::vector<uint8_t> buffer;
  float global_scale = 1.f;  // of the last tensor converted; its companion follows it in the plan
  quant::fluxbin::Matrix fluxbin;  // the last FluxBin fit; its companions follow it in the plan
  for (size_t k = 0; k < plan.size(); ++k) {
    const TensorPlan& p = plan[k];
    if (opts.cancel != nullptr && opts.cancel->load()) return error(ErrorCode::kIo, "{}: interrupted", opts.output);
    const uint8_t* bytes = p.in->data;
    if (p.global_scale) {
      bytes = reinterpret_cast<const uint8_t*>(&global_scale);
    } else if (p.fluxbin_part == quant::fluxbin::kColsPart) {
      bytes = reinterpret_cast<const uint8_t*>(fluxbin.col_scales.data());
    } else if (p.fluxbin_part == quant::fluxbin::kSalientIdxPart) {
      bytes = fluxbin.salient_idx.data();
    } else if (p.fluxbin_part == quant::fluxbin::kSalientValsPart) {
      bytes = fluxbin.salient_vals.data();
    } else if (p.quantize || p.reorder_only) {
      Status st = convert_tensor(p, pool, buffer, opts, &global_scale, &fluxbin);
      if (!st.ok()) return error(st.code(), "{}: tensor '{}': {}", opts.output, p.in->name, st.message());
      bytes = buffer.data();
    }
    FRUGAL_RETURN_IF_ERROR(out.write(bytes, p.out_bytes));
    const uint64_t padded = (p.out_bytes + alignment - 1) / alignment * alignment;
    FRUGAL_RETURN_IF_ERROR(out.write_zeros(padded - p.out_bytes));
    const bool companion = p.global_scale || p.fluxbin_part != nullptr;
    if (!companion) report.input_tensor_bytes += p.in->nbytes;
    report.output_tensor_bytes += p.out_bytes;
    if (opts.on_tensor) {
      TensorProgress tp;
      tp.index = static_cast<int>(k) + 1;
      tp.count = static_cast<int>(plan.size());
      tp.name = p.global_scale ? global_scale_name(p.in->name) : p.in->name;
      if (p.fluxbin_part != nullptr) tp.name = quant::fluxbin::companion_name(p.in->name, p.fluxbin_part);
      tp.from = p.global_scale ? DType::kF32 : p.in->type;
      tp.to = p.fluxbin_part != nullptr ? p.part_type : p.to;
      tp.quantized = p.quantize;
      tp.used_imatrix = p.importance != nullptr;
      tp.bytes_in = companion ? 0 : p.in->nbytes;
      tp.bytes_out = p.out_bytes;
      opts.on_tensor(tp);
    }
  }
  report.output_file_bytes = out.bytes_written();
  FRUGAL_RETURN_IF_ERROR(out.commit());
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace frugal::quantize
