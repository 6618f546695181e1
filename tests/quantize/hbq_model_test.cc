// `frugal quantize` to HBQ-A and HBQ-E on a whole synthetic model: the output loads and runs on the
// CPU with logits close to the F16 model's (compared with MXFP4's, the same elements with a
// coarser scale), every HBQ tensor holds exactly what the row quantizer writes for its floats and
// the chosen multiplier strategy, and rows that are not a multiple of 128 are refused by tensor
// name (--pure) or fall back to MXFP4 (the mix rules).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "frugal/core/half.h"
#include "frugal/format/gguf.h"
#include "frugal/model/architecture.h"
#include "frugal/model/model.h"
#include "frugal/quant/hbq.h"
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
                                   bool pure = false, quant::HbqScaleStrategy st = quant::HbqScaleStrategy::kSig) {
  QuantizeOptions o;
  o.input = in;
  o.output = out;
  o.target = *find_target(type);
  o.mix.pure = pure;
  o.hbq_scale = st;
  o.n_threads = 2;
  return quantize_model(o);
}



TEST(HbqQuantize, LogitsStayCloseToF16) {
  TempDir dir;
  const std::string f16 = write_f16_model(dir, 256, 512, "f16.gguf");
  const std::vector<float> ref = logits_of(f16);
  ASSERT_FALSE(ref.empty());
  const char* types[3] = {"MXFP4", "HBQ_A", "HBQ_E"};
  double err[3] = {0, 0, 0};
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
  // A misread layout (codes, multipliers or scale) gives errors near 1; allowed: MXFP4's error.
  EXPECT_LT(err[0], 0.4);
  EXPECT_LT(err[1], err[0]);
  EXPECT_LT(err[2], err[0]);
}

// Each HBQ tensor of the file is the row quantizer's output for the F16 tensor's floats, with
// the strategy asked for (so the option reaches the quantizer), for both formats.
TEST(HbqQuantize, TensorsAreTheRowQuantizersForEachStrategy) {
  TempDir dir;
  const std::string f16 = write_f16_model(dir, 256, 512, "f16.gguf");
  auto in = GgufFile::open(f16);
  ASSERT_TRUE(in.ok());
  for (const char* type : {"HBQ_A", "HBQ_E"}) {
    for (auto st : {quant::HbqScaleStrategy::kSig, quant::HbqScaleStrategy::kPow2, quant::HbqScaleStrategy::kInt}) {
      const std::string out = dir.file(std::string(type) + std::to_string(static_cast<int>(st)) + ".gguf");
      ASSERT_TRUE(quantize_to(f16, out, type, false, st).ok());
      auto q = GgufFile::open(out);
      ASSERT_TRUE(q.ok());
      int n_hbq = 0;
      for (const auto& t : (*q)->tensors()) {
        if (t.type != DType::kHBQ_A && t.type != DType::kHBQ_E) continue;
        ++n_hbq;
        const GgufTensorInfo* src = (*in)->find_tensor(t.name);
        ASSERT_NE(src, nullptr);
        std::vector<float> f(static_cast<size_t>(src->n_elements()));
        const auto* h = reinterpret_cast<const uint16_t*>(src->data);
        for (size_t i = 0; i < f.size(); ++i) f[i] = fp16_to_f32(h[i]);
        const int64_t cols = src->dims[0];
        const int64_t rows = src->n_elements() / cols;
        std::vector<uint8_t> want(static_cast<size_t>(row_bytes(t.type, cols) * rows));
        if (t.type == DType::kHBQ_A) {
          quant::quantize_rows_hbq_a(f.data(), want.data(), rows, cols, nullptr, st);
        } else {
          quant::quantize_rows_hbq_e(f.data(), want.data(), rows, cols, nullptr, st);
        }
        ASSERT_EQ(0, std::memcmp(want.data(), t.data, want.size())) << t.name;
      }
      EXPECT_GT(n_hbq, 10) << type;
    }
  }
}

TEST(HbqQuantize, RowsNotOfWholeBlocksAreRefusedOrFallBack) {
  TempDir dir;
  const std::string f16 = write_f16_model(dir, 96, 160, "odd.gguf");
  for (const char* type : {"HBQ_A", "HBQ_E"}) {
    auto r = quantize_to(f16, dir.file("pure.gguf"), type, true);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    const std::string name = std::string(type) == "HBQ_A" ? "hbq_a" : "hbq_e";
    EXPECT_NE(r.status().message().find("tensor 'output.weight': rows of 96 elements cannot be stored as " + name +
                                        " (blocks of 128)"),
              std::string::npos)
        << r.status().message();

    const std::string mixed = dir.file("mixed.gguf");
    r = quantize_to(f16, mixed, type);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_GT(r->n_fallback, 0);
    auto q = GgufFile::open(mixed);
    ASSERT_TRUE(q.ok());
    EXPECT_EQ((*q)->find_tensor("blk.0.attn_q.weight")->type, DType::kMXFP4);
    EXPECT_EQ((*q)->find_tensor("blk.0.ffn_down.weight")->type, DType::kMXFP4);  // 160 columns
    for (float v : logits_of(mixed)) ASSERT_TRUE(std::isfinite(v));
  }
}

}  // namespace
}  // namespace frugal::quantize
