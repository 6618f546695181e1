// `frugal quantize` to NVFP4 and MXFP4 on a whole synthetic model: the output loads and its
// logits stay close to the F16 model's (compared with Q4_0's at the same bits), NVFP4's global
// scales are written beside their tensors and read back, and shapes the blocks cannot hold are
// refused by name or kept in the fallback type; with H-Scale's scales (`--nvfp4-scale hscale`)
// the tensors are the row search's, below RTN's weighted error, the same for any thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "frugal/core/half.h"
#include "frugal/format/gguf.h"
#include "frugal/model/architecture.h"
#include "frugal/model/model.h"
#include "frugal/quant/nvfp4_hscale.h"
#include "frugal/quant/reference.h"
#include "frugal/quantize/model_quantizer.h"
#include "frugal/synth/random_model.h"
#include "quantize/synthetic_model.h"

namespace frugal::quantize {
namespace {

using testing::logits_of;
using testing::rel_rms_error;
using testing::TempDir;
using testing::write_f16_model;

namespace fs = std::filesystem;



Result<QuantizeReport> quantize_to(const std::string& in, const std::string& out, const std::string& type,
                                   bool pure = false) {
  QuantizeOptions o;
  o.input = in;
  o.output = out;
  o.target = *find_target(type);
  o.mix.pure = pure;
  o.n_threads = 2;
  return quantize_model(o);
}

// Logits of every position of a fixed 8-token prompt.


TEST(Fp4Quantize, LogitsStayCloseToF16) {
  TempDir dir;
  const std::string f16 = write_f16_model(dir, 256, 512, "f16.gguf");
  const std::vector<float> ref = logits_of(f16);
  ASSERT_FALSE(ref.empty());
  double err[3] = {0, 0, 0};
  const char* types[3] = {"Q4_0", "MXFP4", "NVFP4"};
  for (int k = 0; k < 3; ++k) {
    const std::string out = dir.file(std::string(types[k]) + ".gguf");
    auto r = quantize_to(f16, out, types[k]);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->n_fallback, 0);
    const std::vector<float> got = logits_of(out);
    ASSERT_EQ(got.size(), ref.size());
    for (float v : got) ASSERT_TRUE(std::isfinite(v));
    err[k] = rel_rms_error(got, ref);
    std::printf("  %-6s relative RMS logit error vs F16: %.4f\n", types[k], err[k]);
  }
  // Random weights give logits of noise, so each layer's weight error shows almost undamped:
  // measured 0.186 (Q4_0), 0.249 (MXFP4), 0.208 (NVFP4). A dropped or misapplied NVFP4 global
  // scale (about 1e-5 here) would give an error near 1. The FP4 grids are coarser at the top than
  // Q4_0's uniform one: allowed 1.5x Q4_0's error.
  EXPECT_LT(err[0], 0.25);
  EXPECT_LT(err[1], 1.5 * err[0]);
  EXPECT_LT(err[2], 1.5 * err[0]);
}

// The quantized files through the CPU backend against the independent float64 forward
// (tests/reference) of the same file: the reference dequantizes every weight with the scalar
// to_float_ref and applies NVFP4's per-tensor scale from its companion tensor, so this checks the
// engine's FP4/HBQ kernels and its handling of the global scale on a whole model. The CPU
// quantizes activations to Q8_0 for these types: ~1-3% of the logit norm after 14 products (the
// bound of tests/cuda's per-type logits test).
TEST(Fp4Quantize, CpuLogitsMatchFloat64Reference) {
  TempDir dir;
  auto opts = synth::random_model_preset("tiny-llama", FRUGAL_SHARED_MODELS_DIR);
  ASSERT_TRUE(opts.ok());
  opts->weight_type = "F32";
  opts->n_layer = 2;
  opts->weight_std = 0.05;
  const std::string f32 = dir.file("f32.gguf");
  ASSERT_TRUE(synth::write_random_model(*opts, f32).ok());
  for (const char* type : {"MXFP4", "NVFP4", "HBQ_A", "HBQ_E"}) {
    const std::string out = dir.file(std::string(type) + ".gguf");
    auto r = quantize_to(f32, out, type, true);
    ASSERT_TRUE(r.ok()) << type << ": " << r.status().to_string();
    const double rel = testing::cpu_logits_vs_reference(out, 12);
    ASSERT_GE(rel, 0) << type;
    std::printf("  %-6s CPU logits vs float64 reference: rel_l2 %.2e\n", type, rel);
    EXPECT_LT(rel, 3e-2) << type;
  }
}

TEST(Fp4Quantize, Nvfp4GlobalScalesAreWrittenAndRead) {
  TempDir dir;
  const std::string f16 = write_f16_model(dir, 256, 512, "f16.gguf");
  const std::string out = dir.file("nvfp4.gguf");
  ASSERT_TRUE(quantize_to(f16, out, "NVFP4").ok());
  auto in = GgufFile::open(f16);
  auto q = GgufFile::open(out);
  ASSERT_TRUE(in.ok() && q.ok());
  int n_nvfp4 = 0;
  for (const auto& t : (*q)->tensors()) {
    if (t.type != DType::kNVFP4) continue;
    ++n_nvfp4;
    const GgufTensorInfo* s = (*q)->find_tensor(global_scale_name(t.name));
    ASSERT_NE(s, nullptr) << t.name;
    ASSERT_EQ(s->type, DType::kF32);
    ASSERT_EQ(s->n_elements(), 1);
    float g;
    std::memcpy(&g, s->data, 4);
    // The global scale is amax / (6 * 448) of the F16 input tensor.
    const GgufTensorInfo* src = (*in)->find_tensor(t.name);
    ASSERT_NE(src, nullptr);
    float amax = 0.f;
    const auto* h = reinterpret_cast<const uint16_t*>(src->data);
    for (int64_t i = 0; i < src->n_elements(); ++i) amax = std::max(amax, std::fabs(fp16_to_f32(h[i])));
    EXPECT_EQ(g, quant::nvfp4_global_scale(amax)) << t.name;
    EXPECT_LT(g, 1e-3f) << t.name;  // N(0, 0.02) weights: far from 1, so a dropped scale would show
  }
  EXPECT_GT(n_nvfp4, 10);
  // Every companion belongs to an NVFP4 tensor (none for the Q6_K output projection).
  EXPECT_EQ((*q)->find_tensor("output.scale"), nullptr);
}

// Requantizing an NVFP4 file folds each input tensor's global scale into its values and drops
// the companions: the Q8_0 result stays close to the NVFP4 model it came from.
TEST(Fp4Quantize, RequantizingNvfp4FoldsItsGlobalScales) {
  TempDir dir;
  const std::string f16 = write_f16_model(dir, 256, 512, "f16.gguf");
  const std::string nv = dir.file("nvfp4.gguf");
  ASSERT_TRUE(quantize_to(f16, nv, "NVFP4").ok());
  QuantizeOptions o;
  o.input = nv;
  o.output = dir.file("q8.gguf");
  o.target = *find_target("Q8_0");
  o.allow_requantize = true;
  o.n_threads = 2;
  auto r = quantize_model(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto q = GgufFile::open(o.output);
  ASSERT_TRUE(q.ok());
  for (const auto& t : (*q)->tensors()) EXPECT_EQ(t.name.find(".scale"), std::string::npos) << t.name;
  const double err = rel_rms_error(logits_of(o.output), logits_of(nv));
  std::printf("  NVFP4 -> Q8_0 relative RMS logit error vs NVFP4: %.4f\n", err);
  EXPECT_LT(err, 0.05);  // measured 0.019; an unfolded scale (about 1e-5) would give about 1
}

// A file whose global scale is not one positive f32 is refused with the tensor's name.
TEST(Fp4Quantize, MalformedGlobalScaleIsNamed) {
  TempDir dir;
  const std::string f16 = write_f16_model(dir, 256, 512, "f16.gguf");
  const std::string good = dir.file("nvfp4.gguf");
  ASSERT_TRUE(quantize_to(f16, good, "NVFP4").ok());
  auto q = GgufFile::open(good);
  ASSERT_TRUE(q.ok());
  for (const float bad : {-1.f, 0.f, std::numeric_limits<float>::infinity()}) {
    GgufWriter w;
    for (const auto& [key, v] : (*q)->metadata()) w.set_value(key, v);
    for (const auto& t : (*q)->tensors()) {
      if (t.name == "blk.1.ffn_up.scale") {
        ASSERT_TRUE(w.add_tensor(t.name, DType::kF32, t.dims, &bad, 4).ok());
      } else {
        ASSERT_TRUE(w.add_tensor(t.name, t.type, t.dims, t.data, t.nbytes).ok());
      }
    }
    const std::string path = dir.file("bad.gguf");
    ASSERT_TRUE(w.write(path).ok());
    auto m = Model::load(path);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find("'blk.1.ffn_up.scale'"), std::string::npos) << m.status().message();
  }
}

// Rows of 96 (embedding) and 160 (FFN) elements: not whole NVFP4 blocks of 64. --pure refuses by
// tensor and shape, leaving no file; the mix falls back to MXFP4 (blocks of 32) for those tensors.
TEST(Fp4Quantize, ImpossibleShapesAreRefusedOrFallBack) {
  TempDir dir;
  const std::string f16 = write_f16_model(dir, 96, 160, "odd.gguf");
  auto r = quantize_to(f16, dir.file("pure.gguf"), "NVFP4", true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("tensor 'output.weight': rows of 96 elements cannot be stored as nvfp4 "
                                      "(blocks of 64)"),
            std::string::npos)
      << r.status().message();
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"odd.gguf"});

  const std::string mixed = dir.file("mixed.gguf");
  r = quantize_to(f16, mixed, "NVFP4");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_GT(r->n_fallback, 0);
  auto q = GgufFile::open(mixed);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ((*q)->find_tensor("blk.0.attn_q.weight")->type, DType::kMXFP4);
  EXPECT_EQ((*q)->find_tensor("blk.0.ffn_down.weight")->type, DType::kMXFP4);  // 160 columns
  EXPECT_EQ((*q)->find_tensor("blk.0.attn_q.scale"), nullptr);                  // MXFP4 has none
  const std::vector<float> got = logits_of(mixed);
  for (float v : got) ASSERT_TRUE(std::isfinite(v));
  // MXFP4 has blocks of 32: 96 columns fit, --pure works.
  EXPECT_TRUE(quantize_to(f16, dir.file("mx.gguf"), "MXFP4", true).ok());
}


