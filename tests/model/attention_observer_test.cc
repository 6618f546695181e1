// Model::forward's attention observer (kv/attention_observer.h): it sees every layer's queries
// around attention, in layer order, with the batch's sequences and positions, and observing
// changes nothing the model computes; on a backend that runs the pass whole (forward_model) it
// sees, after the pass, the queries of each sequence's newest recent_queries() rows that the
// backend copied back.
#include "frugal/kv/attention_observer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
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

// Keeps every query it is shown, per layer, with its sequence and position.
class QueryLog final : public AttentionObserver {
 public:
  explicit QueryLog(int32_t recent) : recent_(recent) {}
  void before_attention(int layer, const int32_t* seq, const int32_t* pos, int64_t n, const float* q,
                        const AttentionParams& p) override {
    layers.push_back(layer);
    seqs.emplace_back(seq, seq + n);
    poss.emplace_back(pos, pos + n);
    qs.emplace_back(q, q + n * p.n_head * p.head_dim);
  }
  void after_attention(KvCache&, int layer, const int32_t*, int64_t) override { after.push_back(layer); }
  int32_t recent_queries() const override { return recent_; }
  std::vector<int> layers, after;
  std::vector<std::vector<int32_t>> seqs, poss;
  std::vector<std::vector<float>> qs;

 private:
  int32_t recent_;
};

// A backend that runs the pass whole, as a device backend does: its forward_model runs the pass on
// a second copy of the model (op by op on the CPU, with its own cache) and copies back the queries
// of the rows it is asked for, as the CUDA backend's QueryCapture does.
class WholePassBackend final : public Backend {
 public:
  WholePassBackend(std::unique_ptr<Backend> cpu, Model& twin) : cpu_(std::move(cpu)), twin_(twin) {}
  std::string name() const override { return "whole-pass"; }
  int n_threads() const override { return cpu_->n_threads(); }
  void matmul(const WeightTensor& w, const float* x, int64_t n, float* y, const float* bias) override {
    cpu_->matmul(w, x, n, y, bias);
  }
  void get_rows(const WeightTensor& w, const int32_t* ids, int64_t n, float* y) override { cpu_->get_rows(w, ids, n, y); }
  void rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y) override {
    cpu_->rms_norm(x, w, rows, dim, eps, y);
  }
  void rope(float* x, int64_t n, int64_t heads, int64_t hd, const int32_t* pos, const RopeParams& p) override {
    cpu_->rope(x, n, heads, hd, pos, p);
  }
  void swiglu(const float* g, const float* u, int64_t n, float* out) override { cpu_->swiglu(g, u, n, out); }
  void add(float* x, const float* y, int64_t n) override { cpu_->add(x, y, n); }
  void attention(const float* q, const KvView& kv, int layer, const int32_t* seq, const int32_t* pos, int64_t n,
                 const AttentionParams& p, float* out) override {
    cpu_->attention(q, kv, layer, seq, pos, n, p, out);
  }
  Result<bool> forward_model(const Model& model, const Batch& batch, const KvView& kv, float* logits, int32_t* greedy,
                             const QueryCapture* queries) override {
    (void)model, (void)greedy;
    if (!kv_) {
      auto k = KvCache::create(kv.options());
      if (!k.ok()) return k.status();
      kv_ = std::make_unique<KvCache>(std::move(*k));
    }
    QueryLog all(1 << 30);
    FRUGAL_RETURN_IF_ERROR(twin_.forward(batch, *kv_, *cpu_, logits, &all));
    ++passes;
    if (queries == nullptr) return true;
    for (size_t l = 0; l < all.qs.size(); ++l) {
      const size_t row = all.qs[l].size() / static_cast<size_t>(batch.size());
      for (int64_t i = 0; i < queries->m; ++i) {
        std::memcpy(queries->out + (l * static_cast<size_t>(queries->m) + static_cast<size_t>(i)) * row,
                    all.qs[l].data() + static_cast<size_t>(queries->rows[i]) * row, row * sizeof(float));
      }
    }
    return true;
  }
  int passes = 0;

 private:
  std::unique_ptr<Backend> cpu_;
  Model& twin_;
  std::unique_ptr<KvCache> kv_;
};

