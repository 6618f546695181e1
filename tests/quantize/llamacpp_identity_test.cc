// The bytes frugal writes for a model file equal llama-quantize's: hashes of ggml_quantize_chunk's
// output recorded with llama.cpp build 4748 (tests/data/llamacpp_quant_hashes.json, written outside
// the repository) against frugal's quantize_rows on the same generated inputs, with and without
// an importance matrix.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "frugal/core/dtype.h"
#include "frugal/quant/type_traits.h"

namespace frugal {
namespace {

struct Gen {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }
};

// Must stay the generator the hashes were recorded with.
void inputs(uint64_t seed, std::vector<float>& x, std::vector<float>& w) {
  Gen g{seed};
  for (size_t i = 0; i < x.size(); ++i) {
    float v = g.uniform() + g.uniform() + g.uniform() + g.uniform() - 2.0f;
    if (i % 97 == 0) v *= 8.0f;
    if (i >= 256 && i < 272) v = 0.0f;
    x[i] = v * (1.0f + static_cast<float>(seed % 3));
  }
  for (auto& v : w) {
    const float u = g.uniform();
    v = 0.05f + 4.0f * u * u;
  }
}

uint64_t fnv1a(const std::vector<uint8_t>& b) {
  uint64_t h = 1469598103934665603ull;
  for (uint8_t c : b) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

TEST(LlamaCppIdentity, QuantizedBytesMatchRecordedHashes) {
  std::ifstream f(std::string(FRUGAL_SOURCE_DIR) + "/tests/data/llamacpp_quant_hashes.json");
  ASSERT_TRUE(f.good());
  const auto j = nlohmann::json::parse(f);
  const int64_t n = 512;
  const int64_t rows = 4;
  int checked = 0;
  for (const auto& c : j["cases"]) {
    const auto type = dtype_from_name(c["type"].get<std::string>());
    ASSERT_TRUE(type.has_value());
    std::vector<float> x(static_cast<size_t>(n * rows));
    std::vector<float> w(static_cast<size_t>(n));
    inputs(c["seed"].get<uint64_t>(), x, w);
    const TypeTraits* t = type_traits(*type);
    ASSERT_NE(t, nullptr);
    ASSERT_NE(t->quantize_rows, nullptr);
    std::vector<uint8_t> out(static_cast<size_t>(row_bytes(*type, n) * rows), 0xA5);
    t->quantize_rows(x.data(), out.data(), rows, n, c["imatrix"].get<bool>() ? w.data() : nullptr);
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(fnv1a(out)));
    EXPECT_EQ(std::string(hex), c["fnv1a"].get<std::string>())
        << c["type"] << " seed " << c["seed"] << " imatrix " << c["imatrix"];
    ++checked;
  }
  EXPECT_EQ(checked, 78);
}

}  // namespace
}  // namespace frugal
