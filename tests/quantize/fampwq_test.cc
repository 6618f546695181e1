// FAMPWQ: the knapsack allocator against brute force, the RL allocator's budget and
// reproducibility, the Fisher file's validation, and a whole model quantized under a bpw budget.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <random>

#include "frugal/format/gguf.h"
#include "frugal/model/model.h"
#include "frugal/quantize/bit_allocator.h"
#include "frugal/quantize/fisher_cost.h"
#include "frugal/quantize/fisher_file.h"
#include "frugal/quantize/model_quantizer.h"
#include "frugal/synth/random_model.h"

namespace frugal::quantize {
namespace {

namespace fs = std::filesystem;

std::vector<AllocationUnit> random_units(std::mt19937& rng, int n_units, int max_options, int max_bytes) {
  std::uniform_int_distribution<int> n_opt(1, max_options);
  std::uniform_int_distribution<int> bytes(1, max_bytes);
  std::uniform_real_distribution<double> cost(0.0, 10.0);
  std::vector<AllocationUnit> units(static_cast<size_t>(n_units));
  for (int i = 0; i < n_units; ++i) {
    AllocationUnit& u = units[static_cast<size_t>(i)];
    u.name = std::to_string(i);
    u.name.insert(u.name.begin(), 'u');
    u.n_weights = 8 * max_bytes;
    const int k = n_opt(rng);
    for (int a = 0; a < k; ++a) u.options.push_back({DType::kQ4_0, static_cast<uint64_t>(bytes(rng)), cost(rng)});
  }
  return units;
}

// The best cost of any choice within `budget` (infinity when none fits).
double brute_force(const std::vector<AllocationUnit>& units, uint64_t budget) {
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> pick(units.size(), 0);
  while (true) {
    Allocation a = evaluate_allocation(units, pick);
    if (a.bytes <= budget) best = std::min(best, a.cost);
    size_t i = 0;
    while (i < units.size() && ++pick[i] == static_cast<int>(units[i].options.size())) pick[i++] = 0;
    if (i == units.size()) return best;
  }
}

uint64_t random_budget(std::mt19937& rng, const std::vector<AllocationUnit>& units) {
  std::uniform_int_distribution<uint64_t> d(min_total_bytes(units), max_total_bytes(units));
  return d(rng);
}

TEST(Fampwq, KnapsackEqualsBruteForce) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const auto units = random_units(rng, 1 + trial % 6, 4, 40);
    const uint64_t budget = random_budget(rng, units);
    DpReport rep;
    auto a = allocate_dp(units, budget, {}, &rep);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    EXPECT_TRUE(rep.exact);
    EXPECT_LE(a->bytes, budget);
    EXPECT_NEAR(a->cost, brute_force(units, budget), 1e-9) << "trial " << trial;
  }
}

TEST(Fampwq, CoarseKnapsackStaysWithinBudgetAndOneCellPerUnit) {
  std::mt19937 rng(12);
  for (int trial = 0; trial < 200; ++trial) {
    const auto units = random_units(rng, 2 + trial % 5, 4, 1000);
    const uint64_t budget = random_budget(rng, units);
    DpOptions o;
    o.max_cells = 50;  // forces a grid coarser than the gcd
    DpReport rep;
    auto a = allocate_dp(units, budget, o, &rep);
    if (!a.ok()) continue;  // rounding up can leave no grid solution just above the minimum
    EXPECT_FALSE(rep.exact);
    EXPECT_LE(a->bytes, budget);
    const uint64_t slack = units.size() * rep.grid_bytes;
    if (budget >= slack + min_total_bytes(units)) {
      EXPECT_LE(a->cost, brute_force(units, budget - slack) + 1e-9) << "trial " << trial;
    }
  }
}

TEST(Fampwq, ImpossibleBudgetsAreRefused) {
  std::mt19937 rng(13);
  const auto units = random_units(rng, 4, 3, 40);
  const uint64_t lo = min_total_bytes(units);
  EXPECT_FALSE(allocate_dp(units, lo - 1).ok());
  EXPECT_FALSE(allocate_rl(units, lo - 1).ok());
  auto a = allocate_dp(units, lo);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->bytes, lo);
}

