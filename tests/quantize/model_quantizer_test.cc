// frugal quantize on whole models: per-tensor types equal llama-quantize's on a Llama-shaped
// synthetic model (tests/data/llamacpp_mix_types.json), failures leave no file behind, and the
// output loads and runs.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "frugal/format/gguf.h"
#include "frugal/model/model.h"
#include "frugal/quantize/model_quantizer.h"
#include "frugal/synth/random_model.h"

namespace frugal::quantize {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("frugal_quantize_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  // Everything in the folder, so a test sees stray temporary files.
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  fs::path path_;
};

// The model the recorded types were taken from: `frugal synth --preset tiny-llama --type F16
// --layers 16 --embd 256 --heads 8 --kv-heads 2 --ffn 512 --vocab 512 --seed 7`.
std::string write_mix_model(const TempDir& dir) {
  auto o = synth::random_model_preset("tiny-llama", FRUGAL_SHARED_MODELS_DIR);
  EXPECT_TRUE(o.ok());
  o->weight_type = "F16";
  o->n_layer = 16;
  o->n_embd = 256;
  o->n_head = 8;
  o->n_head_kv = 2;
  o->n_ff = 512;
  o->n_vocab = 512;
  o->seed = 7;
  const std::string path = dir.file("mix.gguf");
  EXPECT_TRUE(synth::write_random_model(*o, path).ok());
  return path;
}

TEST(ModelQuantizer, MixTypesEqualLlamaQuantizes) {
  TempDir dir;
  const std::string in = write_mix_model(dir);
  std::ifstream f(std::string(FRUGAL_SOURCE_DIR) + "/tests/data/llamacpp_mix_types.json");
  ASSERT_TRUE(f.good());
  const auto j = nlohmann::json::parse(f);
  int mixes = 0;
  for (const auto& [name, types] : j["types"].items()) {
    auto target = find_target(name);
    ASSERT_TRUE(target.has_value()) << name;
    QuantizeOptions o;
    o.input = in;
    o.output = dir.file(name + ".gguf");
    o.target = *target;
    o.n_threads = 2;
    auto r = quantize_model(o);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().to_string();
    auto out = GgufFile::open(o.output);
    ASSERT_TRUE(out.ok());
    int compared = 0;
    for (const auto& [tensor, type] : types.items()) {
      const GgufTensorInfo* t = (*out)->find_tensor(tensor);
      ASSERT_NE(t, nullptr) << tensor;
      EXPECT_EQ(std::string(dtype_name(t->type)), type.get<std::string>()) << name << " " << tensor;
      ++compared;
    }
    EXPECT_EQ(compared, 115);
    EXPECT_EQ((*out)->get_int("general.file_type").value(), static_cast<int64_t>(target->file_type));
    ++mixes;
  }
  EXPECT_EQ(mixes, 11);
}

TEST(ModelQuantizer, OutputLoadsAndRuns) {
  TempDir dir;
  const std::string in = write_mix_model(dir);
  QuantizeOptions o;
  o.input = in;
  o.output = dir.file("q4km.gguf");
  o.target = *find_target("Q4_K_M");
  auto r = quantize_model(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->output_file_bytes, fs::file_size(o.output));
  auto m = Model::load(o.output);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto be = make_cpu_backend({});
  auto kv = KvCache::create((*m)->kv_options(1, 8));
  ASSERT_TRUE(kv.ok());
  Batch b;
  for (int i = 0; i < 4; ++i) b.add(1 + i, i, 0, i == 3);
  std::vector<float> logits(static_cast<size_t>((*m)->config().n_vocab));
  ASSERT_TRUE((*m)->forward(b, *kv, *be, logits.data()).ok());
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

TEST(ModelQuantizer, RequantizingIsRefusedAndLeavesNoFile) {
  TempDir dir;
  const std::string in = write_mix_model(dir);
  QuantizeOptions o;
  o.input = in;
  o.output = dir.file("q4.gguf");
  o.target = *find_target("Q4_0");
  ASSERT_TRUE(quantize_model(o).ok());
  QuantizeOptions again = o;
  again.input = o.output;
  again.output = dir.file("requant.gguf");
  again.target = *find_target("Q8_0");
  auto r = quantize_model(again);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--allow-requantize"), std::string::npos) << r.status().message();
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"mix.gguf", "q4.gguf"}));
  again.allow_requantize = true;
  EXPECT_TRUE(quantize_model(again).ok());
}

TEST(ModelQuantizer, CancelledRunLeavesNoFile) {
  TempDir dir;
  const std::string in = write_mix_model(dir);
  std::atomic<bool> cancel{false};
  QuantizeOptions o;
  o.input = in;
  o.output = dir.file("q.gguf");
  o.target = *find_target("Q4_K_M");
  o.cancel = &cancel;
  int seen = 0;
  // Interrupted after some tensors were already written to the temporary file.
  o.on_tensor = [&](const TensorProgress&) {
    if (++seen == 20) cancel = true;
  };
  auto r = quantize_model(o);
  ASSERT_FALSE(r.ok());
  EXPECT_GE(seen, 20);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"mix.gguf"});
}

TEST(ModelQuantizer, BadInputsAreNamedAndLeaveNoFile) {
  TempDir dir;
  const std::string in = write_mix_model(dir);
  QuantizeOptions o;
  o.input = in;
  o.output = dir.file("q.gguf");
  o.target = *find_target("Q2_K_S");
  auto r = quantize_model(o);  // Q2_K_S without an importance matrix
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("importance matrix"), std::string::npos);
  o.target = *find_target("Q4_0");
  o.tensor_types = {{"attn_v[", DType::kQ8_0}};
  r = quantize_model(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("regular expression"), std::string::npos);
  Imatrix m;
  m.entries["blk.0.attn_q.weight"].ncall = 1;
  m.entries["blk.0.attn_q.weight"].values.assign(100, 1.f);  // 256 columns
  o.tensor_types.clear();
  o.imatrix = &m;
  r = quantize_model(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("blk.0.attn_q.weight"), std::string::npos);
  o.imatrix = nullptr;
  o.output = dir.file("missing/q.gguf");  // a folder that does not exist
  EXPECT_FALSE(quantize_model(o).ok());
  EXPECT_FALSE(find_target("Q4_K_X").has_value());
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"mix.gguf"});
}

TEST(ModelQuantizer, TensorTypeRulesAndPure) {
  TempDir dir;
  const std::string in = write_mix_model(dir);
  QuantizeOptions o;
  o.input = in;
  o.output = dir.file("q.gguf");
  o.target = *find_target("Q4_K_M");
  o.mix.pure = true;
  o.tensor_types = {{"blk\\.3\\.ffn_(up|gate)", DType::kQ8_0}};
  ASSERT_TRUE(quantize_model(o).ok());
  auto out = GgufFile::open(o.output);
  ASSERT_TRUE(out.ok());
  for (const auto& t : (*out)->tensors()) {
    if (t.dims.size() < 2) continue;
    const bool rule = t.name == "blk.3.ffn_up.weight" || t.name == "blk.3.ffn_gate.weight";
    EXPECT_EQ(t.type, rule ? DType::kQ8_0 : DType::kQ4_K) << t.name;  // --pure: no mix, output too
  }
}

}  // namespace
}  // namespace frugal::quantize