// ---- H-Scale (`--nvfp4-scale hscale`) on a whole model. ----

// An importance matrix for every blk.* weight of `path`: log-normal column weights with a few
// outlier columns, as collected activations look.
Imatrix random_imatrix(const std::string& path, uint32_t seed) {
  auto f = GgufFile::open(path);
  EXPECT_TRUE(f.ok());
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> uni(0.f, 1.f);
  Imatrix m;
  m.chunks = 1;
  for (const auto& t : (*f)->tensors()) {
    if (t.name.rfind("blk.", 0) != 0 || t.dims.size() != 2) continue;
    ImatrixEntry& e = m.entries[t.name];
    e.ncall = 2;
    e.values.resize(static_cast<size_t>(t.dims[0]));
    for (float& v : e.values) v = 2.f * std::exp(normal(rng)) * (uni(rng) < 0.02f ? 50.f : 1.f);
  }
  return m;
}

Result<QuantizeReport> quantize_hscale(const std::string& in, const std::string& out, const Imatrix* imatrix,
                                       int threads, int radius = quant::kHScaleDefaultRadius,
                                       const std::string& type = "NVFP4") {
  QuantizeOptions o;
  o.input = in;
  o.output = out;
  o.target = *find_target(type);
  o.imatrix = imatrix;
  o.nvfp4_scale = Nvfp4Scale::kHScale;
  o.hscale_radius = radius;
  o.n_threads = threads;
  return quantize_model(o);
}

