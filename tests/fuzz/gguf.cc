// The GGUF reader on arbitrary bytes, then everything a loader does with a file that validated:
// typed getters on every key, the dump `frugal info` prints, a touch of every tensor's first and
// last byte, and the tokenizer built from its metadata. A model file is untrusted input: the only
// acceptable outcomes are a file or a clean error, never a crash or a read outside the bytes.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "frugal/format/gguf.h"
#include "frugal/format/gguf_dump.h"
#include "frugal/tokenize/tokenizer.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "property violated: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace frugal;
  // An exact-size heap copy: libFuzzer's buffer is exact-size too, but the copy makes the bound
  // independent of how the fuzzer hands data over.
  std::unique_ptr<uint8_t[]> bytes(new uint8_t[size == 0 ? 1 : size]);
  if (size) std::memcpy(bytes.get(), data, size);
  auto file = GgufFile::from_memory(bytes.get(), size, "fuzz.gguf");
  if (!file.ok()) {
    // As the format tests demand of every rejected file: corrupt or unsupported, one line that
    // starts with the file's name.
    const Status& st = file.status();
    if (st.code() != ErrorCode::kCorrupt && st.code() != ErrorCode::kNotSupported) fail("unexpected error code");
    if (st.message().rfind("fuzz.gguf: ", 0) != 0) fail("error does not name the file");
    if (st.message().find('\n') != std::string::npos) fail("error spans lines");
    return 0;
  }
  const GgufFile& f = *file.value();
  for (const auto& [key, value] : f.metadata()) {
    if (f.find(key) == nullptr) fail("a key read is not found again");
    (void)f.get_string(key);
    (void)f.get_int(key);
    (void)f.get_float(key);
    (void)f.get_bool(key);
    (void)f.get_string_array(key);
    (void)f.get_int_array(key);
    (void)f.get_float_array(key);
    (void)format_gguf_value(value);
  }
  (void)gguf_dump(f);
  volatile uint8_t sink = 0;
  for (const auto& t : f.tensors()) {
    if (f.find_tensor(t.name) == nullptr) fail("a tensor read is not found again");
    if (t.nbytes == 0) continue;
    // The reader promised these bytes lie inside the file; ASan checks the promise.
    sink = sink + t.data[0] + t.data[t.nbytes - 1];
  }
  (void)Tokenizer::from_gguf(f);
  return 0;
}
