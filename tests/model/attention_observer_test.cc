// Model::forward's attention observer (kv/attention_observer.h): it sees every layer's queries
// around attention, in layer order, with the batch's sequences and positions, and observing
// changes nothing the model computes.
#include "frugal/kv/attention_observer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "frugal/model/model.h"
#include "frugal/synth/random_model.h"

namespace frugal {
namespace {

namespace fs = std::filesystem;

struct Call {
  bool before = false;
  int layer = 0;
  int64_t n = 0;
  std::vector<int32_t> seq, pos;
  float q0 = 0;  // first query element, to tell the queries reached the observer
  AttentionParams p;
};

class RecordingObserver final : public AttentionObserver {
 public:
  void before_attention(int layer, const int32_t* seq, const int32_t* pos, int64_t n, const float* q,
                        const AttentionParams& p) override {
    calls.push_back({true, layer, n, {seq, seq + n}, {pos, pos + n}, q[0], p});
  }
  void after_attention(KvCache& kv, int layer, const int32_t* seq, int64_t n) override {
    calls.push_back({false, layer, n, {seq, seq + n}, {}, 0, {}});
    sizes_after.push_back(kv.size(layer, seq[0], 0));
  }
  std::vector<Call> calls;
  std::vector<int32_t> sizes_after;
};

TEST(AttentionObserver, SeesEveryLayerAroundAttentionAndChangesNothing) {
  auto opts = synth::random_model_preset("tiny-llama", FRUGAL_SHARED_MODELS_DIR);
  ASSERT_TRUE(opts.ok()) << opts.status().to_string();
  opts->n_layer = 3;
  opts->weight_type = "F32";
  const fs::path path = fs::temp_directory_path() / ("frugal_observer_" + std::to_string(getpid()) + ".gguf");
  ASSERT_TRUE(synth::write_random_model(*opts, path.string()).ok());
  auto model = Model::load(path.string());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const ModelConfig& c = (*model)->config();
  auto be = make_cpu_backend({1});

  Batch b;
  b.add(5, 0, 0, false);
  b.add(7, 1, 0, true);
  b.add(9, 0, 1, true);
  std::vector<float> plain(static_cast<size_t>(2 * c.n_vocab)), observed(plain.size());
  {
    auto kv = KvCache::create((*model)->kv_options(2, 8));
    ASSERT_TRUE(kv.ok());
    ASSERT_TRUE((*model)->forward(b, *kv, *be, plain.data()).ok());
  }
  auto kv = KvCache::create((*model)->kv_options(2, 8));
  ASSERT_TRUE(kv.ok());
  RecordingObserver obs;
  ASSERT_TRUE((*model)->forward(b, *kv, *be, observed.data(), &obs).ok());
  EXPECT_EQ(plain, observed);

  ASSERT_EQ(obs.calls.size(), static_cast<size_t>(2 * c.n_layer));
  for (int l = 0; l < c.n_layer; ++l) {
    const Call& before = obs.calls[static_cast<size_t>(2 * l)];
    const Call& after = obs.calls[static_cast<size_t>(2 * l + 1)];
    EXPECT_TRUE(before.before);
    EXPECT_FALSE(after.before);
    EXPECT_EQ(before.layer, l);
    EXPECT_EQ(after.layer, l);
    EXPECT_EQ(before.n, 3);
    EXPECT_EQ(before.seq, (std::vector<int32_t>{0, 0, 1}));
    EXPECT_EQ(before.pos, (std::vector<int32_t>{0, 1, 0}));
    EXPECT_NE(before.q0, 0.f);
    EXPECT_EQ(before.p.n_head, c.n_head);
    EXPECT_EQ(before.p.n_head_kv, c.n_head_kv);
    EXPECT_EQ(before.p.head_dim, c.head_dim);
    // The step's keys are in the cache before attention runs.
    EXPECT_EQ(obs.sizes_after[static_cast<size_t>(l)], 2);
  }
  fs::remove(path);
}

}  // namespace
}  // namespace frugal