TEST(Fampwq, ReinforceIsReproducibleAndNeverOverBudget) {
  std::mt19937 rng(14);
  for (int trial = 0; trial < 20; ++trial) {
    const auto units = random_units(rng, 12, 5, 100);
    const uint64_t budget = random_budget(rng, units);
    RlOptions o;
    o.seed = 100 + static_cast<uint64_t>(trial);
    o.episodes = 400;
    auto a = allocate_rl(units, budget, o);
    auto b = allocate_rl(units, budget, o);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->choice, b->choice);
    EXPECT_LE(a->bytes, budget);
    auto dp = allocate_dp(units, budget);
    ASSERT_TRUE(dp.ok());
    EXPECT_GE(a->cost, dp->cost - 1e-9);  // the knapsack is optimal
  }
}

TEST(Fampwq, ReinforceFindsTheOptimumOfASmallInstance) {
  std::mt19937 rng(15);
  int found = 0;
  for (int trial = 0; trial < 10; ++trial) {
    const auto units = random_units(rng, 4, 3, 50);
    const uint64_t budget = random_budget(rng, units);
    auto a = allocate_rl(units, budget, {});
    ASSERT_TRUE(a.ok());
    found += std::fabs(a->cost - brute_force(units, budget)) < 1e-9;
  }
  EXPECT_EQ(found, 10);
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("frugal_fampwq_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::string write_model(const TempDir& dir) {
  auto o = synth::random_model_preset("tiny-llama", FRUGAL_SHARED_MODELS_DIR);
  EXPECT_TRUE(o.ok());
  o->weight_type = "F16";
  o->n_layer = 3;
  o->n_embd = 256;
  o->n_head = 4;
  o->n_head_kv = 2;
  o->n_ff = 512;
  o->n_vocab = 512;
  o->seed = 3;
  const std::string path = dir.file("model.gguf");
  EXPECT_TRUE(synth::write_random_model(*o, path).ok());
  return path;
}

// A Fisher file for every allocated tensor of `model`; `edit` may spoil it.
std::string write_fisher(const TempDir& dir, const std::string& model, const std::string& name,
                         const std::function<void(const std::string&, std::vector<int64_t>&, std::vector<float>&,
                                                  bool&)>& edit = {}) {
  auto m = GgufFile::open(model);
  EXPECT_TRUE(m.ok());
  GgufWriter w;
  w.set_string("fisher.model", model);
  w.set_i32("fisher.windows", 4);
  w.set_i32("fisher.tokens", 512);
  w.set_i32("fisher.context", 128);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(0.f, 1.f);
  for (const auto& t : (*m)->tensors()) {
    if (!is_allocated_tensor(t)) continue;
    std::vector<int64_t> dims = t.dims;
    std::vector<float> v(static_cast<size_t>(t.n_elements()));
    for (float& x : v) x = d(rng);
    bool keep = true;
    if (edit) edit(t.name, dims, v, keep);
    if (!keep) continue;
    int64_t n = 1;
    for (int64_t x : dims) n *= x;
    v.resize(static_cast<size_t>(n));
    EXPECT_TRUE(w.add_tensor(t.name, DType::kF32, dims, v.data(), v.size() * sizeof(float)).ok());
  }
  const std::string path = dir.file(name);
  EXPECT_TRUE(w.write(path).ok());
  return path;
}

std::string cost_table_error(const std::string& model, const std::string& fisher_path) {
  auto m = GgufFile::open(model);
  auto f = FisherFile::open(fisher_path);
  if (!f.ok()) return f.status().message();
  auto t = fisher_cost_table(**m, *f, {});
  return t.ok() ? "" : t.status().message();
}

TEST(Fampwq, BadFisherFilesAreRefusedNamingTheTensor) {
  TempDir dir;
  const std::string model = write_model(dir);
  const std::string target = "blk.1.ffn_down.weight";
  auto missing = write_fisher(dir, model, "missing.gguf", [&](const std::string& n, auto&, auto&, bool& keep) {
    keep = n != target;
  });
  auto shape = write_fisher(dir, model, "shape.gguf", [&](const std::string& n, auto& dims, auto&, bool&) {
    if (n == target) dims[1] -= 1;
  });
  auto nan = write_fisher(dir, model, "nan.gguf", [&](const std::string& n, auto&, auto& v, bool&) {
    if (n == target) v[17] = std::nanf("");
  });
  auto negative = write_fisher(dir, model, "negative.gguf", [&](const std::string& n, auto&, auto& v, bool&) {
    if (n == target) v[3] = -1.f;
  });
  for (const std::string& path : {missing, shape, nan, negative}) {
    const std::string msg = cost_table_error(model, path);
    EXPECT_NE(msg.find(target), std::string::npos) << path << ": " << msg;
  }
  EXPECT_EQ(cost_table_error(model, write_fisher(dir, model, "good.gguf")), "");
  // A GGUF that is not a Fisher file at all (the model itself).
  EXPECT_NE(cost_table_error(model, model).find("not a Fisher file"), std::string::npos);
}

TEST(Fampwq, WholeModelUnderABudgetLoadsAndRuns) {
  TempDir dir;
  const std::string model = write_model(dir);
  const std::string fisher_path = write_fisher(dir, model, "fisher.gguf");
  auto m = GgufFile::open(model);
  ASSERT_TRUE(m.ok());
  auto fisher = FisherFile::open(fisher_path);
  ASSERT_TRUE(fisher.ok());
  for (auto granularity : {AllocationGranularity::kLayer, AllocationGranularity::kTensor}) {
    FisherCostOptions co;
    co.granularity = granularity;
    co.n_threads = 2;
    auto units = fisher_cost_table(**m, *fisher, co);
    ASSERT_TRUE(units.ok()) << units.status().to_string();
    EXPECT_EQ(units->size(), granularity == AllocationGranularity::kLayer ? 3u : 21u);
    int64_t n_weights = 0;
    for (const auto& u : *units) {
      n_weights += u.n_weights;
      ASSERT_EQ(u.options.front().type, DType::kQ2_K);  // rows of 256 and 512: the K-quants
      // More bits, less error: the measured costs fall with the size.
      for (size_t a = 1; a < u.options.size(); ++a) EXPECT_LT(u.options[a].cost, u.options[a - 1].cost) << u.name;
    }
    const auto budget = static_cast<uint64_t>(3.5 * static_cast<double>(n_weights) / 8.0);
    auto alloc = allocate_dp(*units, budget);
    ASSERT_TRUE(alloc.ok());
    EXPECT_LE(alloc->bytes, budget);
    QuantizeOptions o;
    o.input = model;
    o.output = dir.file("fampwq.gguf");
    o.target = *find_target("Q4_K_M");
    o.n_threads = 2;
    for (size_t i = 0; i < units->size(); ++i) {
      for (const auto& t : (*units)[i].tensors) {
        o.assigned_types[t] = (*units)[i].options[static_cast<size_t>(alloc->choice[i])].type;
      }
    }
    o.provenance = {{"quantize.fampwq.allocator", "dp"}};
    auto r = quantize_model(o);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    auto out = GgufFile::open(o.output);
    ASSERT_TRUE(out.ok());
    uint64_t layer_bytes = 0;
    for (const auto& t : (*out)->tensors()) {
      auto it = o.assigned_types.find(t.name);
      if (it == o.assigned_types.end()) continue;
      EXPECT_EQ(t.type, it->second) << t.name;
      layer_bytes += t.nbytes;
    }
    EXPECT_EQ(layer_bytes, alloc->bytes);
    EXPECT_EQ((*out)->get_string("quantize.fampwq.allocator").value(), "dp");
    auto loaded = Model::load(o.output);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    auto be = make_cpu_backend({});
    auto kv = KvCache::create((*loaded)->kv_options(1, 8));
    ASSERT_TRUE(kv.ok());
    Batch b;
    for (int i = 0; i < 4; ++i) b.add(1 + i, i, 0, i == 3);
    std::vector<float> logits(static_cast<size_t>((*loaded)->config().n_vocab));
    ASSERT_TRUE((*loaded)->forward(b, *kv, *be, logits.data()).ok());
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  }
}

TEST(Fampwq, AssigningANonTensorIsRefused) {
  TempDir dir;
  const std::string model = write_model(dir);
  QuantizeOptions o;
  o.input = model;
  o.output = dir.file("q.gguf");
  o.target = *find_target("Q4_0");
  o.assigned_types["blk.9.attn_q.weight"] = DType::kQ8_0;
  auto r = quantize_model(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("blk.9.attn_q.weight"), std::string::npos);
  EXPECT_FALSE(fs::exists(o.output));
}

}  // namespace
}  // namespace frugal::quantize
