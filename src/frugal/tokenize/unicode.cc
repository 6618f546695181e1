#include "frugal/tokenize/unicode.h"

#include <array>
#include <string>
#include <unordered_map>
#include <vector>

namespace frugal::unicode {
namespace {

// Two-stage table: 256-code-point blocks, identical blocks shared. About 60 KB instead of the
// 1.1 MB a flat array needs, and still one load per lookup.
struct FlagTable {
  static constexpr uint32_t kBlockBits = 8;
  static constexpr uint32_t kBlockSize = 1u << kBlockBits;
  std::vector<uint16_t> block_of;  // (kMaxCodePoint + 1) / kBlockSize entries
  std::vector<uint8_t> blocks;     // kBlockSize bytes per distinct block

  FlagTable() {
    const uint32_t n_blocks = (kMaxCodePoint + 1) >> kBlockBits;
    block_of.resize(n_blocks);
    std::array<uint8_t, kBlockSize> block{};
    size_t r = 0;
    for (uint32_t b = 0; b < n_blocks; ++b) {
      for (uint32_t i = 0; i < kBlockSize; ++i) {
        const uint32_t cpt = (b << kBlockBits) | i;
        while (r + 1 < kFlagRangeCount && kFlagRanges[r + 1].first <= cpt) ++r;
        block[i] = kFlagRanges[r].flags;
      }
      block_of[b] = static_cast<uint16_t>(find_or_add(block));
    }
    index.clear();
  }

  size_t find_or_add(const std::array<uint8_t, kBlockSize>& block) {
    std::string key(block.begin(), block.end());
    auto [it, inserted] = index.emplace(std::move(key), blocks.size() / kBlockSize);
    if (inserted) blocks.insert(blocks.end(), block.begin(), block.end());
    return it->second;
  }
  std::unordered_map<std::string, size_t> index;  // block bytes -> block number (build only)
};

const FlagTable& flag_table() {
  static const FlagTable table;
  return table;
}

}  // namespace

uint8_t flags(uint32_t cpt) {
  if (cpt > kMaxCodePoint) return 0;
  const FlagTable& t = flag_table();
  return t.blocks[(size_t(t.block_of[cpt >> FlagTable::kBlockBits]) << FlagTable::kBlockBits) |
                  (cpt & (FlagTable::kBlockSize - 1))];
}

Utf8Step next_utf8(std::string_view s, size_t& len) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const uint8_t b0 = p[0];
  if (b0 < 0x80) {
    len = 1;
    return Utf8Step::kComplete;
  }
  size_t need = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte (Unicode table 3-7)
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    len = 1;
    return Utf8Step::kInvalid;
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= s.size()) {
      len = s.size();
      return Utf8Step::kIncomplete;
    }
    const uint8_t b = p[i];
    const bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) {
      len = i;
      return Utf8Step::kInvalid;
    }
  }
  len = need;
  return Utf8Step::kComplete;
}

size_t find_invalid_utf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    // ASCII runs are the common case.
    if (static_cast<uint8_t>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    if (next_utf8(text.substr(i), len) != Utf8Step::kComplete) return i;
    i += len;
  }
  return std::string_view::npos;
}

void append_utf8(std::string& out, uint32_t cpt) {
  if (cpt < 0x80) {
    out.push_back(static_cast<char>(cpt));
  } else if (cpt < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cpt >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cpt >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  }
}

}  // namespace frugal::unicode
