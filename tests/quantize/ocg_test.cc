// OCG folded into a model by `frugal quantize --ocg` (quantize/ocg_fold.h): on fresh random models
// of each architecture the reordered float model computes the same logits as the original (up to
// float rounding) while every site was really reordered; NVFP4 tensors are RTN's (or H-Scale's,
// with the importances moved along) of the reordered weights; the W4A4 emulation backend quantizes
// exactly the block linears' inputs; bad requests are refused by name and leave no file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "frugal/format/gguf.h"
#include "frugal/model/architecture.h"
#include "frugal/model/model.h"
#include "frugal/quant/methods/nvfp4_activation.h"
#include "frugal/quant/nvfp4_hscale.h"
#include "frugal/quant/reference.h"
#include "frugal/quant/type_traits.h"
#include "frugal/quantize/model_quantizer.h"
#include "frugal/quantize/nvfp4_activation_backend.h"
#include "frugal/quantize/ocg_fold.h"
#include "frugal/synth/random_model.h"
#include "quantize/synthetic_model.h"

namespace frugal::quantize {
namespace {

namespace fs = std::filesystem;

using testing::logits_of;
using testing::TempDir;

std::string write_model(const TempDir& dir, const std::string& preset, const std::string& type, uint64_t seed) {
  auto o = synth::random_model_preset(preset, FRUGAL_SHARED_MODELS_DIR);
  EXPECT_TRUE(o.ok());
  o->weight_type = type;
  o->n_layer = 2;
  o->seed = seed;
  const std::string path = dir.file(preset + "-" + type + ".gguf");
  EXPECT_TRUE(synth::write_random_model(*o, path).ok());
  return path;
}

// Mean squares per input column for every block matrix, log-normal with three planted outlier
// channels per entry (far above the rest, so every site gets anchors).
Imatrix planted_imatrix(const std::string& model, uint64_t seed) {
  auto f = GgufFile::open(model);
  EXPECT_TRUE(f.ok());
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::lognormal_distribution<float> ln(0.f, 1.f);
  Imatrix m;
  m.chunks = 1;
  for (const auto& t : (*f)->tensors()) {
    if (t.name.rfind("blk.", 0) != 0 || t.dims.size() != 2) continue;
    ImatrixEntry e;
    e.ncall = 1;
    e.values.resize(static_cast<size_t>(t.dims[0]));
    for (float& v : e.values) v = ln(rng) * ln(rng);
    std::uniform_int_distribution<int64_t> pick(0, t.dims[0] - 1);
    for (int i = 0; i < 3; ++i) e.values[static_cast<size_t>(pick(rng))] = 5000.f;
    m.entries.emplace(t.name, std::move(e));
  }
  return m;
}

Result<QuantizeReport> quantize_ocg(const std::string& in, const std::string& out, const std::string& type,
                                    const Imatrix* imatrix, Nvfp4Scale scale = Nvfp4Scale::kRtn) {
  QuantizeOptions o;
  o.input = in;
  o.output = out;
  o.target = *find_target(type);
  o.imatrix = imatrix;
  o.imatrix_path = "planted.dat";
  o.ocg = true;
  o.nvfp4_scale = scale;
  o.n_threads = 2;
  return quantize_model(o);
}


std::vector<float> tensor_floats(const GgufFile& f, const std::string& name) {
  const GgufTensorInfo* t = f.find_tensor(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return {};
  std::vector<float> v(static_cast<size_t>(t->n_elements()));
  type_traits(t->type)->to_float_ref(t->data, v.data(), t->n_elements());
  return v;
}

// The fold is exact arithmetic: the reordered F32 model's logits equal the original's to float
// rounding, for every architecture (GQA, V biases, Q/K norms, tied embeddings, rope_freqs).
TEST(OcgFold, ReorderedFloatModelGivesTheSameLogits) {
  for (const char* preset : {"tiny-llama", "tiny-mistral", "tiny-qwen2", "tiny-qwen3"}) {
    SCOPED_TRACE(preset);
    TempDir dir;
    const std::string f32 = write_model(dir, preset, "F32", 3);
    const Imatrix im = planted_imatrix(f32, 4);
    const std::string out = dir.file("ocg.gguf");
    auto r = quantize_ocg(f32, out, "F32", &im);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    // Every site was reordered, so the comparison below tests each part of the fold.
    ASSERT_EQ(r->ocg_sites.size(), 1u + 2u * 2u);
    for (const OcgSite& s : r->ocg_sites) EXPECT_GT(s.anchors, 0) << s.name << " " << s.note;
    auto a = GgufFile::open(f32);
    auto b = GgufFile::open(out);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_NE(tensor_floats(**a, "blk.1.attn_norm.weight"), tensor_floats(**b, "blk.1.attn_norm.weight"));
    EXPECT_NE(tensor_floats(**a, "blk.1.attn_v.weight"), tensor_floats(**b, "blk.1.attn_v.weight"));
    const std::vector<float> ref = logits_of(f32, 12);
    const std::vector<float> got = logits_of(out, 12);
    ASSERT_EQ(got.size(), ref.size());
    double scale = 0;
    for (float v : ref) scale = std::max(scale, std::fabs(static_cast<double>(v)));
    double worst = 0;
    for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - ref[i]));
    // Only the order of float additions changed: measured about 1e-6 of the largest logit.
    EXPECT_LT(worst, 1e-4 * scale) << "largest logit " << scale;
  }
}

// NVFP4 with OCG: each tensor is RTN's (or H-Scale's, importances moved with their columns) of the
// reordered weights; the model loads and runs.
TEST(OcgFold, Nvfp4TensorsAreTheReorderedWeightsQuantized) {
  TempDir dir;
  const std::string f16 = write_model(dir, "tiny-llama", "F16", 5);
  const Imatrix im = planted_imatrix(f16, 6);
  auto in = GgufFile::open(f16);
  ASSERT_TRUE(in.ok());
  auto fold = OcgFold::plan(**in, im);
  ASSERT_TRUE(fold.ok()) << fold.status().to_string();
  for (Nvfp4Scale scale : {Nvfp4Scale::kRtn, Nvfp4Scale::kHScale}) {
    const std::string out = dir.file(scale == Nvfp4Scale::kRtn ? "rtn.gguf" : "hscale.gguf");
    auto r = quantize_ocg(f16, out, "NVFP4", &im, scale);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    auto q = GgufFile::open(out);
    ASSERT_TRUE(q.ok());
    for (const char* name : {"blk.0.attn_q.weight", "blk.0.attn_v.weight", "blk.1.attn_output.weight",
                             "blk.1.ffn_up.weight", "blk.0.ffn_down.weight"}) {
      SCOPED_TRACE(name);
      const GgufTensorInfo* t = (*in)->find_tensor(name);
      const GgufTensorInfo* qt = (*q)->find_tensor(name);
      ASSERT_TRUE(t != nullptr && qt != nullptr);
      ASSERT_EQ(qt->type, DType::kNVFP4);
      const int64_t cols = t->dims[0];
      const int64_t rows = t->dims[1];
      const std::vector<float> w = tensor_floats(**in, name);
      const TensorPermutation p = fold->for_tensor(name);
      ASSERT_TRUE(p.rows != nullptr || p.cols != nullptr);
      std::vector<float> moved(w.size());
      float amax = 0.f;
      for (int64_t r2 = 0; r2 < rows; ++r2) {
        const int64_t src_row = p.rows ? (*p.rows)[static_cast<size_t>(r2)] : r2;
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t src_col = p.cols ? (*p.cols)[static_cast<size_t>(c)] : c;
          moved[static_cast<size_t>(r2 * cols + c)] = w[static_cast<size_t>(src_row * cols + src_col)];
          amax = std::max(amax, std::fabs(w[static_cast<size_t>(src_row * cols + src_col)]));
        }
      }
      const float g = quant::nvfp4_global_scale(amax);
      std::vector<uint8_t> expect(qt->nbytes);
      if (scale == Nvfp4Scale::kRtn) {
        quant::quantize_rows_nvfp4_scaled(moved.data(), expect.data(), rows, cols, g);
      } else {
        const std::vector<float> imp = im.entries.at(name).mean();
        std::vector<float> imp_moved(imp.size());
        for (int64_t c = 0; c < cols; ++c) {
          imp_moved[static_cast<size_t>(c)] = imp[static_cast<size_t>(p.cols ? (*p.cols)[static_cast<size_t>(c)] : c)];
        }
        quant::quantize_rows_nvfp4_hscale(moved.data(), expect.data(), rows, cols, g, imp_moved.data(),
                                          quant::kHScaleDefaultRadius);
      }
      EXPECT_EQ(std::memcmp(expect.data(), qt->data, expect.size()), 0);
    }
    EXPECT_TRUE((*q)->find("quantize.ocg") != nullptr);
    const std::vector<float> logits = logits_of(out, 12);
    ASSERT_FALSE(logits.empty());
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  }
}

