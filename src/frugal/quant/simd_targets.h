// Which SIMD targets the kernels were compiled for, and a switch to run them on one target:
// tests check every target against the scalar reference, benchmarks compare targets.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace frugal::quant {

// Targets compiled into the kernels that this CPU can run, best first (Highway target bits).
std::vector<int64_t> available_simd_targets();
std::string simd_target_label(int64_t target);
// Dispatch every kernel to `target` from now on; 0 returns to the best available target.
void force_simd_target(int64_t target);

}  // namespace frugal::quant