std::vector<float> f16_floats(const GgufTensorInfo& t) {
  std::vector<float> f(static_cast<size_t>(t.n_elements()));
  const auto* h = reinterpret_cast<const uint16_t*>(t.data);
  for (size_t i = 0; i < f.size(); ++i) f[i] = fp16_to_f32(h[i]);
  return f;
}

// Every NVFP4 tensor of the file holds what the row search writes for that tensor's floats, its
// global scale and its imatrix row (so the columns, the scale and the radius reach it), and its
// imatrix-weighted error is below RTN's; the model loads and its logits stay as close to F16's.
TEST(Nvfp4HScaleModel, TensorsAreTheSearchsAndBeatRtn) {
  TempDir dir;
  const std::string f16 = write_f16_model(dir, 256, 512, "f16.gguf");
  const Imatrix imatrix = random_imatrix(f16, 3);
  const std::string rtn = dir.file("rtn.gguf");
  const std::string hs = dir.file("hscale.gguf");
  ASSERT_TRUE(quantize_to(f16, rtn, "NVFP4").ok());
  auto r = quantize_hscale(f16, hs, &imatrix, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto in = GgufFile::open(f16);
  auto qr = GgufFile::open(rtn);
  auto qh = GgufFile::open(hs);
  ASSERT_TRUE(in.ok() && qr.ok() && qh.ok());
  EXPECT_EQ(*(*qh)->get_string("quantize.nvfp4.scale"), "hscale");
  EXPECT_EQ(*(*qh)->get_int("quantize.nvfp4.hscale_radius"), quant::kHScaleDefaultRadius);
  EXPECT_FALSE((*qr)->has("quantize.nvfp4.scale"));
  int n_nvfp4 = 0;
  for (const auto& t : (*qh)->tensors()) {
    if (t.type != DType::kNVFP4) continue;
    ++n_nvfp4;
    const std::vector<float> w = f16_floats(*(*in)->find_tensor(t.name));
    const int64_t cols = t.dims[0];
    const int64_t rows = t.n_elements() / cols;
    float g;
    std::memcpy(&g, (*qh)->find_tensor(global_scale_name(t.name))->data, 4);
    auto it = imatrix.entries.find(t.name);
    const std::vector<float> h = it != imatrix.entries.end() ? it->second.mean() : std::vector<float>(cols, 1.f);
    std::vector<uint8_t> want(t.nbytes);
    quant::quantize_rows_nvfp4_hscale(w.data(), want.data(), rows, cols, g,
                                      it != imatrix.entries.end() ? h.data() : nullptr, quant::kHScaleDefaultRadius);
    ASSERT_EQ(std::memcmp(want.data(), t.data, t.nbytes), 0) << t.name;
    double err[2] = {0, 0};
    const GgufTensorInfo* files[2] = {(*qr)->find_tensor(t.name), &t};
    for (int k = 0; k < 2; ++k) {
      std::vector<float> d(w.size());
      quant::dequantize_nvfp4_ref(files[k]->data, d.data(), static_cast<int64_t>(d.size()));
      for (size_t i = 0; i < w.size(); ++i) {
        const double e = w[i] - static_cast<double>(d[i]) * g;
        err[k] += h[i % static_cast<size_t>(cols)] * e * e;
      }
    }
    EXPECT_LT(err[1], err[0]) << t.name;
  }
  EXPECT_GT(n_nvfp4, 10);
  const std::vector<float> ref = logits_of(f16);
  const double e_rtn = rel_rms_error(logits_of(rtn), ref);
  const std::vector<float> got = logits_of(hs);
  ASSERT_EQ(got.size(), ref.size());
  for (float v : got) ASSERT_TRUE(std::isfinite(v));
  const double e_hs = rel_rms_error(got, ref);
  std::printf("  relative RMS logit error vs F16: NVFP4 RTN %.4f, H-Scale %.4f\n", e_rtn, e_hs);
  // Random weights and a random imatrix: no promise on the logits beyond staying in RTN's range.
  EXPECT_LT(e_hs, 1.2 * e_rtn);
}

TEST(Nvfp4HScaleModel, SameBytesForAnyThreadCount) {
  TempDir dir;
  const std::string f16 = write_f16_model(dir, 256, 512, "f16.gguf");
  const Imatrix imatrix = random_imatrix(f16, 4);
  std::string first;
  for (const int threads : {1, 2, 5}) {
    const std::string out = dir.file("t" + std::to_string(threads) + ".gguf");
    ASSERT_TRUE(quantize_hscale(f16, out, &imatrix, threads).ok());
    std::ifstream s(out, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(s)), {});
    if (first.empty()) {
      first = bytes;
    } else {
      EXPECT_TRUE(bytes == first) << threads << " threads";
    }
  }
}

