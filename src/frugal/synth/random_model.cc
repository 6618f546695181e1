#include "frugal/synth/random_model.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>

#include "frugal/core/half.h"
#include "frugal/format/gguf.h"
#include "frugal/quant/type_traits.h"
#include "frugal/synth/rng.h"
#include "frugal/synth/synth_vocab.h"

namespace frugal::synth {
namespace {

constexpr std::string_view kQ4KM = "Q4_K_M";

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// Types a whole model may be written in: every one has a reference quantizer.
constexpr DType kWeightTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0, DType::kQ4_1,
                                  DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K, DType::kQ3_K,
                                  DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL};

// The weight type string, parsed: a mix (Q4_K_M) or one type for every 2-D weight.
struct WeightMix {
  bool q4_k_m = false;
  DType type = DType::kF32;
};

Result<WeightMix> parse_weight_type(std::string_view s) {
  if (iequals(s, kQ4KM)) return WeightMix{true, DType::kQ4_K};
  const auto t = dtype_from_name(s);
  if (!t || std::find(std::begin(kWeightTypes), std::end(kWeightTypes), *t) == std::end(kWeightTypes)) {
    return error(ErrorCode::kInvalidArgument,
                 "weight_type '{}' is not one of F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K "
                 "Q6_K IQ4_NL Q4_K_M",
                 s);
  }
  return WeightMix{false, *t};
}

// llama-quantize's fallback for rows that are not a whole number of blocks.
DType shape_fallback(DType t, int64_t ncols) {
  if (ncols % dtype_layout(t).block_size == 0) return t;
  DType r = DType::kF16;
  switch (t) {
    case DType::kQ2_K:
    case DType::kQ3_K: r = DType::kQ4_0; break;
    case DType::kQ4_K: r = DType::kQ5_0; break;
    case DType::kQ5_K: r = DType::kQ5_1; break;
    case DType::kQ6_K: r = DType::kQ8_0; break;
    default: break;
  }
  return ncols % dtype_layout(r).block_size == 0 ? r : DType::kF16;
}

bool use_more_bits(int i_layer, int n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

enum class Init { kNormal, kNormWeight, kRopeFreqs };

struct TensorPlan {
  std::string name;
  std::vector<int64_t> dims;  // ggml order
  Init init = Init::kNormal;
  int layer = -1;
};

struct Shape {
  std::string file_arch;  // general.architecture
  int64_t head_dim = 0;
  int64_t q_dim = 0;
  int64_t kv_dim = 0;
  bool qkv_bias = false;
  bool qk_norm = false;
};

Status validate(const RandomModelOptions& o) {
  if (o.arch != "llama" && o.arch != "mistral" && o.arch != "qwen2" && o.arch != "qwen3") {
    return error(ErrorCode::kInvalidArgument, "arch '{}' is not one of llama, mistral, qwen2, qwen3", o.arch);
  }
  const std::pair<const char*, int64_t> positive[] = {{"n_embd", o.n_embd}, {"n_layer", o.n_layer},
                                                      {"n_head", o.n_head}, {"n_head_kv", o.n_head_kv},
                                                      {"n_ff", o.n_ff},     {"n_ctx", o.n_ctx}};
  for (const auto& [field, v] : positive) {
    if (v <= 0) return error(ErrorCode::kInvalidArgument, "{} must be positive, got {}", field, v);
  }
  if (o.n_head % o.n_head_kv != 0) {
    return error(ErrorCode::kInvalidArgument, "n_head {} is not a multiple of n_head_kv {}", o.n_head, o.n_head_kv);
  }
  if (o.head_dim == 0 && o.n_embd % o.n_head != 0) {
    return error(ErrorCode::kInvalidArgument, "n_embd {} is not a multiple of n_head {} (set head_dim)", o.n_embd,
                 o.n_head);
  }
  const int64_t hd = o.head_dim != 0 ? o.head_dim : o.n_embd / o.n_head;
  if (hd <= 0 || hd % 2 != 0) return error(ErrorCode::kInvalidArgument, "head_dim {} must be positive and even", hd);
  if (o.sliding_window < 0 || (o.sliding_window > 0 && o.arch != "mistral" && o.arch != "llama")) {
    return error(ErrorCode::kInvalidArgument, "sliding_window {} is only for arch llama or mistral (and not negative)",
                 o.sliding_window);
  }
  if (o.vocab.kind != VocabKind::kCopy && o.n_vocab <= 0) {
    return error(ErrorCode::kInvalidArgument, "n_vocab must be positive, got {}", o.n_vocab);
  }
  if (!(o.weight_std > 0) || !(o.rope_theta > 0) || !(o.rms_eps > 0)) {
    return error(ErrorCode::kInvalidArgument, "weight_std, rope_theta and rms_eps must be positive");
  }
  FRUGAL_ASSIGN_OR_RETURN(WeightMix mix, parse_weight_type(o.weight_type));
  if (dtype_layout(mix.type).block_size > 1) {
    const TypeTraits* tr = type_traits(mix.type);
    if (tr == nullptr || tr->from_float_ref == nullptr) {
      return error(ErrorCode::kNotSupported, "weight type {} has no reference quantizer", dtype_name(mix.type));
    }
  }
  return ok_status();
}

Shape shape_of(const RandomModelOptions& o) {
  Shape s;
  s.file_arch = o.arch == "mistral" ? "llama" : o.arch;
  s.head_dim = o.head_dim != 0 ? o.head_dim : o.n_embd / o.n_head;
  s.q_dim = o.n_head * s.head_dim;
  s.kv_dim = o.n_head_kv * s.head_dim;
  s.qkv_bias = o.arch == "qwen2";
  s.qk_norm = o.arch == "qwen3";
  return s;
}

std::vector<TensorPlan> plan_tensors(const RandomModelOptions& o, const Shape& s, int64_t n_vocab) {
  std::vector<TensorPlan> t;
  t.push_back({"token_embd.weight", {o.n_embd, n_vocab}, Init::kNormal, -1});
  if (o.rope_freqs) t.push_back({"rope_freqs.weight", {s.head_dim / 2}, Init::kRopeFreqs, -1});
  for (int il = 0; il < static_cast<int>(o.n_layer); ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    t.push_back({p + "attn_norm.weight", {o.n_embd}, Init::kNormWeight, il});
    const std::pair<const char*, int64_t> qkv[] = {{"attn_q", s.q_dim}, {"attn_k", s.kv_dim}, {"attn_v", s.kv_dim}};
    for (const auto& [name, rows] : qkv) {
      t.push_back({p + name + ".weight", {o.n_embd, rows}, Init::kNormal, il});
      if (s.qkv_bias) t.push_back({p + name + ".bias", {rows}, Init::kNormal, il});
    }
    if (s.qk_norm) {
      t.push_back({p + "attn_q_norm.weight", {s.head_dim}, Init::kNormWeight, il});
      t.push_back({p + "attn_k_norm.weight", {s.head_dim}, Init::kNormWeight, il});
    }
    t.push_back({p + "attn_output.weight", {s.q_dim, o.n_embd}, Init::kNormal, il});
    t.push_back({p + "ffn_norm.weight", {o.n_embd}, Init::kNormWeight, il});
    t.push_back({p + "ffn_gate.weight", {o.n_embd, o.n_ff}, Init::kNormal, il});
    t.push_back({p + "ffn_up.weight", {o.n_embd, o.n_ff}, Init::kNormal, il});
    t.push_back({p + "ffn_down.weight", {o.n_ff, o.n_embd}, Init::kNormal, il});
  }
  t.push_back({"output_norm.weight", {o.n_embd}, Init::kNormWeight, -1});
  if (!o.tied_embeddings) t.push_back({"output.weight", {o.n_embd, n_vocab}, Init::kNormal, -1});
  return t;
}

// The Llama 3 converter's rope_freqs: 1 for short wavelengths, `factor` for long ones, a smooth
// blend between (ggml-org/llama.cpp conversion, LlamaModel.generate_extra_tensors).
std::vector<float> llama3_rope_freqs(const RandomModelOptions& o, int64_t head_dim) {
  const double low_wavelen = static_cast<double>(o.rope_original_ctx) / o.rope_low_freq_factor;
  const double high_wavelen = static_cast<double>(o.rope_original_ctx) / o.rope_high_freq_factor;
  std::vector<float> f;
  for (int64_t i = 0; i < head_dim; i += 2) {
    const double freq = 1.0 / std::pow(o.rope_theta, static_cast<double>(i) / static_cast<double>(head_dim));
    const double wavelen = 2.0 * M_PI / freq;
    if (wavelen < high_wavelen) {
      f.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      f.push_back(static_cast<float>(o.rope_scaling_factor));
    } else {
      const double smooth = (static_cast<double>(o.rope_original_ctx) / wavelen - o.rope_low_freq_factor) /
                            (o.rope_high_freq_factor - o.rope_low_freq_factor);
      f.push_back(static_cast<float>(1.0 / ((1.0 - smooth) / o.rope_scaling_factor + smooth)));
    }
  }
  return f;
}

void convert_row(DType type, const float* src, uint8_t* dst, int64_t n) {
  switch (type) {
    case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::kF16: {
      auto* d = reinterpret_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_fp16(src[i]);
      return;
    }
    case DType::kBF16: {
      auto* d = reinterpret_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    default: type_traits(type)->from_float_ref(src, dst, n);
  }
}

// Rows are generated in fixed chunks, each from its own seed, so threads never change the bytes.
constexpr int64_t kChunkRows = 16;

Status fill_tensor(const TensorPlan& plan, DType type, const RandomModelOptions& o, std::vector<uint8_t>& bytes) {
  const int64_t ncols = plan.dims[0];
  int64_t nrows = 1;
  for (size_t i = 1; i < plan.dims.size(); ++i) nrows *= plan.dims[i];
  const auto rb = static_cast<size_t>(row_bytes(type, ncols));
  bytes.assign(rb * static_cast<size_t>(nrows), 0);

  if (plan.init == Init::kRopeFreqs) {
    const std::vector<float> f = llama3_rope_freqs(o, ncols * 2);
    std::memcpy(bytes.data(), f.data(), bytes.size());
    return ok_status();
  }
  const uint64_t tensor_seed = mix_seed(o.seed, hash_name(plan.name));
  const int64_t n_chunks = (nrows + kChunkRows - 1) / kChunkRows;
  std::atomic<int64_t> next{0};
  auto work = [&] {
    std::vector<float> buf(static_cast<size_t>(kChunkRows * ncols));
    for (int64_t c = next++; c < n_chunks; c = next++) {
      const int64_t r0 = c * kChunkRows;
      const int64_t r1 = std::min(nrows, r0 + kChunkRows);
      const size_t n = static_cast<size_t>((r1 - r0) * ncols);
      Rng rng(mix_seed(tensor_seed, static_cast<uint64_t>(c)));
      const float scale = plan.init == Init::kNormWeight ? 0.1f : static_cast<float>(o.weight_std);
      const float offset = plan.init == Init::kNormWeight ? 1.0f : 0.0f;
      for (size_t i = 0; i < n; ++i) buf[i] = offset + scale * rng.normal();
      for (int64_t r = r0; r < r1; ++r) {
        convert_row(type, buf.data() + (r - r0) * ncols, bytes.data() + static_cast<size_t>(r) * rb, ncols);
      }
    }
  };
  unsigned n_threads = o.n_threads > 0 ? static_cast<unsigned>(o.n_threads) : std::thread::hardware_concurrency();
  n_threads = std::max(1u, std::min<unsigned>(n_threads, static_cast<unsigned>(n_chunks)));
  std::vector<std::thread> threads;
  for (unsigned i = 1; i < n_threads; ++i) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  return ok_status();
}

void set_hparams(const RandomModelOptions& o, const Shape& s, int64_t n_vocab, uint32_t file_type,
                 GgufWriter& w) {
  const std::string& a = s.file_arch;
  w.set_string("general.architecture", a);
  w.set_string("general.name", o.name);
  w.set_u32("general.file_type", file_type);
  w.set_u32("general.quantization_version", 2);
  w.set_u32(a + ".vocab_size", static_cast<uint32_t>(n_vocab));
  w.set_u32(a + ".context_length", static_cast<uint32_t>(o.n_ctx));
  w.set_u32(a + ".embedding_length", static_cast<uint32_t>(o.n_embd));
  w.set_u32(a + ".block_count", static_cast<uint32_t>(o.n_layer));
  w.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(o.n_ff));
  w.set_u32(a + ".attention.head_count", static_cast<uint32_t>(o.n_head));
  w.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(o.n_head_kv));
  if (o.arch == "qwen3" || s.head_dim * o.n_head != o.n_embd) {
    w.set_u32(a + ".attention.key_length", static_cast<uint32_t>(s.head_dim));
    w.set_u32(a + ".attention.value_length", static_cast<uint32_t>(s.head_dim));
  }
  w.set_u32(a + ".rope.dimension_count", static_cast<uint32_t>(s.head_dim));
  w.set_f32(a + ".rope.freq_base", static_cast<float>(o.rope_theta));
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", static_cast<float>(o.rms_eps));
  if (o.sliding_window > 0) w.set_u32(a + ".attention.sliding_window", static_cast<uint32_t>(o.sliding_window));
}

// The vocabulary, made (or its source opened) before anything is written, since it fixes n_vocab.
struct Vocab {
  SynthVocab made;
  std::unique_ptr<GgufFile> source;  // VocabKind::kCopy
  int64_t n_vocab = 0;
};

Result<Vocab> make_vocab(const RandomModelOptions& o) {
  Vocab v;
  switch (o.vocab.kind) {
    case VocabKind::kCopy: {
      FRUGAL_ASSIGN_OR_RETURN(v.source, GgufFile::open(o.vocab.copy_from));
      const GgufValue* tokens = v.source->find("tokenizer.ggml.tokens");
      if (tokens == nullptr) {
        return error(ErrorCode::kNotFound, "{}: no tokenizer.ggml.tokens to copy a vocabulary from",
                     o.vocab.copy_from);
      }
      v.n_vocab = static_cast<int64_t>(tokens->array_size());
      if (o.n_vocab != 0 && o.n_vocab != v.n_vocab) {
        return error(ErrorCode::kInvalidArgument, "{}: vocabulary has {} tokens but n_vocab is {}",
                     o.vocab.copy_from, v.n_vocab, o.n_vocab);
      }
      return v;
    }
    case VocabKind::kSpm: {
      FRUGAL_ASSIGN_OR_RETURN(v.made, make_spm_vocab(o.n_vocab, o.seed));
      break;
    }
    case VocabKind::kBpe: {
      FRUGAL_ASSIGN_OR_RETURN(v.made, make_bpe_vocab(o.n_vocab, o.vocab.bpe_pre, o.seed));
      break;
    }
  }
  v.n_vocab = static_cast<int64_t>(v.made.tokens.size());
  return v;
}

void write_vocab(const Vocab& v, GgufWriter& w) {
  if (v.source == nullptr) {
    write_vocab(v.made, w);
    return;
  }
  for (const auto& [key, value] : v.source->metadata()) {
    if (key.rfind("tokenizer.", 0) == 0) w.set_value(key, value);
  }
}

}  // namespace

