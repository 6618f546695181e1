// frugal quantize against llama-quantize (build 4748) on real weights: models/text.gguf at
// Q3_K_S with an importance matrix (tests/data/text_imatrix.dat, written by llama-imatrix on text
// from the training side of the model's corpus, -c 512). The FNV-1a 64 hash of every tensor's
// bytes, in file order, of `llama-quantize --imatrix text_imatrix.dat text.gguf OUT Q3_K_S`.
// Q3_K's importance-weighted search is the rule that differed once in about 500 super-blocks
// (the sub-scale fit's weights were summed in two passes instead of one); its 43 Q3_K tensors,
// 87 040 super-blocks, make such a difference all but certain to show.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "frugal/format/gguf.h"
#include "frugal/quantize/imatrix_file.h"
#include "frugal/quantize/model_quantizer.h"

namespace frugal::quantize {
namespace {

const std::string kTextModel = std::string(FRUGAL_SOURCE_DIR) + "/models/text.gguf";
constexpr const char* kLlamaQuantizeTensorHash = "5238df172a7ca35a";

TEST(TextModelIdentity, Q3KSWithImatrixEqualsLlamaQuantize) {
  if (!std::ifstream(kTextModel).good()) GTEST_SKIP() << "missing " << kTextModel;
  auto im = read_imatrix(std::string(FRUGAL_SOURCE_DIR) + "/tests/data/text_imatrix.dat");
  ASSERT_TRUE(im.ok()) << im.status().to_string();
  const auto out = (std::filesystem::temp_directory_path() /
                          ("frugal_text_q3ks_" + std::to_string(::getpid()) + ".gguf")).string();
  QuantizeOptions o;
  o.input = kTextModel;
  o.output = out;
  o.target = *find_target("Q3_K_S");
  o.imatrix = &*im;
  o.imatrix_path = "text_imatrix.dat";
  o.n_threads = 2;
  auto r = quantize_model(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->n_imatrix_missing, 2);  // token_embd and output: llama-imatrix records block matrices only
  auto file = GgufFile::open(out);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  uint64_t h = 1469598103934665603ull;
  int q3k = 0;
  for (const auto& t : (*file)->tensors()) {
    for (uint64_t i = 0; i < t.nbytes; ++i) {
      h ^= t.data[i];
      h *= 1099511628211ull;
    }
    q3k += t.type == DType::kQ3_K;
  }
  EXPECT_EQ(q3k, 43);  // the 42 block matrices and the token embedding
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  EXPECT_EQ(std::string(hex), kLlamaQuantizeTensorHash);
  file->reset();
  std::filesystem::remove(out);
}

}  // namespace
}  // namespace frugal::quantize
