// Writer -> reader round trips, the writer's bytes against a hand-built file, and the getters.
#include <cmath>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "format/gguf_test_util.h"
#include "frugal/format/gguf.h"

namespace frugal {
namespace {

using test::Bytes;
using test::scratch_path;

std::unique_ptr<GgufFile> open_ok(const std::string& path) {
  auto r = GgufFile::open(path);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return nullptr;
  return std::move(r).value();
}

GgufValue make_int_array(GgufType elem, std::vector<int64_t> v) {
  GgufValue out;
  out.type = GgufType::kArray;
  out.elem_type = elem;
  out.ints = std::move(v);
  return out;
}

TEST(GgufRoundTrip, EveryScalarType) {
  std::mt19937_64 rng(101);
  const float f32 = std::uniform_real_distribution<float>(-1e6f, 1e6f)(rng);
  const double f64 = std::uniform_real_distribution<double>(-1e300, 1e300)(rng);
  const auto i64 = static_cast<int64_t>(rng());
  const std::string utf8_with_nul = std::string("caf\xc3\xa9 \xe4\xb8\xad\0tail", 13);

  GgufWriter w;
  w.set_u8("t.u8", 255);
  w.set_i8("t.i8", -128);
  w.set_u16("t.u16", 65535);
  w.set_i16("t.i16", -32768);
  w.set_u32("t.u32", 4294967295u);
  w.set_i32("t.i32", std::numeric_limits<int32_t>::min());
  w.set_u64("t.u64", static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
  w.set_i64("t.i64", i64);
  w.set_f32("t.f32", f32);
  w.set_f64("t.f64", f64);
  w.set_bool("t.true", true);
  w.set_bool("t.false", false);
  w.set_string("t.str", utf8_with_nul);
  w.set_string("t.empty", "");
  const std::string path = scratch_path("scalars.gguf");
  ASSERT_TRUE(w.write(path).ok());

  auto f = open_ok(path);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  ASSERT_EQ(f->metadata().size(), 14u);
  // File order is the order of the set_* calls.
  EXPECT_EQ(f->metadata()[0].first, "t.u8");
  EXPECT_EQ(f->metadata()[13].first, "t.empty");

  struct Expect { const char* key; GgufType type; int64_t v; };
  const Expect ints[] = {
      {"t.u8", GgufType::kU8, 255},       {"t.i8", GgufType::kI8, -128},
      {"t.u16", GgufType::kU16, 65535},   {"t.i16", GgufType::kI16, -32768},
      {"t.u32", GgufType::kU32, 4294967295ll}, {"t.i32", GgufType::kI32, std::numeric_limits<int32_t>::min()},
      {"t.u64", GgufType::kU64, std::numeric_limits<int64_t>::max()}, {"t.i64", GgufType::kI64, i64},
  };
  for (const auto& e : ints) {
    const GgufValue* v = f->find(e.key);
    ASSERT_NE(v, nullptr) << e.key;
    EXPECT_EQ(v->type, e.type) << e.key;
    auto r = f->get_int(e.key);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(*r, e.v) << e.key;
  }
  EXPECT_EQ(f->find("t.f32")->type, GgufType::kF32);
  EXPECT_EQ(static_cast<float>(*f->get_float("t.f32")), f32);
  EXPECT_EQ(f->find("t.f64")->type, GgufType::kF64);
  EXPECT_EQ(*f->get_float("t.f64"), f64);
  EXPECT_TRUE(*f->get_bool("t.true"));
  EXPECT_FALSE(*f->get_bool("t.false"));
  EXPECT_EQ(*f->get_string("t.str"), utf8_with_nul);
  EXPECT_EQ(*f->get_string("t.empty"), "");
  EXPECT_TRUE(f->tensors().empty());
}

TEST(GgufRoundTrip, EveryArrayType) {
  std::mt19937_64 rng(202);
  auto rand_in = [&](int64_t lo, int64_t hi, size_t n) {
    std::uniform_int_distribution<int64_t> d(lo, hi);
    std::vector<int64_t> v(n);
    for (auto& x : v) x = d(rng);
    v.front() = lo;  // the extremes must survive too
    v.back() = hi;
    return v;
  };
  struct IntCase { const char* key; GgufType elem; int64_t lo, hi; };
  const IntCase cases[] = {
      {"a.u8", GgufType::kU8, 0, 255},
      {"a.i8", GgufType::kI8, -128, 127},
      {"a.u16", GgufType::kU16, 0, 65535},
      {"a.i16", GgufType::kI16, -32768, 32767},
      {"a.u32", GgufType::kU32, 0, 4294967295ll},
      {"a.i32", GgufType::kI32, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()},
      {"a.u64", GgufType::kU64, 0, std::numeric_limits<int64_t>::max()},
      {"a.i64", GgufType::kI64, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()},
      {"a.bool", GgufType::kBool, 0, 1},
  };
  GgufWriter w;
  std::vector<std::vector<int64_t>> expected_ints;
  for (const auto& c : cases) {
    expected_ints.push_back(rand_in(c.lo, c.hi, 37));
    w.set_value(c.key, make_int_array(c.elem, expected_ints.back()));
  }
  std::vector<float> f32s(19);
  for (auto& x : f32s) x = std::uniform_real_distribution<float>(-10, 10)(rng);
  w.set_f32_array("a.f32", f32s);
  GgufValue f64s;
  f64s.type = GgufType::kArray;
  f64s.elem_type = GgufType::kF64;
  for (int k = 0; k < 23; ++k) f64s.floats.push_back(std::normal_distribution<double>(0, 1e10)(rng));
  w.set_value("a.f64", f64s);
  std::vector<std::string> strs = {"", "<s>", "\xe2\x96\x81the", std::string(300, 'x')};
  w.set_string_array("a.str", strs);
  w.set_i32_array("a.i32_helper", {-5, 7, std::numeric_limits<int32_t>::min()});
  w.set_u32_array("a.u32_helper", {0, 9, 4294967295u});
  w.set_string_array("a.empty", {});
  const std::string path = scratch_path("arrays.gguf");
  ASSERT_TRUE(w.write(path).ok());

  auto f = open_ok(path);
  ASSERT_TRUE(f);
  for (size_t k = 0; k < std::size(cases); ++k) {
    const GgufValue* v = f->find(cases[k].key);
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->type, GgufType::kArray);
    EXPECT_EQ(v->elem_type, cases[k].elem) << cases[k].key;
    EXPECT_EQ(v->ints, expected_ints[k]) << cases[k].key;
    EXPECT_EQ(v->array_size(), expected_ints[k].size());
  }
  auto got_f32 = *f->get_float_array("a.f32");
  ASSERT_EQ(got_f32.size(), f32s.size());
  for (size_t k = 0; k < f32s.size(); ++k) EXPECT_EQ(static_cast<float>(got_f32[k]), f32s[k]);
  EXPECT_EQ(*f->get_float_array("a.f64"), f64s.floats);
  EXPECT_EQ(*f->get_string_array("a.str"), strs);
  EXPECT_EQ(*f->get_int_array("a.i32_helper"), (std::vector<int64_t>{-5, 7, std::numeric_limits<int32_t>::min()}));
  EXPECT_EQ(*f->get_int_array("a.u32_helper"), (std::vector<int64_t>{0, 9, 4294967295ll}));
  EXPECT_EQ(f->find("a.empty")->elem_type, GgufType::kString);
  EXPECT_EQ(f->find("a.empty")->array_size(), 0u);
  // Integer arrays convert for get_float_array.
  EXPECT_EQ(f->get_float_array("a.u8")->front(), 0.0);
}

// Expected sizes come from the block layouts in the reference notes, not from dtype.cc.
struct TensorCase {
  const char* name;
  DType type;
  std::vector<int64_t> dims;
  size_t nbytes;
};

TEST(GgufRoundTrip, TensorsOfSeveralTypes) {
  const std::vector<TensorCase> cases = {
      {"f32.weight", DType::kF32, {7, 3}, 7 * 3 * 4},
      {"f16.weight", DType::kF16, {5}, 10},
      {"bf16.weight", DType::kBF16, {3, 2, 2}, 24},
      {"q4_0.weight", DType::kQ4_0, {64, 2}, 2 * 2 * 18},
      {"q8_0.weight", DType::kQ8_0, {32, 3}, 3 * 34},
      {"q4_K.weight", DType::kQ4_K, {256, 2}, 2 * 144},
      {"q6_K.weight", DType::kQ6_K, {512}, 2 * 210},
      {"i32.weight", DType::kI32, {3, 2, 2, 2}, 24 * 4},
  };
  std::mt19937 rng(303);
  for (uint32_t alignment : {32u, 64u, 256u}) {
    GgufWriter w;
    if (alignment != 32) w.set_alignment(alignment);
    w.set_string("general.architecture", "test");
    std::vector<std::vector<uint8_t>> data;
    for (const auto& c : cases) {
      data.emplace_back(c.nbytes);
      for (auto& b : data.back()) b = static_cast<uint8_t>(rng());
      ASSERT_TRUE(w.add_tensor(c.name, c.type, c.dims, data.back().data(), data.back().size()).ok()) << c.name;
    }
    const std::string path = scratch_path("tensors.gguf");
    ASSERT_TRUE(w.write(path).ok());
    auto f = open_ok(path);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->alignment(), alignment);
    if (alignment != 32) {
      EXPECT_EQ(*f->get_int("general.alignment"), alignment);
    }
    EXPECT_EQ(f->data_offset() % alignment, 0u);
    ASSERT_EQ(f->tensors().size(), cases.size());
    for (size_t k = 0; k < cases.size(); ++k) {
      const GgufTensorInfo& t = f->tensors()[k];
      EXPECT_EQ(t.name, cases[k].name);
      EXPECT_EQ(t.type, cases[k].type);
      EXPECT_EQ(t.dims, cases[k].dims);
      EXPECT_EQ(t.nbytes, cases[k].nbytes);
      EXPECT_EQ(t.offset % alignment, 0u);
      int64_t n = 1;
      for (int64_t d : cases[k].dims) n *= d;
      EXPECT_EQ(t.n_elements(), n);
      ASSERT_NE(t.data, nullptr);
      EXPECT_EQ(0, std::memcmp(t.data, data[k].data(), data[k].size())) << t.name;
      EXPECT_EQ(f->find_tensor(cases[k].name), &t);
    }
    EXPECT_EQ(f->find_tensor("missing"), nullptr);
    // The file ends with the last tensor padded to the alignment.
    EXPECT_EQ(f->file_size() % alignment, 0u);
  }
}

// The writer's bytes must equal a file built by hand from the layout notes.
TEST(GgufRoundTrip, WriterBytesMatchHandBuiltLayout) {
  const std::vector<float> a = {1.5f, -2.25f, 3.0f};
  const std::vector<uint8_t> q(34, 0x5a);
  GgufWriter w;
  w.set_u32("general.alignment", 32);
  w.set_string("k.s", "hi");
  w.set_f32_array("k.fa", {0.5f, -1.0f});
  w.set_bool("k.b", true);
  ASSERT_TRUE(w.add_tensor("a", DType::kF32, {3}, a.data(), a.size() * 4).ok());
  ASSERT_TRUE(w.add_tensor("q", DType::kQ8_0, {32}, q.data(), q.size()).ok());
  const std::string path = scratch_path("layout.gguf");
  ASSERT_TRUE(w.write(path).ok());

  Bytes b;
  b.header(3, 2, 4);
  b.kv_u32("general.alignment", 32);
  b.kv_str("k.s", "hi");
  b.str("k.fa").u32(9).u32(6).u64(2).put(0.5f).put(-1.0f);
  b.str("k.b").u32(7).u8(1);
  b.tensor("a", {3}, 0, 0);
  b.tensor("q", {32}, 8, 32);  // 12 bytes of "a" padded to 32
  b.pad(32);
  for (float x : a) b.put(x);
  b.pad(32).raw(q).pad(32);
  EXPECT_EQ(test::read_file(path), b.vec());
}

TEST(GgufRoundTrip, HandBuiltVersion2File) {
  Bytes b;
  b.header(2, 1, 2);
  b.kv_str("general.architecture", "llama");
  b.str("x.count").u32(10).u64(1234567890123ull);
  b.tensor("w", {4, 2}, 0, 0);
  b.pad(32);
  for (int k = 0; k < 8; ++k) b.put(static_cast<float>(k) * 0.25f);
  const std::string path = scratch_path("v2.gguf");
  test::write_file(path, b.vec());
  auto f = open_ok(path);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(*f->get_string("general.architecture"), "llama");
  EXPECT_EQ(*f->get_int("x.count"), 1234567890123ll);
  ASSERT_EQ(f->tensors().size(), 1u);
  float x;
  std::memcpy(&x, f->tensors()[0].data + 7 * 4, 4);
  EXPECT_EQ(x, 1.75f);
  EXPECT_EQ(f->data_offset(), b.size() - 32);
}

TEST(GgufRoundTrip, ReplacingAKeyKeepsItsPlace) {
  GgufWriter w;
  w.set_u32("a", 1);
  w.set_string("b", "x");
  w.set_string("a", "now a string");
  const std::string path = scratch_path("replace.gguf");
  ASSERT_TRUE(w.write(path).ok());
  auto f = open_ok(path);
  ASSERT_TRUE(f);
  ASSERT_EQ(f->metadata().size(), 2u);
  EXPECT_EQ(f->metadata()[0].first, "a");
  EXPECT_EQ(*f->get_string("a"), "now a string");
}

TEST(GgufGetters, TypeChecksAndDefaults) {
  GgufWriter w;
  w.set_u32("n", 7);
  w.set_string("s", "str");
  w.set_bool("b", true);
  w.set_f32("f", 0.5f);
  w.set_string_array("sa", {"x"});
  const std::string path = scratch_path("getters.gguf");
  ASSERT_TRUE(w.write(path).ok());
  auto f = open_ok(path);
  ASSERT_TRUE(f);

  auto missing = f->get_int("nope");
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'nope'"), std::string::npos);

  auto wrong = f->get_string("n");
  ASSERT_EQ(wrong.status().code(), ErrorCode::kCorrupt);
  const std::string& msg = wrong.status().message();
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("'n'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("u32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("string"), std::string::npos) << msg;

  EXPECT_EQ(*f->get_float("n"), 7.0);  // integers are accepted as floats
  EXPECT_EQ(f->get_int("f").status().code(), ErrorCode::kCorrupt);
  EXPECT_EQ(f->get_int("b").status().code(), ErrorCode::kCorrupt);
  EXPECT_EQ(f->get_bool("n").status().code(), ErrorCode::kCorrupt);
  EXPECT_EQ(f->get_int_array("sa").status().code(), ErrorCode::kCorrupt);
  EXPECT_EQ(f->get_string_array("s").status().code(), ErrorCode::kCorrupt);

  EXPECT_EQ(*f->get_int_or("absent", 42), 42);
  EXPECT_EQ(*f->get_int_or("n", 42), 7);
  EXPECT_EQ(*f->get_string_or("absent", "d"), "d");
  EXPECT_EQ(*f->get_float_or("absent", 2.5), 2.5);
  EXPECT_TRUE(*f->get_bool_or("absent", true));
  EXPECT_EQ(f->get_int_or("s", 1).status().code(), ErrorCode::kCorrupt);  // present but wrong type
  EXPECT_EQ(f->get_bool_or("s", true).status().code(), ErrorCode::kCorrupt);
}

TEST(GgufWriterErrors, RejectsBadTensorsAndValues) {
  GgufWriter w;
  std::vector<uint8_t> buf(1024, 1);
  EXPECT_TRUE(w.add_tensor("ok", DType::kF32, {4}, buf.data(), 16).ok());
  auto expect_bad = [&](Status st, const char* needle) {
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << st.to_string();
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  };
  expect_bad(w.add_tensor("ok", DType::kF32, {4}, buf.data(), 16), "'ok'");
  expect_bad(w.add_tensor("size", DType::kF32, {4}, buf.data(), 12), "'size'");
  expect_bad(w.add_tensor("nodims", DType::kF32, {}, buf.data(), 0), "'nodims'");
  expect_bad(w.add_tensor("fivedims", DType::kF32, {1, 1, 1, 1, 1}, buf.data(), 4), "'fivedims'");
  expect_bad(w.add_tensor("zero", DType::kF32, {4, 0}, buf.data(), 0), "'zero'");
  expect_bad(w.add_tensor("block", DType::kQ4_0, {33}, buf.data(), 18), "'block'");

  GgufWriter nested;
  GgufValue v;
  v.type = GgufType::kArray;
  v.elem_type = GgufType::kArray;
  nested.set_value("nest", v);
  expect_bad(nested.write(scratch_path("never.gguf")), "'nest'");

  GgufWriter range;
  range.set_value("small", make_int_array(GgufType::kU8, {1, 256}));
  expect_bad(range.write(scratch_path("never.gguf")), "'small'");

  GgufWriter big;
  big.set_u64("big", std::numeric_limits<uint64_t>::max());
  expect_bad(big.write(scratch_path("never.gguf")), "'big'");

  GgufWriter align;
  align.set_alignment(48);
  expect_bad(align.write(scratch_path("never.gguf")), "general.alignment");
  EXPECT_FALSE(std::filesystem::exists(scratch_path("never.gguf")));
}

TEST(GgufWriterErrors, UnwritableDirectoryIsAnIoError) {
  GgufWriter w;
  w.set_u32("a", 1);
  Status st = w.write("/nonexistent-dir-for-frugal-tests/x.gguf");
  EXPECT_EQ(st.code(), ErrorCode::kIo);
  EXPECT_NE(st.message().find("/nonexistent-dir-for-frugal-tests/x.gguf"), std::string::npos);
}

TEST(GgufOpen, PrefaultReportsProgressToTheEnd) {
  GgufWriter w;
  std::vector<float> x(4096);
  std::mt19937 rng(404);
  for (auto& v : x) v = std::normal_distribution<float>()(rng);
  ASSERT_TRUE(w.add_tensor("x", DType::kF32, {4096}, x.data(), x.size() * 4).ok());
  const std::string path = scratch_path("prefault.gguf");
  ASSERT_TRUE(w.write(path).ok());
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  GgufOpenOptions opts;
  opts.prefault = true;
  opts.progress = [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); };
  auto r = GgufFile::open(path, opts);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.back().first, (*r)->file_size());
  EXPECT_EQ(calls.back().second, (*r)->file_size());
  for (size_t k = 1; k < calls.size(); ++k) EXPECT_LE(calls[k - 1].first, calls[k].first);
  EXPECT_EQ(0, std::memcmp((*r)->tensors()[0].data, x.data(), x.size() * 4));
}

}  // namespace
}  // namespace frugal