Result<DType> weight_type_for_tensor(const RandomModelOptions& o, const std::string& name, int layer, int n_dims,
                                     int64_t ncols) {
  FRUGAL_ASSIGN_OR_RETURN(WeightMix mix, parse_weight_type(o.weight_type));
  if (n_dims < 2 || !ends_with(name, ".weight")) return DType::kF32;
  if (!mix.q4_k_m) return dtype_layout(mix.type).block_size > 1 ? shape_fallback(mix.type, ncols) : mix.type;
  const bool is_output = name == "output.weight" || (o.tied_embeddings && name == "token_embd.weight");
  DType t = DType::kQ4_K;
  if (is_output) {
    t = ncols % dtype_layout(DType::kQ4_K).block_size != 0 ? DType::kQ8_0 : DType::kQ6_K;
  } else if ((ends_with(name, ".attn_v.weight") || ends_with(name, ".ffn_down.weight")) &&
             use_more_bits(layer, static_cast<int>(o.n_layer))) {
    t = DType::kQ6_K;
  }
  return shape_fallback(t, ncols);
}

Result<uint32_t> llama_file_type(std::string_view weight_type) {
  FRUGAL_ASSIGN_OR_RETURN(WeightMix mix, parse_weight_type(weight_type));
  if (mix.q4_k_m) return 15u;
  // LLAMA_FTYPE_*; a lone K type is named after its "_S" mix, the one that is mostly that type.
  switch (mix.type) {
    case DType::kF32: return 0u;
    case DType::kF16: return 1u;
    case DType::kQ4_0: return 2u;
    case DType::kQ4_1: return 3u;
    case DType::kQ8_0: return 7u;
    case DType::kQ5_0: return 8u;
    case DType::kQ5_1: return 9u;
    case DType::kQ2_K: return 10u;
    case DType::kQ3_K: return 11u;
    case DType::kQ4_K: return 14u;
    case DType::kQ5_K: return 16u;
    case DType::kQ6_K: return 18u;
    case DType::kIQ4_NL: return 25u;
    case DType::kBF16: return 32u;
    default: break;
  }
  return error(ErrorCode::kInvalidArgument, "no llama file type for {}", weight_type);
}

