// The host's share of an eviction round: what KvEvictor does for every (layer, KV head) of one
// sequence between two decode steps (the policy's scores, the choice of the kept slots, and the
// store's bookkeeping), over a store that holds positions only, as the CUDA backend's host mirror
// does (its rows move on the device). The shape is the Llama-3.1-8B one (32 layers x 8 KV heads),
// each head at budget + buffer tokens, the moment a round fires. Policies that read positions only
// (window, random): the scored ones add their statistics, which a device computes.
// Usage: eviction_round_bench [REPETITIONS]   (default 50; the median is printed)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "frugal/kv/eviction.h"
#include "frugal/kv/token_store.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace frugal;

// Positions only, per (layer, head): keep_tokens compacts them as a device store's mirror would.
class PositionStore final : public KvTokenStore {
 public:
  PositionStore(int n_layer, int n_head_kv) : shape_{n_layer, 1, n_head_kv, 128}, pos_(n_layer * n_head_kv) {}
  void fill(int32_t n) {
    for (auto& p : pos_) {
      p.resize(static_cast<size_t>(n));
      for (int32_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = 3 * i;  // gaps, as after earlier rounds
    }
  }
  KvStoreShape store_shape() const override { return shape_; }
  int32_t size(int layer, int, int head) const override { return static_cast<int32_t>(at(layer, head).size()); }
  const int32_t* positions(int layer, int, int head) const override { return at(layer, head).data(); }
  void read_rows(int, int, int, float*, float*) const override {}
  Status keep_tokens(int layer, int, int head, const std::vector<int32_t>& slots) override {
    std::vector<int32_t>& p = pos_[static_cast<size_t>(layer * shape_.n_head_kv + head)];
    for (size_t i = 0; i < slots.size(); ++i) p[i] = p[static_cast<size_t>(slots[i])];
    p.resize(slots.size());
    return ok_status();
  }
  uint64_t used_bytes(int) const override { return 0; }

 private:
  const std::vector<int32_t>& at(int layer, int head) const {
    return pos_[static_cast<size_t>(layer * shape_.n_head_kv + head)];
  }
  KvStoreShape shape_;
  std::vector<std::vector<int32_t>> pos_;
};

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 50;
  const int n_layer = 32, n_head_kv = 8, buffer = 64;
  std::printf("ms per round, 8B shape (%d layers x %d KV heads), buffer %d, median of %d\n", n_layer, n_head_kv,
              buffer, reps);
  std::printf("%-8s %8s %10s %12s\n", "policy", "budget", "ms/round", "us/head");
  for (const char* policy : {"window", "random"}) {
    for (const int budget : {528, 1040, 2064}) {
      KvPolicyOptions o;
      o.policy = policy;
      o.budget = budget;
      o.buffer = buffer;
      o.seed = 7;
      auto ev = KvEvictor::create(o, 1 << 20, 16);
      if (!ev.ok()) {
        std::fprintf(stderr, "%s\n", ev.status().message().c_str());
        return 1;
      }
      PositionStore store(n_layer, n_head_kv);
      (*ev)->begin(store, 0, 16);
      std::vector<double> t;
      for (int r = 0; r < reps; ++r) {
        store.fill(budget + buffer);
        const auto t0 = Clock::now();
        const Status s = (*ev)->round(store, 0);
        t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        if (!s.ok()) {
          std::fprintf(stderr, "%s\n", s.message().c_str());
          return 1;
        }
      }
      std::sort(t.begin(), t.end());
      const double ms = t[t.size() / 2];
      std::printf("%-8s %8d %10.3f %12.2f\n", policy, budget, ms, 1e3 * ms / (n_layer * n_head_kv));
    }
  }
  return 0;
}
