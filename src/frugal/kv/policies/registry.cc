#include "frugal/kv/policies/policy.h"

namespace frugal {
namespace {

struct Entry {
  const char* name;
  std::unique_ptr<KvPolicy> (*make)();
};

constexpr Entry kPolicies[] = {
    {"full", make_full_policy},   {"window", make_window_policy}, {"random", make_random_policy},
    {"h2o", make_h2o_policy},     {"tova", make_tova_policy},     {"snapkv", make_snapkv_policy},
    {"rkv", make_rkv_policy},
};

}  // namespace

Result<std::unique_ptr<KvPolicy>> make_kv_policy(std::string_view name) {
  for (const Entry& e : kPolicies) {
    if (name == e.name) return e.make();
  }
  std::string known;
  for (const Entry& e : kPolicies) known += (known.empty() ? "" : ", ") + std::string(e.name);
  return error(ErrorCode::kInvalidArgument, "kv policy '{}' is unknown (known: {})", name, known);
}

std::vector<std::string> kv_policy_names() {
  std::vector<std::string> out;
  for (const Entry& e : kPolicies) out.emplace_back(e.name);
  return out;
}

}  // namespace frugal