Status write_random_model(const RandomModelOptions& o, const std::string& path) {
  FRUGAL_RETURN_IF_ERROR(validate(o).with_context(path));
  const Shape s = shape_of(o);
  FRUGAL_ASSIGN_OR_RETURN(uint32_t file_type, llama_file_type(o.weight_type));

  FRUGAL_ASSIGN_OR_RETURN(Vocab vocab, make_vocab(o));
  const int64_t n_vocab = vocab.n_vocab;
  GgufWriter w;
  set_hparams(o, s, n_vocab, file_type, w);
  write_vocab(vocab, w);
  vocab = {};

  std::vector<uint8_t> bytes;
  for (const TensorPlan& t : plan_tensors(o, s, n_vocab)) {
    FRUGAL_ASSIGN_OR_RETURN(DType type, weight_type_for_tensor(o, t.name, t.layer, static_cast<int>(t.dims.size()),
                                                              t.dims[0]));
    const TypeTraits* tr = type_traits(type);
    if (dtype_layout(type).block_size > 1 && (tr == nullptr || tr->from_float_ref == nullptr)) {
      return error(ErrorCode::kNotSupported, "{}: tensor '{}' needs type {}, which has no reference quantizer", path,
                   t.name, dtype_name(type));
    }
    FRUGAL_RETURN_IF_ERROR(fill_tensor(t, type, o, bytes));
    FRUGAL_RETURN_IF_ERROR(w.add_tensor(t.name, type, t.dims, bytes.data(), bytes.size()).with_context(path));
  }
  bytes = {};
  return w.write(path);
}

