// Reading the real GGUF files in the shared models folder, and the text dump of one.
#include <gtest/gtest.h>

#include "frugal/format/gguf.h"
#include "frugal/format/gguf_dump.h"

namespace frugal {
namespace {

const std::string kModels = FRUGAL_SHARED_MODELS_DIR;

TEST(GgufModels, Stories260K) {
  auto r = GgufFile::open(kModels + "/stories260K.gguf");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const GgufFile& f = **r;
  EXPECT_EQ(f.file_size(), 1185376u);  // documented in the models README
  EXPECT_EQ(*f.get_string("general.architecture"), "llama");
  EXPECT_EQ(*f.get_int("llama.embedding_length"), 64);
  EXPECT_EQ(*f.get_int("llama.block_count"), 5);
  EXPECT_EQ(*f.get_int("llama.attention.head_count"), 8);
  EXPECT_EQ(*f.get_int("llama.attention.head_count_kv"), 4);
  EXPECT_EQ(*f.get_int("llama.feed_forward_length"), 172);
  EXPECT_EQ(*f.get_string("tokenizer.ggml.model"), "llama");
  auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status().to_string();
  EXPECT_EQ(tokens->size(), 512u);
  EXPECT_EQ(f.get_float_array("tokenizer.ggml.scores")->size(), 512u);

  const GgufTensorInfo* emb = f.find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, DType::kF32);
  EXPECT_EQ(emb->dims, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(emb->nbytes, 64u * 512u * 4u);

  // Every tensor is F32, lies inside the file, and the parameter count matches the README.
  int64_t params = 0;
  for (const GgufTensorInfo& t : f.tensors()) {
    EXPECT_EQ(t.type, DType::kF32) << t.name;
    EXPECT_LE(f.data_offset() + t.offset + t.nbytes, f.file_size()) << t.name;
    params += t.n_elements();
  }
  EXPECT_EQ(params, 292800);
  ASSERT_NE(f.find_tensor("blk.4.ffn_down.weight"), nullptr);
  EXPECT_EQ(f.find_tensor("blk.4.ffn_down.weight")->dims, (std::vector<int64_t>{172, 64}));
}

TEST(GgufModels, VocabQwen2) {
  auto r = GgufFile::open(kModels + "/vocab-qwen2.gguf");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const GgufFile& f = **r;
  EXPECT_EQ(*f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(*f.get_string("tokenizer.ggml.pre"), "qwen2");
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens")->size(), 151936u);
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.merges")->size(), 151387u);
  EXPECT_TRUE(f.has("tokenizer.chat_template"));
  EXPECT_TRUE(f.tensors().empty());
}

TEST(GgufDump, ShowsMetadataAndTensors) {
  auto r = GgufFile::open(kModels + "/stories260K.gguf");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const std::string text = gguf_dump(**r);
  EXPECT_NE(text.find("general.architecture: string = \"llama\""), std::string::npos) << text;
  EXPECT_NE(text.find("llama.block_count: u32 = 5"), std::string::npos) << text;
  // The stored f32 nearest 1e-5 prints at float precision.
  EXPECT_NE(text.find("llama.attention.layer_norm_rms_epsilon: f32 = 1e-05"), std::string::npos) << text;
  EXPECT_NE(text.find("tokenizer.ggml.tokens: array of string = [512 items] \"<unk>\", \"<s>\", \"</s>\""),
            std::string::npos) << text;
  EXPECT_NE(text.find("token_embd.weight"), std::string::npos);
  EXPECT_NE(text.find("[64, 512]"), std::string::npos);

  GgufValue v;
  v.type = GgufType::kArray;
  v.elem_type = GgufType::kI32;
  v.ints = {1, -2, 3, 4};
  GgufDumpOptions opts;
  opts.max_array_items = 2;
  EXPECT_EQ(format_gguf_value(v, opts), "[4 items] 1, -2, ...");
  GgufValue s;
  s.type = GgufType::kString;
  s.s = "a\nb\"c";
  EXPECT_EQ(format_gguf_value(s), "\"a\\nb\\\"c\"");
  GgufValue b;
  b.type = GgufType::kBool;
  b.i = 1;
  EXPECT_EQ(format_gguf_value(b), "true");
}

}  // namespace
}  // namespace frugal