// The W4A4 backend quantizes the inputs of the block linears and of nothing else: its logits equal
// a forward pass whose every block weight product is fed the NVFP4 round trip by hand.
class HandQuantizedInputs final : public Backend {
 public:
  HandQuantizedInputs(const Model& m, Backend& inner) : inner_(inner) {
    for (const LayerWeights& L : m.weights().layers) {
      for (const WeightTensor* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) blk_.push_back(w->data);
    }
  }
  std::string name() const override { return "hand"; }
  int n_threads() const override { return inner_.n_threads(); }
  void matmul(const WeightTensor& w, const float* x, int64_t n, float* y, const float* bias) override {
    if (std::find(blk_.begin(), blk_.end(), w.data) == blk_.end()) return inner_.matmul(w, x, n, y, bias);
    std::vector<float> q(static_cast<size_t>(n * w.cols));
    for (int64_t r = 0; r < n; ++r) {
      quant::methods::nvfp4_fake_quantize_row(x + r * w.cols, q.data() + r * w.cols, w.cols);
    }
    inner_.matmul(w, q.data(), n, y, bias);
  }
  void get_rows(const WeightTensor& w, const int32_t* ids, int64_t n, float* y) override { inner_.get_rows(w, ids, n, y); }
  void rms_norm(const float* x, const float* wt, int64_t r, int64_t d, float eps, float* y) override {
    inner_.rms_norm(x, wt, r, d, eps, y);
  }
  void rope(float* x, int64_t t, int64_t h, int64_t hd, const int32_t* pos, const RopeParams& p) override {
    inner_.rope(x, t, h, hd, pos, p);
  }
  void swiglu(const float* g, const float* u, int64_t n, float* out) override { inner_.swiglu(g, u, n, out); }
  void add(float* x, const float* y, int64_t n) override { inner_.add(x, y, n); }
  void attention(const float* q, const KvView& kv, int layer, const int32_t* seq, const int32_t* pos, int64_t n,
                 const AttentionParams& p, float* out) override {
    inner_.attention(q, kv, layer, seq, pos, n, p, out);
  }

