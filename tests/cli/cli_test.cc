// Bad input through the real `frugal` binary: every case must exit non-zero with exactly one
// line on stderr that names the problem, and must not die of a signal.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/run_frugal.h"
#include "cli/tiny_model.h"
#include "frugal/format/gguf.h"
#include "frugal/synth/random_model.h"

namespace frugal {
namespace {

namespace fs = std::filesystem;

class CliBadInput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tiny_ = new TinyModelDir("frugal_cli_models_", "good.gguf");
    dir_ = &tiny_->dir;
    good_ = &tiny_->model;
  }
  static void TearDownTestSuite() { delete tiny_; }
  // Copies `good` into a new file with `edit` applied to its bytes.
  static std::string variant(const std::string& name, const std::function<void(std::string&)>& edit) {
    std::string bytes = slurp(*good_);
    edit(bytes);
    const std::string p = (*dir_ / name).string();
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  // Rewrites `good` through GgufWriter, dropping tensor `drop` and overriding string keys.
  static std::string rewritten(const std::string& name, const std::string& drop,
                               const std::vector<std::pair<std::string, std::string>>& strings) {
    auto f = GgufFile::open(*good_);
    EXPECT_TRUE(f.ok());
    GgufWriter w;
    for (const auto& [k, v] : (*f)->metadata()) w.set_value(k, v);
    for (const auto& [k, v] : strings) w.set_string(k, v);
    for (const auto& t : (*f)->tensors()) {
      if (t.name == drop) continue;
      EXPECT_TRUE(w.add_tensor(t.name, t.type, t.dims, t.data, t.nbytes).ok());
    }
    const std::string p = (*dir_ / name).string();
    EXPECT_TRUE(w.write(p).ok());
    return p;
  }
  // Writes `bytes` into a new file of the suite's folder (removed with it).
  static std::string write_bytes(const std::string& name, const std::string& bytes) {
    const std::string p = (*dir_ / name).string();
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  static inline TinyModelDir* tiny_ = nullptr;
  static inline fs::path* dir_ = nullptr;
  static inline std::string* good_ = nullptr;
};

// Hand-built GGUF bytes: header with one tensor description and nothing else.
std::string tiny_gguf_with_tensor(uint64_t dim0, uint64_t dim1, uint32_t type, uint64_t offset) {
  std::string b;
  auto u32 = [&](uint32_t v) { b.append(reinterpret_cast<const char*>(&v), 4); };
  auto u64 = [&](uint64_t v) { b.append(reinterpret_cast<const char*>(&v), 8); };
  b += "GGUF";
  u32(3);
  u64(1);  // tensors
  u64(1);  // kv
  const std::string key = "general.architecture", val = "llama";
  u64(key.size());
  b += key;
  u32(8);
  u64(val.size());
  b += val;
  const std::string name = "token_embd.weight";
  u64(name.size());
  b += name;
  u32(2);
  u64(dim0);
  u64(dim1);
  u32(type);
  u64(offset);
  while (b.size() % 32) b.push_back('\0');
  b.append(256, '\x11');
  return b;
}

TEST_F(CliBadInput, GoodModelRuns) {
  auto r = run_frugal("run -m " + *good_ + " -p 'hello' -n 4 --temp 0");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(CliBadInput, MissingFile) { expect_clean_failure(run_frugal("run -m /nonexistent/x.gguf -p hi"), "x.gguf"); }

TEST_F(CliBadInput, TruncatedFile) {
  const std::string p = variant("truncated.gguf", [](std::string& b) { b.resize(b.size() / 2); });
  expect_clean_failure(run_frugal("run -m " + p + " -p hi"), "truncated.gguf");
}

TEST_F(CliBadInput, TruncatedHeader) {
  const std::string p = variant("trunc_header.gguf", [](std::string& b) { b.resize(40); });
  expect_clean_failure(run_frugal("run -m " + p + " -p hi"), "trunc_header.gguf");
}

TEST_F(CliBadInput, WrongMagic) {
  const std::string p = variant("magic.gguf", [](std::string& b) { std::memcpy(b.data(), "GGML", 4); });
  expect_clean_failure(run_frugal("run -m " + p + " -p hi"), "magic");
}

TEST_F(CliBadInput, OffsetPastEnd) {
  const std::string p = write_bytes("frugal_offset.gguf", tiny_gguf_with_tensor(8, 4, 0, 1ull << 40));
  expect_clean_failure(run_frugal("info -m " + p), "token_embd.weight");
}

TEST_F(CliBadInput, AbsurdDimension) {
  const std::string p = write_bytes("frugal_dims.gguf", tiny_gguf_with_tensor(1ull << 50, 1ull << 20, 0, 0));
  expect_clean_failure(run_frugal("info -m " + p), "token_embd.weight");
}

TEST_F(CliBadInput, UnknownType) {
  const std::string p = write_bytes("frugal_type.gguf", tiny_gguf_with_tensor(8, 4, 99, 0));
  expect_clean_failure(run_frugal("info -m " + p), "99");
}

TEST_F(CliBadInput, MissingTensor) {
  const std::string p = rewritten("missing.gguf", "blk.1.ffn_up.weight", {});
  expect_clean_failure(run_frugal("run -m " + p + " -p hi"), "blk.1.ffn_up.weight");
}

TEST_F(CliBadInput, UnsupportedArchitecture) {
  const std::string p = rewritten("arch.gguf", "", {{"general.architecture", "falcon-h9"}});
  expect_clean_failure(run_frugal("run -m " + p + " -p hi"), "falcon-h9");
}

TEST_F(CliBadInput, PromptLongerThanContext) {
  expect_clean_failure(run_frugal("run -m " + *good_ + " -c 8 -p 'one two three four five six seven eight nine ten'"),
                       "context");
}

TEST_F(CliBadInput, InvalidUtf8Prompt) {
  expect_clean_failure(run_frugal("run -m " + *good_ + " -p \"$(printf 'ab\\377\\376cd')\""), "UTF-8");
}

TEST_F(CliBadInput, InvalidSamplingParameter) {
  expect_clean_failure(run_frugal("run -m " + *good_ + " -p hi --top-p 3"), "top_p");
}

// --kl-values writes one KLD per scored position; their mean is the report's mean KLD.
TEST_F(CliBadInput, KlValuesAreThePerPositionKld) {
  const std::string text = (*dir_ / "ppl.txt").string(), base = (*dir_ / "base.kld").string();
  const std::string values = (*dir_ / "kld.txt").string();
  std::ofstream(text) << "the quick brown fox jumps over the lazy dog and the cat sat on the mat while it rained. "
                         "one two three four five six seven eight nine ten eleven twelve thirteen fourteen.";
  ASSERT_EQ(run_frugal("perplexity -m " + *good_ + " -f " + text + " -c 16 --kl-divergence-base " + base).exit_code, 0);
  // Scored: the model in Q4_0, so the divergences are far from zero.
  const std::string q4 = (*dir_ / "klv_q4.gguf").string();
  ASSERT_EQ(run_frugal("quantize " + *good_ + " " + q4 + " Q4_0 --pure").exit_code, 0);
  const CmdResult r = run_frugal("perplexity -m " + q4 + " --kl-divergence-base " + base +
                                 " --kl-divergence --kl-values " + values);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(values);
  double sum = 0;
  int n = 0;
  for (double v; in >> v; ++n) sum += v;
  ASSERT_GT(n, 0);
  const size_t at = r.out.find("Mean    KLD:");
  ASSERT_NE(at, std::string::npos) << r.out;
  const double mean = std::stod(r.out.substr(at + 12));
  EXPECT_GT(mean, 1e-4) << r.out;
  EXPECT_NEAR(sum / n, mean, 1e-6 + 1e-4 * mean) << r.out;
  expect_clean_failure(run_frugal("perplexity -m " + *good_ + " -f " + text + " --kl-values " + values),
                       "--kl-values needs --kl-divergence");
}

// H-Scale's switches only make sense for NVFP4 tensors; no output file is made.
TEST_F(CliBadInput, Nvfp4ScaleWithAnotherType) {
  const std::string out = (*dir_ / "hscale_q4.gguf").string();
  expect_clean_failure(run_frugal("quantize " + *good_ + " " + out + " Q4_0 --nvfp4-scale hscale"),
                       "--nvfp4-scale and --hscale-radius choose NVFP4 block scales, but type Q4_0 has no NVFP4 tensors");
  expect_clean_failure(run_frugal("quantize " + *good_ + " " + out + " NVFP4 --hscale-radius 4"),
                       "--hscale-radius needs --nvfp4-scale hscale");
  EXPECT_FALSE(fs::exists(out));
}

// --hbq-scale only makes sense for HBQ tensors, and takes one of its three multiplier sets; no
// output file is made.
TEST_F(CliBadInput, HbqScaleWithAnotherType) {
  const std::string out = (*dir_ / "hbq_q4.gguf").string();
  expect_clean_failure(run_frugal("quantize " + *good_ + " " + out + " Q4_0 --hbq-scale pow2"),
                       "--hbq-scale chooses HBQ multipliers, but type Q4_0 has no HBQ tensors");
  const CmdResult r = run_frugal("quantize " + *good_ + " " + out + " HBQ_A --hbq-scale half");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--hbq-scale"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
}

// --ocg only makes sense with NVFP4 (or a float type, for the reordering alone) and needs the
// calibration statistics; --act-quant takes a known format. No output file is made.
TEST_F(CliBadInput, OcgNeedsNvfp4AndAnImatrix) {
  const std::string out = (*dir_ / "ocg_q4.gguf").string();
  expect_clean_failure(run_frugal("quantize " + *good_ + " " + out + " Q4_0 --ocg --imatrix x.dat"),
                       "--ocg groups channels for NVFP4's 16-element scales, but type Q4_0 has no NVFP4 tensors");
  expect_clean_failure(run_frugal("quantize " + *good_ + " " + out + " NVFP4 --ocg"),
                       "--ocg needs calibration statistics: pass --imatrix FILE");
  EXPECT_FALSE(fs::exists(out));
  // Refused by the option parser (whose message has a second line pointing to --help).
  const CmdResult r = run_frugal("perplexity -m " + *good_ + " -f " + *good_ + " --act-quant int4");
  EXPECT_FALSE(r.signaled);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--act-quant: int4 not in {none,nvfp4}"), std::string::npos) << r.err;
}

// `run --act-quant nvfp4` generates through the W4A4 emulation, on the CPU backend only.
TEST_F(CliBadInput, RunWithNvfp4Activations) {
  const CmdResult r = run_frugal("run -m " + *good_ + " -p 'hello' -n 4 --temp 0 --act-quant nvfp4");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  expect_clean_failure(run_frugal("run -m " + *good_ + " -p 'hello' -n 4 --act-quant nvfp4 --device cuda"),
                       "--act-quant nvfp4 runs on the CPU backend only (not --device cuda)");
}

// The whole path: imatrix from text, NVFP4 with OCG and H-Scale, scored against the base with and
// without NVFP4 activations (W4A4 must cost more than W4A16 on this model).
TEST_F(CliBadInput, OcgWithHScaleAndW4A4Runs) {
  const std::string text = (*dir_ / "ocg.txt").string(), base = (*dir_ / "ocg_base.kld").string();
  const std::string imat = (*dir_ / "ocg.dat").string(), q = (*dir_ / "ocg_nvfp4.gguf").string();
  {
    std::ofstream t(text);
    for (int i = 0; i < 6; ++i) t << "the quick brown fox jumps over the lazy dog and the cat sat on the mat. ";
  }
  ASSERT_EQ(run_frugal("imatrix -m " + *good_ + " -f " + text + " -c 32 -o " + imat).exit_code, 0);
  const CmdResult qr = run_frugal("quantize " + *good_ + " " + q + " NVFP4 --ocg --nvfp4-scale hscale --imatrix " + imat);
  ASSERT_EQ(qr.exit_code, 0) << qr.err;
  EXPECT_NE(qr.err.find("OCG packed groups: residual stream"), std::string::npos) << qr.err;
  // The same statistics computed in place from the text.
  const CmdResult cr = run_frugal("quantize " + *good_ + " " + (*dir_ / "ocg_cal.gguf").string() +
                                  " NVFP4 --ocg --calibration " + text + " --calibration-ctx 32");
  ASSERT_EQ(cr.exit_code, 0) << cr.err;
  EXPECT_NE(cr.err.find("importance matrix from"), std::string::npos) << cr.err;
  ASSERT_EQ(run_frugal("perplexity -m " + *good_ + " -f " + text + " -c 32 --kl-divergence-base " + base).exit_code, 0);
  auto mean_kld = [&](const std::string& extra) {
    const CmdResult r = run_frugal("perplexity -m " + q + " --kl-divergence-base " + base + " --kl-divergence" + extra);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const size_t at = r.out.find("Mean    KLD:");
    EXPECT_NE(at, std::string::npos) << r.out;
    return at == std::string::npos ? -1.0 : std::stod(r.out.substr(at + 12));
  };
  const double w4a16 = mean_kld("");
  const double w4a4 = mean_kld(" --act-quant nvfp4");
  EXPECT_GT(w4a16, 0.0);
  EXPECT_GT(w4a4, w4a16);
}


// FRUGAL_SIMD names the SIMD target every kernel runs on. An unknown name is refused with the list
// of targets this CPU runs; each listed name then runs, and `bench --json` reports it as the target.
TEST(CliSimdOverride, UnknownTargetIsRefusedAndAListedOneRuns) {
  setenv("FRUGAL_SIMD", "NOT_A_TARGET", 1);
  const CmdResult bad = run_frugal("--version");
  unsetenv("FRUGAL_SIMD");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_FALSE(bad.signaled);
  const std::string marker = "(it runs: ";
  const size_t at = bad.err.find(marker);
  ASSERT_NE(at, std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("FRUGAL_SIMD=NOT_A_TARGET"), std::string::npos) << bad.err;
  const size_t end = bad.err.find(')', at);
  ASSERT_NE(end, std::string::npos);
  const std::string list = bad.err.substr(at + marker.size(), end - at - marker.size());
  // The last one listed is the most portable target (the list is best first).
  const std::string last = list.substr(list.rfind(' ') == std::string::npos ? 0 : list.rfind(' ') + 1);
  ASSERT_FALSE(last.empty());
  TinyModelDir tiny("frugal_cli_simd_");
  setenv("FRUGAL_SIMD", last.c_str(), 1);
  const CmdResult ok = run_frugal("bench -m " + tiny.model + " -p 8 -n 2 -r 1 --json");
  unsetenv("FRUGAL_SIMD");
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("\"simd_target\": \"" + last + "\""), std::string::npos) << ok.out.substr(0, 2000);
}

// `run --kv-quant hbq` on the committed model, against the same run with the F16 cache: it runs,
// reports the format, generates the tokens asked for, and the quantized rows (all but the newest
// 0-31 of each head) take fewer bytes than F16 ones.
TEST(CliKvQuant, RunWithHbqOnTheDefaultModel) {
  const std::string model = std::string(FRUGAL_SOURCE_DIR) + "/models/default.gguf";
  if (!fs::exists(model)) GTEST_SKIP() << "models/default.gguf missing";
  nlohmann::json out[2];
  const char* quants[2] = {"none", "hbq"};
  for (int i = 0; i < 2; ++i) {
    const CmdResult r = run_frugal("run -m " + model +
                                   " -p 'Once upon a time there was a little red fox who' -n 96 --temp 0 --ignore-eos"
                                   " -t 2 --json --kv-quant " + quants[i]);
    ASSERT_EQ(r.exit_code, 0) << quants[i] << ": " << r.err;
    out[i] = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_FALSE(out[i].is_discarded()) << r.out.substr(0, 2000);
  }
  EXPECT_EQ(out[1]["kv"]["quant"], "hbq");
  EXPECT_EQ(out[1]["tokens"].size(), 96u);
  EXPECT_FALSE(out[1]["text"].get<std::string>().empty());
  const auto f16 = out[0]["kv"]["peak_used_bytes"].get<uint64_t>();
  const auto hbq = out[1]["kv"]["peak_used_bytes"].get<uint64_t>();
  EXPECT_GT(hbq, 0u);
  EXPECT_LT(hbq, f16 / 2) << "hbq " << hbq << " vs F16 " << f16;
}

}  // namespace
}  // namespace frugal