namespace {

RandomModelOptions tiny(const std::string& arch, const std::string& name) {
  RandomModelOptions o;
  o.arch = arch;
  o.name = name;
  o.n_embd = 256;
  o.n_layer = 4;
  o.n_head = 4;
  o.n_head_kv = 2;
  o.n_ff = 512;
  o.n_vocab = 512;
  o.n_ctx = 2048;
  return o;
}

}  // namespace

const std::vector<std::string>& random_model_preset_names() {
  static const std::vector<std::string> names = {"tinyllama-1.1b", "qwen2.5-0.5b", "llama3.1-8b", "tiny-llama",
                                                 "tiny-mistral",   "tiny-qwen2",   "tiny-qwen3"};
  return names;
}

Result<RandomModelOptions> random_model_preset(std::string_view name, const std::string& shared_models_dir) {
  RandomModelOptions o;
  if (name == "tinyllama-1.1b") {  // TinyLlama-1.1B: Llama-2 shape with GQA, SPM vocab
    o.arch = "llama";
    o.n_embd = 2048;
    o.n_layer = 22;
    o.n_head = 32;
    o.n_head_kv = 4;
    o.n_ff = 5632;
    o.n_vocab = 32000;
    o.n_ctx = 2048;
    o.rope_theta = 10000.0;
    o.rms_eps = 1e-5;
    o.weight_type = "F16";
  } else if (name == "qwen2.5-0.5b") {  // Qwen2.5-0.5B: biases, tied embeddings, real vocab
    o.arch = "qwen2";
    o.n_embd = 896;
    o.n_layer = 24;
    o.n_head = 14;
    o.n_head_kv = 2;
    o.n_ff = 4864;
    o.n_vocab = 0;
    o.n_ctx = 32768;
    o.rope_theta = 1000000.0;
    o.rms_eps = 1e-6;
    o.tied_embeddings = true;
    o.vocab.kind = VocabKind::kCopy;
    o.vocab.copy_from = shared_models_dir + "/vocab-qwen2.gguf";
    o.weight_type = "F16";
  } else if (name == "llama3.1-8b") {  // Llama-3.1-8B: rope_freqs, byte-level BPE vocab
    o.arch = "llama";
    o.n_embd = 4096;
    o.n_layer = 32;
    o.n_head = 32;
    o.n_head_kv = 8;
    o.n_ff = 14336;
    o.n_vocab = 128256;
    o.n_ctx = 131072;
    o.rope_theta = 500000.0;
    o.rms_eps = 1e-5;
    o.rope_freqs = true;
    o.vocab.kind = VocabKind::kBpe;
    o.vocab.bpe_pre = "llama-bpe";
    o.weight_type = "Q4_K_M";  // F16 would need 16 GB of memory while writing
  } else if (name == "tiny-llama") {  // Llama-3 style: rope_freqs (non-trivial at head_dim 64)
    o = tiny("llama", "tiny-llama");
    o.rope_freqs = true;
  } else if (name == "tiny-mistral") {
    o = tiny("mistral", "tiny-mistral");
    o.n_head = 8;
    o.n_head_kv = 2;
    o.sliding_window = 16;
  } else if (name == "tiny-qwen2") {
    o = tiny("qwen2", "tiny-qwen2");
    o.rope_theta = 1000000.0;
    o.rms_eps = 1e-6;
    o.tied_embeddings = true;
    o.vocab.kind = VocabKind::kBpe;
    o.vocab.bpe_pre = "qwen2";
  } else if (name == "tiny-qwen3") {  // head_dim 128 != n_embd / n_head = 64
    o = tiny("qwen3", "tiny-qwen3");
    o.head_dim = 128;
    o.rope_theta = 1000000.0;
    o.rms_eps = 1e-6;
    o.tied_embeddings = true;
    o.vocab.kind = VocabKind::kBpe;
    o.vocab.bpe_pre = "qwen2";
  } else {
    return error(ErrorCode::kNotFound, "no random model preset '{}'", name);
  }
  if (o.name == "random") o.name = std::string(name);
  return o;
}

}  // namespace frugal::synth