 private:
  Backend& inner_;
  std::vector<const void*> blk_;
};

TEST(Nvfp4ActivationBackend, QuantizesExactlyTheBlockLinearInputs) {
  TempDir dir;
  const std::string f32 = write_model(dir, "tiny-qwen2", "F32", 7);
  auto m = Model::load(f32);
  ASSERT_TRUE(m.ok());
  auto cpu = make_cpu_backend({});
  Nvfp4ActivationBackend act(**m, *cpu);
  HandQuantizedInputs hand(**m, *cpu);
  EXPECT_TRUE(act.skipped().empty());
  auto run = [&](Backend& be) {
    auto kv = KvCache::create((*m)->kv_options(1, 16));
    EXPECT_TRUE(kv.ok());
    Batch b;
    for (int i = 0; i < 12; ++i) b.add(1 + 37 * i % 500, i, 0, true);
    std::vector<float> logits(static_cast<size_t>(12 * (*m)->config().n_vocab));
    EXPECT_TRUE((*m)->forward(b, *kv, be, logits.data()).ok());
    return logits;
  };
  const std::vector<float> plain = run(*cpu);
  const std::vector<float> by_backend = run(act);
  const std::vector<float> by_hand = run(hand);
  EXPECT_EQ(by_backend, by_hand);
  EXPECT_EQ(act.quantized_products(), 2 * 7);
  double diff = 0;
  for (size_t i = 0; i < plain.size(); ++i) diff = std::max(diff, std::fabs(static_cast<double>(plain[i]) - by_backend[i]));
  EXPECT_GT(diff, 1e-3);  // 4-bit activations do change the logits
}

