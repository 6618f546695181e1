// Weight layouts of the CPU kernels other than GGUF's rows, chosen once at load. A weight is
// repacked in place (the same bytes, rearranged) and only where its kernel measured faster on
// this machine's SIMD target; everything else keeps the file's layout and stays zero-copy.
#pragma once

#include <cstdint>

#include "frugal/backend/backend.h"

namespace frugal::cpu {

// The layout the CPU backend reads `w` fastest in here (kRows: leave it as it is). The environment
// variable FRUGAL_CPU_REPACK=0 answers kRows for every weight.
WeightLayout preferred_layout(const WeightTensor& w);
// Rearranges w's bytes in place into `layout` (from preferred_layout) and records it in w.layout;
// the bytes must be writable. Returns the number of bytes rewritten.
uint64_t repack_in_place(WeightTensor& w, void* data, WeightLayout layout);

}  // namespace frugal::cpu
