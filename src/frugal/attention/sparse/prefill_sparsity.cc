#include "frugal/attention/sparse/prefill_sparsity.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include "frugal/attention/sparse/crisp.h"
#include "frugal/attention/sparse/flexprefill.h"
#include "frugal/attention/sparse/minference.h"

namespace frugal::sparse {
namespace {

class Dense final : public PrefillSparsity {
 public:
  Method method() const override { return Method::kNone; }
  void select(const HeadInput&, Scratch&, const BlockMask& mask) const override {
    std::memset(mask.bits, 1, static_cast<size_t>(mask.bytes()));  // select_blocks trims causality
  }
};

Result<int32_t> parse_count(const std::string& label, const std::string& value, int32_t min, int32_t max) {
  int32_t v = 0;
  const char* end = value.data() + value.size();
  const auto [p, ec] = std::from_chars(value.data(), end, v);
  if (value.empty() || ec != std::errc() || p != end) {
    return error(ErrorCode::kInvalidArgument, "{}: '{}' is not an integer", label, value);
  }
  if (v < min || v > max) {
    return error(ErrorCode::kInvalidArgument, "{}: {} is not in [{}, {}]", label, v, min, max);
  }
  return v;
}

// A real number in [min, max], or (min, max] when min_open.
Result<float> parse_real(const std::string& label, const std::string& value, double min, double max, bool min_open) {
  double v = 0;
  const char* end = value.data() + value.size();
  const auto [p, ec] = std::from_chars(value.data(), end, v);
  if (value.empty() || ec != std::errc() || p != end || !std::isfinite(v)) {
    return error(ErrorCode::kInvalidArgument, "{}: '{}' is not a number", label, value);
  }
  if ((min_open ? v <= min : v < min) || v > max) {
    return error(ErrorCode::kInvalidArgument, "{}: {} is not in {}{}, {}]", label, value, min_open ? "(" : "[", min,
                 max);
  }
  return static_cast<float>(v);
}

}  // namespace

const char* method_name(Method m) {
  switch (m) {
    case Method::kNone: return "none";
    case Method::kMInference: return "minference";
    case Method::kFlexPrefill: return "flexprefill";
    case Method::kCrisp: return "crisp";
  }
  return "?";
}

Result<Method> parse_method(const std::string& value) {
  if (value == "none") return Method::kNone;
  if (value == "minference") return Method::kMInference;
  if (value == "flexprefill") return Method::kFlexPrefill;
  if (value == "crisp") return Method::kCrisp;
  return error(ErrorCode::kInvalidArgument,
               "'{}' is not a prefill sparsity method (none, minference, flexprefill or crisp)", value);
}

std::vector<std::string> option_names() {
  return {"prefill-sparse",  "sparse-min-blocks", "sparse-last-q", "sparse-vertical", "sparse-slash", "flex-gamma",
          "flex-tau",        "flex-min-budget",   "flex-max-budget", "crisp-gamma",   "crisp-floor",  "crisp-route"};
}

bool is_option(const std::string& name) {
  const auto names = option_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

Status set_option(PrefillSparseOptions& o, const std::string& name, const std::string& value,
                  const std::string& label) {
  constexpr int32_t kMax = 1 << 30;
  if (name == "prefill-sparse") {
    auto m = parse_method(value);
    if (!m.ok()) return m.status().with_context(label);
    o.method = *m;
    return ok_status();
  }
  if (name == "sparse-min-blocks") {
    FRUGAL_ASSIGN_OR_RETURN(o.min_blocks, parse_count(label, value, 1, kMax));
    return ok_status();
  }
  if (name == "sparse-last-q") {
    FRUGAL_ASSIGN_OR_RETURN(o.last_q, parse_count(label, value, 1, 4096));
    return ok_status();
  }
  if (name == "sparse-vertical") {
    FRUGAL_ASSIGN_OR_RETURN(o.vertical_size, parse_count(label, value, 0, kMax));
    return ok_status();
  }
  if (name == "sparse-slash") {
    FRUGAL_ASSIGN_OR_RETURN(o.slash_size, parse_count(label, value, 0, kMax));
    return ok_status();
  }
  if (name == "flex-gamma") {
    FRUGAL_ASSIGN_OR_RETURN(o.flex_gamma, parse_real(label, value, 0, 1, true));
    return ok_status();
  }
  if (name == "flex-tau") {
    FRUGAL_ASSIGN_OR_RETURN(o.flex_tau, parse_real(label, value, 0, 1, false));
    return ok_status();
  }
  if (name == "flex-min-budget") {
    FRUGAL_ASSIGN_OR_RETURN(o.flex_min_budget, parse_count(label, value, 0, kMax));
    return ok_status();
  }
  if (name == "flex-max-budget") {
    FRUGAL_ASSIGN_OR_RETURN(o.flex_max_budget, parse_count(label, value, 0, kMax));
    return ok_status();
  }
  if (name == "crisp-gamma") {
    FRUGAL_ASSIGN_OR_RETURN(o.crisp_gamma, parse_real(label, value, 0, 1, true));
    return ok_status();
  }
  if (name == "crisp-floor") {
    FRUGAL_ASSIGN_OR_RETURN(o.crisp_floor, parse_real(label, value, 0, 1e6, false));
    return ok_status();
  }
  if (name == "crisp-route") {
    FRUGAL_ASSIGN_OR_RETURN(o.crisp_route, parse_real(label, value, 0, 1, false));
    return ok_status();
  }
  return error(ErrorCode::kInvalidArgument, "{}: not a sparse prefill option", label);
}

BlockMask mask_shape(int32_t q_pos0, int32_t n_q) {
  BlockMask m;
  const int32_t last = q_pos0 + std::max<int32_t>(n_q, 1) - 1;
  m.qb0 = q_pos0 / kSparseBlock;
  m.n_qb = last / kSparseBlock - m.qb0 + 1;
  m.n_kb = last / kSparseBlock + 1;
  return m;
}

int64_t select_blocks(const PrefillSparsity& method, const HeadInput& in, Scratch& scratch, const BlockMask& mask) {
  std::memset(mask.bits, 0, static_cast<size_t>(mask.bytes()));
  method.select(in, scratch, mask);
  int64_t kept = 0;
  for (int32_t r = 0; r < mask.n_qb; ++r) {
    const int32_t qb = mask.qb0 + r;
    uint8_t* row = mask.row(r);
    row[0] = 1;
    row[qb] = 1;
    for (int32_t kb = qb + 1; kb < mask.n_kb; ++kb) row[kb] = 0;
    for (int32_t kb = 0; kb <= qb; ++kb) kept += row[kb] != 0;
  }
  return kept;
}

int64_t causal_blocks(const BlockMask& mask) {
  int64_t n = 0;
  for (int32_t r = 0; r < mask.n_qb; ++r) n += mask.qb0 + r + 1;
  return n;
}

std::unique_ptr<PrefillSparsity> make_prefill_sparsity(const PrefillSparseOptions& o) {
  switch (o.method) {
    case Method::kMInference: return std::make_unique<MInference>(o);
    case Method::kFlexPrefill: return std::make_unique<FlexPrefill>(o);
    case Method::kCrisp: return std::make_unique<Crisp>(o);
    case Method::kNone: break;
  }
  return std::make_unique<Dense>();
}

}  // namespace frugal::sparse
