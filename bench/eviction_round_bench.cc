// The host's share of an eviction round: what KvEvictor does for every (layer, KV head) of one
// sequence between two decode steps (the policy's scores, the choice of the kept slots, and the
// store's bookkeeping), over a store that holds positions only, as the CUDA backend's host mirror
// does (its rows move on the device). The shape is the Llama-3.1-8B one (32 layers x 8 KV heads),
// each head at budget + buffer tokens, the moment a round fires. The scored policies (snapkv, h2o,
// tova, rkv) get their statistics from the store, as from a device (here: random numbers of the
// right sizes, made before the clock starts); their column "host ms" leaves that exchange out, so
// it is the selection and bookkeeping a device round adds on the engine thread.
// Usage: eviction_round_bench [REPETITIONS]   (default 50; the median is printed)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
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
  bool enable_token_stats() override {
    acc_.resize(pos_.size());
    return true;
  }
  float* token_stats(int layer, int, int head) override {
    std::vector<float>& a = acc_[static_cast<size_t>(layer * shape_.n_head_kv + head)];
    a.resize(at(layer, head).size(), 0.f);
    return a.data();
  }
  // What a device store hands back: vectors of the asked sizes, copied from ready-made noise.
  Result<bool> round_stats(int, const std::vector<RoundStatsRequest>& layers,
                           std::vector<std::vector<HeadRoundStats>>& out) override {
    out.resize(layers.size());
    for (size_t l = 0; l < layers.size(); ++l) {
      out[l].resize(static_cast<size_t>(shape_.n_head_kv));
      for (int h = 0; h < shape_.n_head_kv; ++h) {
        const size_t n = at(static_cast<int>(l), h).size();
        HeadRoundStats& o = out[l][static_cast<size_t>(h)];
        const bool attn = layers[l].attention && layers[l].nq > 0;
        o.attention.assign(noise_.begin(), noise_.begin() + static_cast<std::ptrdiff_t>(attn ? n : 0));
        o.last.assign(noise_.begin() + 1, noise_.begin() + 1 + static_cast<std::ptrdiff_t>(attn ? n : 0));
        o.fresh.assign(noise_.begin() + 2, noise_.begin() + 2 + static_cast<std::ptrdiff_t>(attn ? n : 0));
        const auto nc = static_cast<std::ptrdiff_t>(std::clamp<int64_t>(layers[l].similarity_candidates, 0,
                                                                         static_cast<int64_t>(n)));
        o.similarity.assign(noise_.begin() + 3, noise_.begin() + 3 + nc);
      }
    }
    return true;
  }
  void make_noise(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(0.f, 1.f);
    noise_.resize(n + 4);
    for (float& x : noise_) x = u(rng);
  }

 private:
  const std::vector<int32_t>& at(int layer, int head) const {
    return pos_[static_cast<size_t>(layer * shape_.n_head_kv + head)];
  }
  KvStoreShape shape_;
  std::vector<std::vector<int32_t>> pos_;
  std::vector<std::vector<float>> acc_;
  std::vector<float> noise_;
};

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 50;
  const int n_layer = 32, n_head_kv = 8, buffer = 64;
  std::printf("ms per round, 8B shape (%d layers x %d KV heads), buffer %d, median of %d\n", n_layer, n_head_kv,
              buffer, reps);
  std::printf("%-8s %8s %10s %10s %12s\n", "policy", "budget", "ms/round", "host ms", "us/head");
  for (const char* policy : {"window", "random", "snapkv", "h2o", "tova", "rkv"}) {
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
      store.make_noise(static_cast<size_t>(budget + buffer), 11);
      (*ev)->begin(store, 0, 16);
      // The queries a round reads: recorded as a device keeps them (no rows, positions only).
      AttentionParams ap;
      ap.n_head = 4 * n_head_kv;
      ap.n_head_kv = n_head_kv;
      ap.head_dim = 128;
      ap.scale = 1.f / std::sqrt(128.f);
      std::vector<int32_t> seqs(static_cast<size_t>(buffer), 0), qpos(static_cast<size_t>(buffer));
      std::vector<double> t, host;
      for (int r = 0; r < reps; ++r) {
        store.fill(budget + buffer);
        for (int i = 0; i < buffer; ++i) qpos[static_cast<size_t>(i)] = 3 * (budget + i);
        if (AttentionObserver* obs = (*ev)->attention_observer()) {
          for (int l = 0; l < n_layer; ++l) obs->before_attention(l, seqs.data(), qpos.data(), buffer, nullptr, ap);
        }
        const double stats0 = (*ev)->stats().stats_ms;
        const auto t0 = Clock::now();
        const Status s = (*ev)->round(store, 0);
        t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        host.push_back(t.back() - ((*ev)->stats().stats_ms - stats0));
        if (!s.ok()) {
          std::fprintf(stderr, "%s\n", s.message().c_str());
          return 1;
        }
      }
      std::sort(t.begin(), t.end());
      std::sort(host.begin(), host.end());
      const double ms = t[t.size() / 2], hms = host[host.size() / 2];
      std::printf("%-8s %8d %10.3f %10.3f %12.2f\n", policy, budget, ms, hms, 1e3 * hms / (n_layer * n_head_kv));
    }
  }
  return 0;
}
