// The k-th largest of a set of floats, by radix selection on their bits: an eviction round picks
// the survivors of every head of every layer (256 heads for an 8B-shaped model), and a
// comparison-driven selection (std::nth_element) spends most of a round's host time in branches
// it mispredicts on scores in random order.
#pragma once

#include <cstdint>
#include <vector>

namespace frugal {

// The value of the k-th largest (1 <= k <= values.size()) of `values`, which holds no NaN; equal to
// what std::nth_element with std::greater puts at index k - 1 (-0 and +0 are one value).
// `scratch` is reused between calls.
float kth_largest(const std::vector<float>& values, int32_t k, std::vector<uint32_t>& scratch);

}  // namespace frugal
