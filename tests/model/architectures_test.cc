// Every supported architecture, on tiny random-weight models written by the project's own GGUF
// writer, against the independent float64 reference forward (tests/reference). The engine runs
// two interleaved sequences in one ragged batch, in chunks, so batching and positions are
// exercised too.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "frugal/model/model.h"
#include "frugal/quant/simd_kernels.h"
#include "frugal/synth/random_model.h"
#include "frugal/tokenize/tokenizer.h"
#include "reference/reference_forward.h"

namespace frugal {
namespace {

namespace fs = std::filesystem;

struct ArchCase {
  std::string preset;
  std::string weight_type;
  double max_rel_err;  // ||engine - reference|| / ||reference|| over all logits
  bool cpu_layouts = false;  // load with weights repacked for the CPU kernels where they win
  bool tied = false;         // the LM head reuses token_embd.weight (repacked once, read by both)
  bool mha = false;          // n_head_kv = n_head (the energy study's MHA shape)
  int window = 0;            // a sliding window on the llama architecture (its GQA+SWA shape)
};

std::string case_name(const ::testing::TestParamInfo<ArchCase>& info) {
  std::string s = info.param.preset + "_" + info.param.weight_type + (info.param.cpu_layouts ? "_repacked" : "") +
                  (info.param.tied ? "_tied" : "") + (info.param.mha ? "_mha" : "") +
                  (info.param.window > 0 ? "_swa" + std::to_string(info.param.window) : "");
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return s;
}

class ArchitectureVsReference : public ::testing::TestWithParam<ArchCase> {};

TEST_P(ArchitectureVsReference, LogitsMatchFloat64Reference) {
  const ArchCase& ac = GetParam();
  auto opts = synth::random_model_preset(ac.preset, FRUGAL_SHARED_MODELS_DIR);
  ASSERT_TRUE(opts.ok()) << opts.status().to_string();
  opts->weight_type = ac.weight_type;
  opts->n_layer = 2;
  opts->weight_std = 0.05;  // large enough that attention is far from uniform
  opts->tied_embeddings = opts->tied_embeddings || ac.tied;
  if (ac.mha) opts->n_head_kv = opts->n_head;
  if (ac.window > 0) opts->sliding_window = ac.window;
  const fs::path path = fs::temp_directory_path() / ("frugal_arch_" + case_name({ac, 0}) + ".gguf");
  ASSERT_TRUE(synth::write_random_model(*opts, path.string()).ok());

  ModelLoadOptions mo;
  mo.cpu_layouts = ac.cpu_layouts;
  auto model = Model::load(path.string(), mo);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  if (ac.cpu_layouts && quant::fast::q4_0x8_repack_wins()) {
    // Every Q4_0 matrix (all of them here, embeddings and LM head included) is repacked once.
    EXPECT_GT((*model)->weights().repacked_bytes, 0u);
    EXPECT_EQ((*model)->weights().output.layout, WeightLayout::kQ4_0x8);
    EXPECT_EQ((*model)->weights().layers[0].wq.layout, WeightLayout::kQ4_0x8);
  }
  auto ref = reference::ReferenceModel::load(path.string());
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  auto tok = Tokenizer::from_gguf((*model)->gguf());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();

  // Sequence 0 comes from the model's own tokenizer (SPM or BPE); sequence 1 is random ids.
  auto text_ids = (*tok)->encode("The quick brown fox jumps over the lazy dog, again and again: 12345!");
  ASSERT_TRUE(text_ids.ok()) << text_ids.status().to_string();
  std::vector<TokenId> seq0 = *text_ids;
  seq0.resize(std::min<size_t>(seq0.size(), 40));
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> pick(0, static_cast<int>((*model)->config().n_vocab) - 1);
  std::vector<TokenId> seq1(33);
  for (auto& t : seq1) t = pick(rng);
  if (opts->sliding_window > 0) {
    ASSERT_GT(static_cast<int64_t>(seq1.size()), opts->sliding_window) << "the window must matter";
  }

  auto be = make_cpu_backend({});
  auto kv = KvCache::create((*model)->kv_options(2, 64, DType::kF32));
  ASSERT_TRUE(kv.ok());
  const size_t nv = static_cast<size_t>((*model)->config().n_vocab);
  std::vector<std::vector<float>> got0, got1;
  // Chunks of up to 7 tokens per sequence per step, interleaved.
  size_t i0 = 0, i1 = 0;
  while (i0 < seq0.size() || i1 < seq1.size()) {
    Batch b;
    std::vector<int> owner;
    for (int k = 0; k < 7; ++k) {
      if (i1 < seq1.size()) { b.add(seq1[i1], static_cast<int32_t>(i1), 1, true); owner.push_back(1); ++i1; }
      if (k < 5 && i0 < seq0.size()) { b.add(seq0[i0], static_cast<int32_t>(i0), 0, true); owner.push_back(0); ++i0; }
    }
    std::vector<float> lg(b.size() * nv);
    ASSERT_TRUE((*model)->forward(b, *kv, *be, lg.data()).ok());
    for (size_t r = 0; r < owner.size(); ++r) {
      std::vector<float> row(lg.begin() + static_cast<long>(r * nv), lg.begin() + static_cast<long>((r + 1) * nv));
      (owner[r] == 0 ? got0 : got1).push_back(std::move(row));
    }
  }
  for (int s = 0; s < 2; ++s) {
    const auto& ids = s == 0 ? seq0 : seq1;
    const auto& got = s == 0 ? got0 : got1;
    auto want = (*ref)->forward(ids);
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    double num = 0, den = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
      for (size_t v = 0; v < nv; ++v) {
        const double d = got[t][v] - (*want)[t][v];
        num += d * d;
        den += (*want)[t][v] * (*want)[t][v];
      }
    }
    const double rel = std::sqrt(num / den);
    EXPECT_LT(rel, ac.max_rel_err) << ac.preset << " " << ac.weight_type << " sequence " << s;
  }
  fs::remove(path);
}

// F32 weights: the engine differs from float64 only by float rounding. Quantized weights: the
// reference uses the same dequantized weights, so the difference is the engine's 8-bit
// activation quantization (Q8_0 / Q8_K), ~1% of the logit norm.
INSTANTIATE_TEST_SUITE_P(
    Tiny, ArchitectureVsReference,
    ::testing::Values(ArchCase{"tiny-llama", "F32", 1e-4}, ArchCase{"tiny-mistral", "F32", 1e-4},
                      ArchCase{"tiny-qwen2", "F32", 1e-4}, ArchCase{"tiny-qwen3", "F32", 1e-4},
                      ArchCase{"tiny-llama", "F16", 5e-3}, ArchCase{"tiny-qwen2", "Q8_0", 3e-2},
                      ArchCase{"tiny-llama", "Q4_K_M", 3e-2}, ArchCase{"tiny-qwen3", "Q4_0", 3e-2},
                      ArchCase{"tiny-mistral", "Q6_K", 3e-2}, ArchCase{"tiny-llama", "BF16", 5e-3},
                      ArchCase{"tiny-llama", "Q4_0", 3e-2, true, false}, ArchCase{"tiny-qwen2", "Q4_0", 3e-2, true, true},
                      ArchCase{"tiny-llama", "F32", 1e-4, false, false, true},
                      ArchCase{"tiny-llama", "F32", 1e-4, false, false, false, 16}),
    case_name);

// The sliding window really changes the output of the mistral model once the sequence is longer
// than the window, so the engine-vs-reference comparison above really tests the window.
TEST(SlidingWindow, WindowChangesTheReferenceOutput) {
  auto opts = synth::random_model_preset("tiny-mistral", FRUGAL_SHARED_MODELS_DIR);
  ASSERT_TRUE(opts.ok());
  opts->n_layer = 1;
  opts->weight_std = 0.05;
  const fs::path path = fs::temp_directory_path() / "frugal_swa.gguf";
  ASSERT_TRUE(synth::write_random_model(*opts, path.string()).ok());
  auto ref = reference::ReferenceModel::load(path.string());
  ASSERT_TRUE(ref.ok());
  std::vector<int32_t> ids(40);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(3 + (i * 37) % 400);
  reference::RefForwardOptions no_window;
  no_window.sliding_window = 0;
  auto with = (*ref)->forward(ids);
  auto without = (*ref)->forward(ids, no_window);
  ASSERT_TRUE(with.ok() && without.ok());
  double diff = 0;
  for (size_t v = 0; v < (*with)[39].size(); ++v) diff = std::max(diff, std::fabs((*with)[39][v] - (*without)[39][v]));
  EXPECT_GT(diff, 1e-3);
  fs::remove(path);
}

}  // namespace
}  // namespace frugal
