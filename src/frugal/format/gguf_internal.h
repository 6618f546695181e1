// Private helpers shared by the GGUF reader, writer and dump; not part of the public interface.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "frugal/format/gguf.h"

namespace frugal::gguf_internal {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
inline constexpr uint64_t kDefaultAlignment = 32;
inline constexpr uint32_t kMaxDims = 4;
inline constexpr uint64_t kMaxKeyBytes = 65535;
// No real tensor comes near this; it keeps element counts and byte sizes far from overflow.
inline constexpr int64_t kMaxElements = int64_t{1} << 40;

bool is_integer(GgufType t);
bool is_float(GgufType t);
bool is_known_type(uint32_t t);
uint64_t scalar_size(GgufType t);       // bytes of one scalar on disk; 0 for string/array
bool int_fits(GgufType t, int64_t v);   // whether v is representable in integer/bool type t

// Quoted, escaped and shortened for error messages: keys in a corrupt file may be garbage.
std::string quote(std::string_view s);
std::string type_description(const GgufValue& v);  // "u32", "array of string"

inline uint64_t align_up(uint64_t x, uint64_t a) { return x + (a - x % a) % a; }

}  // namespace frugal::gguf_internal
