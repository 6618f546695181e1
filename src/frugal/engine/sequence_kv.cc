#include "frugal/engine/sequence_kv.h"

namespace frugal {

Result<std::unique_ptr<SequenceKv>> make_sequence_kv(const Model& model, const KvPolicyOptions& kv,
                                                     const SequenceKvShape& shape) {
  if (shape.n_batch <= 0) return error(ErrorCode::kInvalidArgument, "n_batch must be positive");
  auto s = std::make_unique<SequenceKv>();
  FRUGAL_ASSIGN_OR_RETURN(s->evictor, KvEvictor::create(kv, shape.trace_len, shape.prompt_len));
  KvCacheOptions o = model.kv_options(1, s->evictor->capacity(shape.prompt_len, shape.n_ctx), shape.dtype);
  o.quant = kv.quant;
  if (o.quant == KvQuant::kHyQuant) o.residual = 2 * kKvGroup + shape.n_batch;  // one prefill chunk
  if (kv.memory > 0) {
    FRUGAL_ASSIGN_OR_RETURN(o.capacity, s->evictor->fit_memory(o, shape.prompt_len, shape.trace_len));
  }
  FRUGAL_ASSIGN_OR_RETURN(s->cache, KvCache::create(o));
  s->evictor->begin(s->cache, 0, shape.prompt_len);
  return s;
}

bool needs_own_kv(const KvPolicyOptions& kv) {
  return kv.policy != "full" || kv.quant != KvQuant::kNone || kv.memory > 0;
}

Status device_kv_supports(const KvPolicyOptions& kv, const std::string& backend) {
  if (kv.quant != KvQuant::kNone || kv.memory > 0) {
    return error(ErrorCode::kNotSupported,
                 "kv-quant {} and a per-sequence kv-memory run on the cpu backend; the {} backend keeps an unquantized "
                 "F16 cache in slots of its own",
                 kv_quant_name(kv.quant), backend);
  }
  // Every policy runs there: keys are read back from the device's rows, queries copied back by the
  // pass (QueryCapture), and h2o's per-token statistics kept beside the host mirror of positions.
  return make_kv_policy(kv.policy).status();
}

}  // namespace frugal
