// A sequence's KV state: its cache and the evictor that acts on it (eviction policy, KV
// quantization, memory budget). Built in one place so that the engine and teacher forcing hold
// exactly the same state for the same options: a difference here would be a difference in output.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "frugal/core/dtype.h"
#include "frugal/core/status.h"
#include "frugal/kv/eviction.h"
#include "frugal/kv/kv_cache.h"
#include "frugal/model/model.h"

namespace frugal {

// What the state is sized for.
struct SequenceKvShape {
  int32_t prompt_len = 0;  // tokens prefilled before the first decode step
  int32_t trace_len = 0;   // prompt plus tokens to generate: the base of a fractional budget
  int32_t n_ctx = 0;       // the most positions the sequence can reach (a cache without eviction)
  int32_t n_batch = 512;   // the longest prefill chunk (hyquant stages one chunk in FP16)
  DType dtype = DType::kF16;
};

// The evictor keeps a pointer to the cache it began, so the pair lives at one address.
struct SequenceKv {
  KvCache cache;
  std::unique_ptr<KvEvictor> evictor;
  // What to pass to Model::forward (null when nothing reads the queries).
  AttentionObserver* observer() { return evictor->attention_observer(); }
};

// One sequence (slot 0) sized by the evictor: the whole context without eviction, else
// max(prompt, budget + buffer), or what kv-memory holds. Impossible options fail here, before the
// model runs.
Result<std::unique_ptr<SequenceKv>> make_sequence_kv(const Model& model, const KvPolicyOptions& kv,
                                                     const SequenceKvShape& shape);

// True when `kv` needs a state of its own: anything other than a keep-everything, unquantized
// cache without a memory budget, which is what the engine's shared sequence slots hold.
bool needs_own_kv(const KvPolicyOptions& kv);
// Whether a backend that keeps its own F16 cache (`backend`: its name) can run these KV options:
// eviction by every policy runs there; KV quantization and a per-sequence kv-memory run on the cpu
// backend, and the refusal says so.
Status device_kv_supports(const KvPolicyOptions& kv, const std::string& backend);

}  // namespace frugal