TEST(AttentionObserver, WholePassBackendHandsTheNewestRowsAfterThePass) {
  auto opts = synth::random_model_preset("tiny-llama", FRUGAL_SHARED_MODELS_DIR);
  ASSERT_TRUE(opts.ok()) << opts.status().to_string();
  opts->n_layer = 2;
  opts->weight_type = "F32";
  const fs::path path = fs::temp_directory_path() / ("frugal_observer_whole_" + std::to_string(getpid()) + ".gguf");
  ASSERT_TRUE(synth::write_random_model(*opts, path.string()).ok());
  auto model = Model::load(path.string());
  auto twin = Model::load(path.string());
  ASSERT_TRUE(model.ok() && twin.ok());
  const ModelConfig& c = (*model)->config();
  WholePassBackend whole(make_cpu_backend({1}), **twin);
  auto cpu = make_cpu_backend({1});
  // Runs of 6 and 2 tokens (sequences 0 and 1), then sequence 0 again for 3: newest 3 rows of each
  // run are what an observer keeping 3 queries needs.
  Batch b;
  for (int i = 0; i < 6; ++i) b.add(3 + i, i, 0, i == 5);
  for (int i = 0; i < 2; ++i) b.add(20 + i, i, 1, i == 1);
  for (int i = 0; i < 3; ++i) b.add(40 + i, 6 + i, 0, i == 2);
  auto kv_w = KvCache::create((*model)->kv_options(2, 16));
  auto kv_c = KvCache::create((*model)->kv_options(2, 16));
  ASSERT_TRUE(kv_w.ok() && kv_c.ok());
  QueryLog got(3), want(3);
  std::vector<float> lw(static_cast<size_t>(b.n_logits() * c.n_vocab)), lc(lw.size());
  ASSERT_TRUE((*model)->forward(b, *kv_w, whole, lw.data(), &got).ok());
  ASSERT_TRUE((*model)->forward(b, *kv_c, *cpu, lc.data(), &want).ok());
  EXPECT_EQ(whole.passes, 1) << "the observed pass ran whole on the backend";
  EXPECT_EQ(lw, lc);
  const std::vector<int32_t> rows = {3, 4, 5, 6, 7, 8, 9, 10};  // newest 3 of 6, both of 2, all 3
  ASSERT_EQ(got.layers.size(), static_cast<size_t>(c.n_layer));
  EXPECT_EQ(got.after, got.layers);
  const size_t row = static_cast<size_t>(c.n_head * c.head_dim);
  for (int l = 0; l < c.n_layer; ++l) {
    EXPECT_EQ(got.layers[static_cast<size_t>(l)], l);
    std::vector<int32_t> seq, pos;
    std::vector<float> q;
    for (int32_t r : rows) {
      seq.push_back(want.seqs[static_cast<size_t>(l)][static_cast<size_t>(r)]);
      pos.push_back(want.poss[static_cast<size_t>(l)][static_cast<size_t>(r)]);
      q.insert(q.end(), want.qs[static_cast<size_t>(l)].begin() + r * static_cast<int64_t>(row),
               want.qs[static_cast<size_t>(l)].begin() + (r + 1) * static_cast<int64_t>(row));
    }
    EXPECT_EQ(got.seqs[static_cast<size_t>(l)], seq) << "layer " << l;
    EXPECT_EQ(got.poss[static_cast<size_t>(l)], pos) << "layer " << l;
    EXPECT_EQ(got.qs[static_cast<size_t>(l)], q) << "layer " << l;
  }
  // An observer that keeps no queries gets none and the pass still runs whole.
  QueryLog none(0);
  auto kv_n = KvCache::create((*model)->kv_options(2, 16));
  ASSERT_TRUE(kv_n.ok());
  WholePassBackend whole2(make_cpu_backend({1}), **twin);
  ASSERT_TRUE((*model)->forward(b, *kv_n, whole2, lw.data(), &none).ok());
  EXPECT_EQ(whole2.passes, 1);
  EXPECT_TRUE(none.layers.empty());
  fs::remove(path);
}

}  // namespace
}  // namespace frugal
