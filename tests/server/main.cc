// The server test binary, which doubles as the helper the end-to-end tests use to make their
// model: `server_tests --write-model PATH [PRESET [WEIGHT_TYPE]]` writes the tiny chat model (or a
// synth preset such as tinyllama-1.1b Q4_0, for the load test) and exits.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "test_model.h"

int main(int argc, char** argv) {
  if (argc >= 3 && argc <= 5 && std::strcmp(argv[1], "--write-model") == 0) {
    const frugal::Status st = frugal::testing::write_tiny_chat_model(argv[2], argc > 3 ? argv[3] : "tiny-llama",
                                                                     argc > 4 ? argv[4] : "");
    if (!st.ok()) {
      std::fprintf(stderr, "server_tests: %s\n", st.to_string().c_str());
      return 1;
    }
    return 0;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
