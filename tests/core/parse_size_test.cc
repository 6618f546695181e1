#include "frugal/core/parse_size.h"

#include <gtest/gtest.h>

namespace frugal {
namespace {

TEST(ParseSize, ReadsBinaryUnits) {
  EXPECT_EQ(*parse_size("1048576"), 1048576u);
  EXPECT_EQ(*parse_size("512b"), 512u);
  EXPECT_EQ(*parse_size("64k"), 64u * 1024);
  EXPECT_EQ(*parse_size("256MiB"), 256ull << 20);
  EXPECT_EQ(*parse_size("512M"), 512ull << 20);
  EXPECT_EQ(*parse_size("1.5G"), 3ull << 29);
  EXPECT_EQ(*parse_size("2gb"), 2ull << 30);
}

TEST(ParseSize, RefusesWhatIsNotASize) {
  for (const char* bad : {"", "MiB", "12X", "-1M", "0", "nan", "inf", "1e30", "12 MB"}) {
    const auto r = parse_size(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(r.status().message(), std::string("'") + bad + "' is not a size (e.g. 256MiB, 2G, 1048576)");
  }
}

}  // namespace
}  // namespace frugal
