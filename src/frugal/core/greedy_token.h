// The greedy decoding rule, in one place: the sampler at temperature 0 (decode/), the model's
// greedy pass (Model::forward_greedy) and the CUDA backend's device argmax all pick this token, so
// a step that returns token ids instead of logits decodes exactly as one that samples from them.
#pragma once

#include <cstdint>
#include <span>

namespace frugal {

// The largest value of one logits row, NaN counting as -inf and +inf as the largest finite float,
// ties to the lowest id (0 when every value is -inf or NaN).
int32_t greedy_token(std::span<const float> logits);

}  // namespace frugal
