// Seeded random truncations and corruptions of a small valid file: the reader must never crash
// or read outside the file, and must either succeed or fail with a clean one-line message.
#include <cstdio>
#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "format/gguf_test_util.h"
#include "frugal/format/gguf.h"

namespace frugal {
namespace {

std::vector<uint8_t> small_valid_file() {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 2);
  w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_bool("tokenizer.ggml.add_bos_token", true);
  w.set_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a", "b"});
  w.set_f32_array("tokenizer.ggml.scores", {0, 0, 0, -1.5f, -2.5f});
  w.set_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 1, 1});
  std::mt19937 rng(7);
  std::vector<uint8_t> data(4 * 16);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  EXPECT_TRUE(w.add_tensor("token_embd.weight", DType::kF32, {4, 4}, data.data(), 64).ok());
  EXPECT_TRUE(w.add_tensor("q.weight", DType::kQ8_0, {32}, data.data(), 34).ok());
  EXPECT_TRUE(w.add_tensor("n.weight", DType::kF16, {4}, data.data(), 8).ok());
  const std::string path = test::scratch_path("fuzz_base.gguf");
  EXPECT_TRUE(w.write(path).ok());
  return test::read_file(path);
}

// Overwrites 8 bytes with values that tend to reach edge cases: lengths, counts, dims, offsets.
uint64_t interesting_u64(std::mt19937_64& rng) {
  static const uint64_t kValues[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 13, 31, 32, 33, 64, 255, 256,
                                     0xffffffffull, 0x100000000ull, uint64_t{1} << 40,
                                     uint64_t{1} << 62, uint64_t{1} << 63, ~uint64_t{0}, ~uint64_t{0} - 7};
  return kValues[rng() % std::size(kValues)];
}

TEST(GgufFuzz, RandomTruncationsAndCorruptionsFailCleanly) {
  const std::vector<uint8_t> base = small_valid_file();
  ASSERT_GT(base.size(), 200u);
  const std::string path = test::scratch_path("fuzz.gguf");
  std::mt19937_64 rng(20240607);
  int opened = 0, failed = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<uint8_t> bytes = base;
    const int kind = static_cast<int>(rng() % 4);
    if (kind == 0) {
      bytes.resize(rng() % bytes.size());
    } else if (kind == 1) {
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < flips; ++k) bytes[rng() % bytes.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    } else if (kind == 2) {
      // Most structure lives in the header; aim there.
      const size_t at = rng() % (base.size() - 8);
      const uint64_t v = interesting_u64(rng);
      std::memcpy(bytes.data() + at, &v, 8);
    } else {
      bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
      bytes.resize(bytes.size() - rng() % 40);
    }
    test::write_file(path, bytes);
    auto r = GgufFile::open(path);
    if (r.ok()) {
      ++opened;
      // Touch every byte the reader claims belongs to a tensor (ASan/SEGV would catch strays).
      uint64_t sum = 0;
      for (const GgufTensorInfo& t : (*r)->tensors()) {
        ASSERT_LE((*r)->data_offset() + t.offset + t.nbytes, bytes.size());
        for (uint64_t k = 0; k < t.nbytes; ++k) sum += t.data[k];
      }
      (void)sum;
      for (const auto& [key, v] : (*r)->metadata()) ASSERT_FALSE(key.empty());
    } else {
      ++failed;
      const Status& st = r.status();
      ASSERT_TRUE(st.code() == ErrorCode::kCorrupt || st.code() == ErrorCode::kNotSupported)
          << "iteration " << iter << ": " << st.to_string();
      ASSERT_EQ(st.message().rfind(path + ": ", 0), 0u) << st.message();
      ASSERT_EQ(st.message().find('\n'), std::string::npos) << st.message();
    }
  }
  std::printf("opened %d, rejected %d of 2000 mutated files\n", opened, failed);
  // Both outcomes must actually occur, or the mutations are not exercising the reader.
  EXPECT_GT(opened, 20);
  EXPECT_GT(failed, 500);
}

// from_memory (what the fuzz target drives) must judge every file exactly as open() does: the
// same verdict, the same message (with the name in place of the path), the same tensor table.
TEST(GgufFuzz, FromMemoryAgreesWithOpen) {
  const std::vector<uint8_t> base = small_valid_file();
  const std::string path = test::scratch_path("from_memory.gguf");
  std::mt19937_64 rng(99);
  int opened = 0, failed = 0;
  for (int iter = 0; iter < 300; ++iter) {
    std::vector<uint8_t> bytes = base;
    if (iter > 0) {
      if (rng() % 2) bytes.resize(1 + rng() % (bytes.size() - 1));
      const int flips = static_cast<int>(rng() % 3);
      for (int k = 0; k < flips; ++k) bytes[rng() % bytes.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    }
    test::write_file(path, bytes);
    auto a = GgufFile::open(path);
    // An exact-size heap copy: a read past its end is an ASan error in the sanitizer run.
    std::vector<uint8_t> copy(bytes);
    auto b = GgufFile::from_memory(copy.data(), copy.size(), path);
    ASSERT_EQ(a.ok(), b.ok()) << "iteration " << iter << ": " << (a.ok() ? b : a).status().to_string();
    if (!a.ok()) {
      ++failed;
      EXPECT_EQ(a.status().code(), b.status().code());
      EXPECT_EQ(a.status().message(), b.status().message());
      continue;
    }
    ++opened;
    ASSERT_EQ((*a)->metadata().size(), (*b)->metadata().size());
    ASSERT_EQ((*a)->tensors().size(), (*b)->tensors().size());
    EXPECT_EQ((*a)->data_offset(), (*b)->data_offset());
    for (size_t i = 0; i < (*a)->tensors().size(); ++i) {
      const GgufTensorInfo& ta = (*a)->tensors()[i];
      const GgufTensorInfo& tb = (*b)->tensors()[i];
      EXPECT_EQ(ta.name, tb.name);
      EXPECT_EQ(ta.offset, tb.offset);
      ASSERT_EQ(ta.nbytes, tb.nbytes);
      EXPECT_EQ(tb.data, copy.data() + (*b)->data_offset() + tb.offset);  // into the caller's bytes
      EXPECT_EQ(std::memcmp(ta.data, tb.data, ta.nbytes), 0);
    }
  }
  EXPECT_GT(opened, 10);
  EXPECT_GT(failed, 50);
  auto empty = GgufFile::from_memory(base.data(), 0, "empty.gguf");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().message(), "empty.gguf: file is empty");
}

}  // namespace
}  // namespace frugal
