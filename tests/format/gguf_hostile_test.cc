// One hand-built bad file per validation rule of the reader: each must fail with the right code
// and a message that names the file and the key or tensor at fault.
#include <gtest/gtest.h>

#include "format/gguf_test_util.h"
#include "frugal/format/gguf.h"

namespace frugal {
namespace {

using test::Bytes;

constexpr uint32_t kF32 = 0, kQ4_0 = 2;
constexpr uint64_t kHuge = uint64_t{1} << 63;

// Opens `b` as a file and expects failure with `code` and every needle in the message.
void expect_error(const Bytes& b, ErrorCode code, std::initializer_list<std::string_view> needles) {
  const std::string path = test::scratch_path("hostile.gguf");
  test::write_file(path, b.vec());
  auto r = GgufFile::open(path);
  ASSERT_FALSE(r.ok()) << "opened a bad file";
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  const std::string& msg = r.status().message();
  EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << "message must start with the file: " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  for (std::string_view n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
}

// A valid one-tensor file to start from: header, one kv, tensor "w" F32 [8], data.
Bytes good_file(uint64_t n_kv = 1) {
  Bytes b;
  b.header(3, 1, n_kv).kv_str("general.architecture", "llama");
  b.tensor("w", {8}, kF32, 0).pad(32).zeros(32);
  return b;
}

TEST(GgufHostile, TheBaselineIsValid) {
  const std::string path = test::scratch_path("baseline.gguf");
  test::write_file(path, good_file().vec());
  auto r = GgufFile::open(path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
}

TEST(GgufHostile, MissingFileAndDirectoryAndEmptyFile) {
  auto r = GgufFile::open(test::scratch_path("does-not-exist.gguf"));
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(r.status().message().find("does-not-exist.gguf"), std::string::npos);
  EXPECT_EQ(GgufFile::open(test::scratch_dir()).status().code(), ErrorCode::kIo);
  expect_error(Bytes(), ErrorCode::kCorrupt, {"empty"});
}

TEST(GgufHostile, WrongMagic) {
  Bytes b = good_file();
  b.vec()[3] = 'X';
  expect_error(b, ErrorCode::kCorrupt, {"not a GGUF file"});
}

TEST(GgufHostile, UnsupportedVersions) {
  Bytes v1;
  v1.header(1, 0, 0);
  expect_error(v1, ErrorCode::kNotSupported, {"version 1"});
  Bytes v4;
  v4.header(4, 0, 0);
  expect_error(v4, ErrorCode::kNotSupported, {"version 4"});
  Bytes swapped;
  swapped.header(0x03000000, 0, 0);
  expect_error(swapped, ErrorCode::kNotSupported, {"byte order"});
}

TEST(GgufHostile, TruncatedHeader) {
  Bytes b;
  b.header(3, 0, 0);
  b.vec().resize(13);
  expect_error(b, ErrorCode::kCorrupt, {"truncated", "tensor_count"});
}

TEST(GgufHostile, HugeKeyLengthDoesNotAllocate) {
  Bytes b;
  b.header(3, 0, 1).u64(kHuge).zeros(16);
  expect_error(b, ErrorCode::kCorrupt, {"truncated", "key #0"});
}

TEST(GgufHostile, HugeStringValueLength) {
  Bytes b;
  b.header(3, 0, 1).str("general.name").u32(8).u64(kHuge).zeros(16);
  expect_error(b, ErrorCode::kCorrupt, {"truncated", "'general.name'"});
}

TEST(GgufHostile, HugeArrayCount) {
  Bytes b;
  b.header(3, 0, 1).str("tokenizer.ggml.scores").u32(9).u32(6).u64(uint64_t{1} << 62).zeros(16);
  expect_error(b, ErrorCode::kCorrupt, {"'tokenizer.ggml.scores'", "cannot fit"});
}

TEST(GgufHostile, HugeStringInsideArray) {
  Bytes b;
  b.header(3, 0, 1).str("tokenizer.ggml.tokens").u32(9).u32(8).u64(2).str("ok").u64(kHuge);
  expect_error(b, ErrorCode::kCorrupt, {"'tokenizer.ggml.tokens'", "element 1"});
}

TEST(GgufHostile, AbsurdTensorCount) {
  Bytes b;
  b.header(3, uint64_t{1} << 40, 0).zeros(64);
  expect_error(b, ErrorCode::kCorrupt, {"tensor_count"});
}

TEST(GgufHostile, AbsurdKvCount) {
  Bytes b;
  b.header(3, 0, ~uint64_t{0}).zeros(64);
  expect_error(b, ErrorCode::kCorrupt, {"kv_count"});
}

TEST(GgufHostile, DuplicateKey) {
  Bytes b;
  b.header(3, 0, 2).kv_u32("llama.block_count", 5).kv_u32("llama.block_count", 6);
  expect_error(b, ErrorCode::kCorrupt, {"'llama.block_count'", "duplicate"});
}

TEST(GgufHostile, DuplicateTensorName) {
  Bytes b;
  b.header(3, 2, 0).tensor("blk.0.attn_q.weight", {8}, kF32, 0).tensor("blk.0.attn_q.weight", {8}, kF32, 32);
  b.pad(32).zeros(64);
  expect_error(b, ErrorCode::kCorrupt, {"'blk.0.attn_q.weight'", "duplicate"});
}

TEST(GgufHostile, NestedArray) {
  Bytes b;
  b.header(3, 0, 1).str("x.nested").u32(9).u32(9).u64(1).u32(4).u64(1).u32(7);
  expect_error(b, ErrorCode::kCorrupt, {"'x.nested'", "nested"});
}

TEST(GgufHostile, UnknownValueType) {
  Bytes b;
  b.header(3, 0, 1).str("x.weird").u32(13).u32(0);
  expect_error(b, ErrorCode::kCorrupt, {"'x.weird'", "value type 13"});
  Bytes arr;
  arr.header(3, 0, 1).str("x.weird_array").u32(9).u32(99).u64(0);
  expect_error(arr, ErrorCode::kCorrupt, {"'x.weird_array'", "element type 99"});
}

TEST(GgufHostile, BadBoolAndU64) {
  Bytes b;
  b.header(3, 0, 1).str("tokenizer.ggml.add_bos_token").u32(7).u8(2);
  expect_error(b, ErrorCode::kCorrupt, {"'tokenizer.ggml.add_bos_token'", "bool"});
  Bytes u;
  u.header(3, 0, 1).str("x.big").u32(10).u64(kHuge);
  expect_error(u, ErrorCode::kCorrupt, {"'x.big'", "INT64_MAX"});
}

TEST(GgufHostile, BadAlignment) {
  Bytes not_pow2;
  not_pow2.header(3, 0, 1).kv_u32("general.alignment", 48);
  expect_error(not_pow2, ErrorCode::kCorrupt, {"'general.alignment'", "power of two"});
  Bytes zero;
  zero.header(3, 0, 1).kv_u32("general.alignment", 0);
  expect_error(zero, ErrorCode::kCorrupt, {"'general.alignment'", "power of two"});
  Bytes wrong_type;
  wrong_type.header(3, 0, 1).str("general.alignment").u32(10).u64(64);
  expect_error(wrong_type, ErrorCode::kCorrupt, {"'general.alignment'", "u64", "u32"});
}

TEST(GgufHostile, BadDimCount) {
  for (uint32_t n_dims : {0u, 5u}) {
    Bytes b;
    b.header(3, 1, 0).str("output.weight").u32(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) b.u64(1);
    b.u32(kF32).u64(0).pad(32).zeros(32);
    expect_error(b, ErrorCode::kCorrupt, {"'output.weight'", "n_dims"});
  }
}

TEST(GgufHostile, BadDimensions) {
  struct Case { std::vector<uint64_t> dims; const char* needle; };
  const Case cases[] = {
      {{8, 0}, "dimension 1 is 0"},
      {{kHuge}, "dimension 0"},                                  // negative as int64
      {{uint64_t{1} << 32, uint64_t{1} << 32}, "above 2^40"},     // overflows int64 / absurd
      {{uint64_t{1} << 20, uint64_t{1} << 20, 2}, "above 2^40"},
      {{(uint64_t{1} << 40) + 1}, "dimension 0"},
  };
  for (const auto& c : cases) {
    Bytes b;
    b.header(3, 1, 0).tensor("token_embd.weight", c.dims, kF32, 0).pad(32).zeros(32);
    expect_error(b, ErrorCode::kCorrupt, {"'token_embd.weight'", c.needle});
  }
}

TEST(GgufHostile, UnknownGgmlType) {
  for (uint32_t type : {31u, 99u, 0xffffffffu}) {
    Bytes b;
    b.header(3, 1, 0).tensor("blk.1.ffn_up.weight", {32}, type, 0).pad(32).zeros(256);
    expect_error(b, ErrorCode::kCorrupt, {"'blk.1.ffn_up.weight'", "unknown ggml type"});
  }
  Bytes iq;  // a real ggml type frugal has no kernels for
  iq.header(3, 1, 0).tensor("blk.1.ffn_up.weight", {256}, 16, 0).pad(32).zeros(256);
  expect_error(iq, ErrorCode::kNotSupported, {"'blk.1.ffn_up.weight'", "iq2_xxs"});
}

TEST(GgufHostile, DimNotAMultipleOfTheBlockSize) {
  Bytes b;
  b.header(3, 1, 0).tensor("blk.0.attn_k.weight", {48, 2}, kQ4_0, 0).pad(32).zeros(128);
  expect_error(b, ErrorCode::kCorrupt, {"'blk.0.attn_k.weight'", "48", "block size 32"});
}

// The FP4 types: NVFP4 blocks hold 64 elements in 36 bytes, MXFP4 blocks 32 in 17.
TEST(GgufHostile, Fp4BlockSizesAndLengths) {
  constexpr uint32_t kMXFP4 = 39, kNVFP4 = 40;
  Bytes b;
  b.header(3, 1, 0).tensor("blk.0.ffn_up.weight", {32, 2}, kNVFP4, 0).pad(32).zeros(128);
  expect_error(b, ErrorCode::kCorrupt, {"'blk.0.ffn_up.weight'", "32", "block size 64"});
  Bytes short_data;  // 2 rows of 64 NVFP4 elements need 72 bytes
  short_data.header(3, 1, 0).tensor("blk.0.ffn_up.weight", {64, 2}, kNVFP4, 0).pad(32).zeros(71);
  expect_error(short_data, ErrorCode::kCorrupt, {"'blk.0.ffn_up.weight'", "past the end"});
  Bytes mx;  // 3 rows of 32 MXFP4 elements: 51 bytes, one short
  mx.header(3, 1, 0).tensor("blk.0.ffn_up.weight", {32, 3}, kMXFP4, 0).pad(32).zeros(50);
  expect_error(mx, ErrorCode::kCorrupt, {"'blk.0.ffn_up.weight'", "past the end"});
  Bytes ok;
  ok.header(3, 2, 0).tensor("a.weight", {64, 2}, kNVFP4, 0).tensor("b.weight", {32, 3}, kMXFP4, 96);
  ok.pad(32).zeros(96 + 51);
  const std::string path = test::scratch_path("fp4.gguf");
  test::write_file(path, ok.vec());
  auto r = GgufFile::open(path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->find_tensor("a.weight")->nbytes, 72u);
  EXPECT_EQ((*r)->find_tensor("b.weight")->nbytes, 51u);
}

// frugal's own HBQ types (ids 1024 and 1025): blocks of 128 elements in 70 (HBQ-A) or 67 (HBQ-E)
// bytes; rows of another length and short data are refused by name.
TEST(GgufHostile, HbqBlockSizesAndLengths) {
  constexpr uint32_t kHBQ_A = 1024, kHBQ_E = 1025;
  Bytes b;
  b.header(3, 1, 0).tensor("blk.0.ffn_up.weight", {64, 2}, kHBQ_A, 0).pad(32).zeros(140);
  expect_error(b, ErrorCode::kCorrupt, {"'blk.0.ffn_up.weight'", "64", "block size 128"});
  Bytes short_data;  // 2 rows of 128 HBQ-E elements need 134 bytes
  short_data.header(3, 1, 0).tensor("blk.0.ffn_up.weight", {128, 2}, kHBQ_E, 0).pad(32).zeros(133);
  expect_error(short_data, ErrorCode::kCorrupt, {"'blk.0.ffn_up.weight'", "past the end"});
  Bytes ok;
  ok.header(3, 2, 0).tensor("a.weight", {128, 2}, kHBQ_A, 0).tensor("b.weight", {256, 1}, kHBQ_E, 160);
  ok.pad(32).zeros(160 + 134);
  const std::string path = test::scratch_path("hbq.gguf");
  test::write_file(path, ok.vec());
  auto r = GgufFile::open(path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->find_tensor("a.weight")->nbytes, 140u);
  EXPECT_EQ((*r)->find_tensor("b.weight")->nbytes, 134u);
  EXPECT_EQ((*r)->find_tensor("a.weight")->type, DType::kHBQ_A);
  EXPECT_EQ((*r)->find_tensor("b.weight")->type, DType::kHBQ_E);
}

TEST(GgufHostile, UnalignedOffset) {
  Bytes b;
  b.header(3, 1, 0).tensor("w", {8}, kF32, 4).pad(32).zeros(64);
  expect_error(b, ErrorCode::kCorrupt, {"'w'", "not a multiple of the alignment 32"});
}

TEST(GgufHostile, TensorDataPastTheEnd) {
  Bytes b;
  b.header(3, 1, 0).tensor("output.weight", {8}, kF32, 0).pad(32).zeros(31);
  expect_error(b, ErrorCode::kCorrupt, {"'output.weight'", "past the end"});
  Bytes far;
  far.header(3, 1, 0).tensor("output.weight", {8}, kF32, ~uint64_t{31}).pad(32).zeros(32);
  expect_error(far, ErrorCode::kCorrupt, {"'output.weight'", "past the end"});
  Bytes no_data;  // the data section itself starts past the end
  no_data.header(3, 1, 0).tensor("output.weight", {8}, kF32, 0);
  expect_error(no_data, ErrorCode::kCorrupt, {"'output.weight'", "past the end"});
}

TEST(GgufHostile, OverlappingTensors) {
  Bytes b;
  b.header(3, 2, 0).tensor("a.weight", {16}, kF32, 0).tensor("b.weight", {8}, kF32, 32);
  b.pad(32).zeros(96);
  expect_error(b, ErrorCode::kCorrupt, {"'b.weight'", "overlaps", "'a.weight'"});
  Bytes same;
  same.header(3, 2, 0).tensor("a.weight", {8}, kF32, 0).tensor("b.weight", {8}, kF32, 0).pad(32).zeros(32);
  expect_error(same, ErrorCode::kCorrupt, {"overlaps"});
}

TEST(GgufHostile, TruncatedTensorInfo) {
  Bytes b;
  b.header(3, 1, 0).str("blk.2.attn_v.weight").u32(2).u64(8);
  b.zeros(7);  // the second dimension is cut short; pad so the counts check passes
  expect_error(b, ErrorCode::kCorrupt, {"truncated", "'blk.2.attn_v.weight'"});
}

TEST(GgufHostile, TruncatedValueNamesTheKey) {
  Bytes b;
  b.header(3, 0, 2).kv_u32("a.first", 1).str("llama.context_length").u32(4).u8(0).u8(0);
  expect_error(b, ErrorCode::kCorrupt, {"truncated", "'llama.context_length'"});
}

}  // namespace
}  // namespace frugal
