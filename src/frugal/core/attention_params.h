// The shape of one attention call: what the backends that compute attention and the KV components
// that observe it (kv/attention_observer.h) both need to know, so neither includes the other.
#pragma once

#include <cstdint>

namespace frugal {

struct AttentionParams {
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  float scale = 1.f;        // usually 1/sqrt(head_dim)
  int32_t window = 0;       // sliding window in positions (0: none): key pos > query pos - window
};

}  // namespace frugal
