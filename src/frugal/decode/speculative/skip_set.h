// Skip sets of self-speculative drafters (swift.h, conf_layers.h) as text, for logs, `run --json`
// and --spec-skip-set (the audit replays the set a search found, frozen): one letter per layer,
// '-' the layer runs, 'a' its attention is skipped, 'm' its MLP is skipped, 'x' both (the values
// of Batch::skip_layers). "-xa-m-" skips layer 1 whole, layer 2's attention and layer 4's MLP.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "frugal/core/status.h"

namespace frugal::speculative {

std::string format_skip_set(const std::vector<uint8_t>& skip);
// kInvalidArgument naming the problem: a length other than n_layer or a letter not in "-amx".
Result<std::vector<uint8_t>> parse_skip_set(const std::string& text, int32_t n_layer);
// Sublayers skipped (attention and MLP counted apart).
int32_t skipped_sublayers(const std::vector<uint8_t>& skip);

}  // namespace frugal::speculative