TEST(OcgFold, RefusesWhatItCannotDoAndWritesNothing) {
  TempDir dir;
  const std::string f16 = write_model(dir, "tiny-llama", "F16", 8);
  const Imatrix im = planted_imatrix(f16, 9);
  const size_t files = dir.entries().size();
  const std::string out = dir.file("out.gguf");
  auto expect_refusal = [&](const Result<QuantizeReport>& r, const std::string& needle) {
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
    EXPECT_FALSE(fs::exists(out));
  };
  expect_refusal(quantize_ocg(f16, out, "Q4_0", &im),
                 "OCG groups channels for NVFP4's 16-element scales, but type Q4_0 quantizes no tensor to NVFP4");
  expect_refusal(quantize_ocg(f16, out, "NVFP4", nullptr), "OCG needs calibration statistics: pass --imatrix FILE");
  Imatrix missing = im;
  missing.entries.erase("blk.1.ffn_down.weight");
  expect_refusal(quantize_ocg(f16, out, "NVFP4", &missing), "the imatrix has no entry for 'blk.1.ffn_down.weight'");
  Imatrix short_entry = im;
  short_entry.entries["blk.0.attn_output.weight"].values.resize(100);
  expect_refusal(quantize_ocg(f16, out, "NVFP4", &short_entry),
                 "imatrix entry 'blk.0.attn_output.weight' has 100 values, the tensor has 256 columns");
  // Quantized weights cannot be reordered without requantizing them.
  const std::string q8 = write_model(dir, "tiny-llama", "Q8_0", 8);
  QuantizeOptions o;
  o.input = q8;
  o.output = out;
  o.target = *find_target("NVFP4");
  o.imatrix = &im;
  o.ocg = true;
  o.allow_requantize = true;
  expect_refusal(quantize_model(o), "which is q8_0: quantize with --ocg from the float model");
  // A tensor the fold does not know how it is used.
  {
    auto f = GgufFile::open(f16);
    ASSERT_TRUE(f.ok());
    GgufWriter w;
    for (const auto& [k, v] : (*f)->metadata()) w.set_value(k, v);
    for (const auto& t : (*f)->tensors()) ASSERT_TRUE(w.add_tensor(t.name, t.type, t.dims, t.data, t.nbytes).ok());
    const std::vector<float> extra(256, 1.f);
    ASSERT_TRUE(w.add_tensor("blk.0.ffn_gate_inp.weight", DType::kF32, {256}, extra.data(), 256 * 4).ok());
    const std::string odd = dir.file("odd.gguf");
    ASSERT_TRUE(w.write(odd).ok());
    expect_refusal(quantize_ocg(odd, out, "NVFP4", &im), "tensor 'blk.0.ffn_gate_inp.weight' is not one the fold knows");
  }
  EXPECT_EQ(dir.entries().size(), files + 2);  // the two inputs made above, nothing else
}

}  // namespace
}  // namespace frugal::quantize