// Radius 0 leaves RTN's scales: every tensor's bytes equal the RTN file's (only the provenance
// keys differ), so the default path and the search share their element encoding.
TEST(Nvfp4HScaleModel, RadiusZeroWritesRtnsTensors) {
  TempDir dir;
  const std::string f16 = write_f16_model(dir, 256, 512, "f16.gguf");
  const Imatrix imatrix = random_imatrix(f16, 5);
  ASSERT_TRUE(quantize_to(f16, dir.file("rtn.gguf"), "NVFP4").ok());
  ASSERT_TRUE(quantize_hscale(f16, dir.file("r0.gguf"), &imatrix, 2, 0).ok());
  auto a = GgufFile::open(dir.file("rtn.gguf"));
  auto b = GgufFile::open(dir.file("r0.gguf"));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ((*a)->tensors().size(), (*b)->tensors().size());
  for (const auto& t : (*a)->tensors()) {
    const GgufTensorInfo* u = (*b)->find_tensor(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    ASSERT_EQ(t.nbytes, u->nbytes);
    EXPECT_EQ(std::memcmp(t.data, u->data, t.nbytes), 0) << t.name;
  }
}

// H-Scale with nothing to choose is refused before any file is made: a type without NVFP4
// tensors, a model whose every NVFP4 candidate fell back, a radius out of range.
TEST(Nvfp4HScaleModel, RefusedWithoutNvfp4Tensors) {
  TempDir dir;
  const std::string f16 = write_f16_model(dir, 256, 512, "f16.gguf");
  auto r = quantize_hscale(f16, dir.file("q4.gguf"), nullptr, 2, quant::kHScaleDefaultRadius, "Q4_0");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("H-Scale chooses NVFP4 block scales, but type Q4_0 quantizes no tensor to NVFP4"),
            std::string::npos)
      << r.status().message();
  const std::string odd = write_f16_model(dir, 96, 160, "odd.gguf");  // every NVFP4 tensor falls back
  r = quantize_hscale(odd, dir.file("odd_nv.gguf"), nullptr, 2);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("quantizes no tensor to NVFP4"), std::string::npos) << r.status().message();
  r = quantize_hscale(f16, dir.file("big.gguf"), nullptr, 2, quant::kHScaleMaxRadius + 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("H-Scale radius 126: expected 0..125"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"f16.gguf", "odd.gguf"}));
}

}  // namespace
}  // namespace frugal::quantize
