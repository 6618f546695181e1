#include "frugal/quantize/bit_allocator.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

namespace frugal::quantize {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Status check_units(const std::vector<AllocationUnit>& units) {
  if (units.empty()) return error(ErrorCode::kInvalidArgument, "no units to allocate");
  for (const AllocationUnit& u : units) {
    if (u.options.empty()) return error(ErrorCode::kInvalidArgument, "unit '{}' has no candidate type", u.name);
    if (u.options.size() > 255) return error(ErrorCode::kInvalidArgument, "unit '{}': too many candidates", u.name);
    for (const AllocationOption& o : u.options) {
      if (!std::isfinite(o.cost) || o.cost < 0) {
        return error(ErrorCode::kInvalidArgument, "unit '{}' type {}: cost {} is not a finite non-negative number",
                     u.name, dtype_name(o.type), o.cost);
      }
    }
  }
  return ok_status();
}

Status check_budget(const std::vector<AllocationUnit>& units, uint64_t budget) {
  const uint64_t lo = min_total_bytes(units);
  if (budget < lo) {
    return error(ErrorCode::kInvalidArgument, "budget of {} bytes is below the smallest allocation ({} bytes)", budget,
                 lo);
  }
  return ok_status();
}

uint64_t option_min_bytes(const AllocationUnit& u) {
  uint64_t m = std::numeric_limits<uint64_t>::max();
  for (const AllocationOption& o : u.options) m = std::min(m, o.bytes);
  return m;
}

}  // namespace

uint64_t min_total_bytes(const std::vector<AllocationUnit>& units) {
  uint64_t s = 0;
  for (const AllocationUnit& u : units) s += option_min_bytes(u);
  return s;
}

uint64_t max_total_bytes(const std::vector<AllocationUnit>& units) {
  uint64_t s = 0;
  for (const AllocationUnit& u : units) {
    uint64_t m = 0;
    for (const AllocationOption& o : u.options) m = std::max(m, o.bytes);
    s += m;
  }
  return s;
}

Allocation evaluate_allocation(const std::vector<AllocationUnit>& units, std::vector<int> choice) {
  Allocation a;
  a.choice = std::move(choice);
  for (size_t i = 0; i < units.size(); ++i) {
    const AllocationOption& o = units[i].options[static_cast<size_t>(a.choice[i])];
    a.bytes += o.bytes;
    a.cost += o.cost;
  }
  return a;
}

Result<Allocation> allocate_dp(const std::vector<AllocationUnit>& units, uint64_t budget_bytes, const DpOptions& opts,
                               DpReport* report) {
  FRUGAL_RETURN_IF_ERROR(check_units(units));
  FRUGAL_RETURN_IF_ERROR(check_budget(units, budget_bytes));
  uint64_t g = 0;
  for (const AllocationUnit& u : units) {
    for (const AllocationOption& o : u.options) g = std::gcd(g, o.bytes);
  }
  g = std::max<uint64_t>(g, 1);
  uint64_t unit = g;
  bool exact = true;
  const auto max_cells = static_cast<uint64_t>(std::max<int64_t>(opts.max_cells, 1));
  if (budget_bytes / g > max_cells) {
    unit = (budget_bytes + max_cells - 1) / max_cells;
    exact = false;
  }
  // Exact: sizes are multiples of g, so floor(budget / g) cells lose nothing. Coarse: sizes are
  // rounded up, so a grid solution's true size is at most its grid size, at most the budget.
  const int64_t cells = static_cast<int64_t>(budget_bytes / unit);
  auto weight = [&](const AllocationOption& o) -> int64_t {
    return static_cast<int64_t>(exact ? o.bytes / unit : (o.bytes + unit - 1) / unit);
  };
  const size_t width = static_cast<size_t>(cells) + 1;
  std::vector<double> prev(width, 0.0);  // no unit yet: cost 0 within any size
  std::vector<double> next(width);
  std::vector<std::vector<uint8_t>> choice(units.size(), std::vector<uint8_t>(width, 0));
  for (size_t i = 0; i < units.size(); ++i) {
    std::fill(next.begin(), next.end(), kInf);
    for (size_t a = 0; a < units[i].options.size(); ++a) {
      const AllocationOption& o = units[i].options[a];
      const int64_t w = weight(o);
      for (int64_t c = w; c <= cells; ++c) {
        const double v = prev[static_cast<size_t>(c - w)] + o.cost;
        if (v < next[static_cast<size_t>(c)]) {
          next[static_cast<size_t>(c)] = v;
          choice[i][static_cast<size_t>(c)] = static_cast<uint8_t>(a);
        }
      }
    }
    std::swap(prev, next);
  }
  if (!std::isfinite(prev[static_cast<size_t>(cells)])) {
    return error(ErrorCode::kInvalidArgument,
                 "budget of {} bytes: no allocation fits on a grid of {} bytes (sizes rounded up); raise the budget "
                 "slightly",
                 budget_bytes, unit);
  }
  std::vector<int> pick(units.size());
  int64_t c = cells;
  for (size_t k = units.size(); k-- > 0;) {
    const int a = choice[k][static_cast<size_t>(c)];
    pick[k] = a;
    c -= weight(units[k].options[static_cast<size_t>(a)]);
  }
  if (report != nullptr) {
    report->grid_bytes = unit;
    report->cells = cells;
    report->exact = exact;
  }
  Allocation out = evaluate_allocation(units, std::move(pick));
  if (out.bytes > budget_bytes) {
    return error(ErrorCode::kOverBudget, "knapsack result of {} bytes exceeds the budget of {}", out.bytes, budget_bytes);
  }
  return out;
}

namespace {

constexpr int kFeatures = 5;

// What the agent sees of action a at step t (besides the table entry of (t, a)).
struct StepView {
  double bpw_left;  // bits per weight the budget leaves for this and the remaining units
  double position;  // t / n
};

void action_features(const AllocationUnit& u, size_t a, double max_cost, const StepView& s, double* f) {
  const AllocationOption& o = u.options[a];
  const double cost = max_cost > 0 ? o.cost / max_cost : 0.0;
  const double bpw = 8.0 * static_cast<double>(o.bytes) / static_cast<double>(std::max<int64_t>(u.n_weights, 1));
  const double over = (bpw - s.bpw_left) / 16.0;  // > 0: this unit takes more than its share
  f[0] = cost;
  f[1] = bpw / 16.0;
  f[2] = over;
  f[3] = over * over;
  f[4] = cost * s.position;
}

}  // namespace

Result<Allocation> allocate_rl(const std::vector<AllocationUnit>& units, uint64_t budget_bytes, const RlOptions& opts,
                               RlReport* report) {
  FRUGAL_RETURN_IF_ERROR(check_units(units));
  FRUGAL_RETURN_IF_ERROR(check_budget(units, budget_bytes));
  if (opts.episodes < 1) return error(ErrorCode::kInvalidArgument, "RL allocator: episodes must be at least 1");
  const size_t n = units.size();
  // min_rest[t]: the smallest size units t.. can take; an action is allowed when the rest still fits.
  std::vector<uint64_t> min_rest(n + 1, 0);
  std::vector<int64_t> weights_rest(n + 1, 0);
  for (size_t t = n; t-- > 0;) {
    min_rest[t] = min_rest[t + 1] + option_min_bytes(units[t]);
    weights_rest[t] = weights_rest[t + 1] + units[t].n_weights;
  }
  std::vector<double> max_cost(n, 0.0);
  std::vector<int> smallest(n, 0);
  for (size_t t = 0; t < n; ++t) {
    for (size_t a = 0; a < units[t].options.size(); ++a) {
      max_cost[t] = std::max(max_cost[t], units[t].options[a].cost);
      if (units[t].options[a].bytes < units[t].options[static_cast<size_t>(smallest[t])].bytes) smallest[t] = static_cast<int>(a);
    }
  }
  const double reference_cost = std::max(evaluate_allocation(units, smallest).cost, 1e-30);

  std::vector<std::vector<double>> table(n);
  for (size_t t = 0; t < n; ++t) table[t].assign(units[t].options.size(), 0.0);
  double w[kFeatures] = {0, 0, 0, 0, 0};

  std::mt19937_64 rng(opts.seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);

  struct Step {
    size_t t;
    int action;
    std::vector<double> prob;                  // over the unit's options (0 where masked)
    std::vector<std::array<double, kFeatures>> feat;
  };

  // One walk over the units; greedy takes the most probable allowed action.
  auto run_episode = [&](bool greedy, std::vector<Step>* steps) {
    std::vector<int> pick(n);
    uint64_t left = budget_bytes;
    for (size_t t = 0; t < n; ++t) {
      const AllocationUnit& u = units[t];
      Step s;
      s.t = t;
      s.prob.assign(u.options.size(), 0.0);
      s.feat.resize(u.options.size());
      const StepView view{8.0 * static_cast<double>(left) / static_cast<double>(std::max<int64_t>(weights_rest[t], 1)),
                          static_cast<double>(t) / static_cast<double>(n)};
      double best = -kInf;
      for (size_t a = 0; a < u.options.size(); ++a) {
        action_features(u, a, max_cost[t], view, s.feat[a].data());
        if (u.options[a].bytes + min_rest[t + 1] > left) continue;  // masked: the rest would not fit
        double score = table[t][a];
        for (int k = 0; k < kFeatures; ++k) score += w[k] * s.feat[a][static_cast<size_t>(k)];
        s.prob[a] = score;
        best = std::max(best, score);
      }
      double z = 0;
      for (size_t a = 0; a < u.options.size(); ++a) {
        if (u.options[a].bytes + min_rest[t + 1] > left) continue;
        s.prob[a] = std::exp(s.prob[a] - best);
        z += s.prob[a];
      }
      int action = smallest[t];
      if (greedy) {
        double top = -1;
        for (size_t a = 0; a < u.options.size(); ++a) {
          if (s.prob[a] > top) {
            top = s.prob[a];
            action = static_cast<int>(a);
          }
        }
      } else {
        double r = uniform(rng) * z;
        for (size_t a = 0; a < u.options.size(); ++a) {
          if (s.prob[a] <= 0) continue;
          action = static_cast<int>(a);
          r -= s.prob[a];
          if (r <= 0) break;
        }
      }
      for (double& p : s.prob) p /= z;
      s.action = action;
      pick[t] = action;
      left -= u.options[static_cast<size_t>(action)].bytes;
      if (steps != nullptr) steps->push_back(std::move(s));
    }
    return evaluate_allocation(units, std::move(pick));
  };

  Allocation best;
  best.cost = kInf;
  int best_episode = 0;
  double baseline = 0;
  double spread = 0;  // moving mean absolute deviation of the reward, to scale the advantage
  std::vector<Step> steps;
  for (int e = 0; e < opts.episodes; ++e) {
    steps.clear();
    Allocation a = run_episode(false, &steps);
    if (a.cost < best.cost) {
      best = a;
      best_episode = e;
    }
    const double reward = -a.cost / reference_cost;
    if (e == 0) baseline = reward;
    const double advantage = (reward - baseline) / std::max(spread, 1e-6);
    spread = e == 0 ? std::fabs(reward) * 0.1 + 1e-9 : 0.95 * spread + 0.05 * std::fabs(reward - baseline);
    baseline = 0.9 * baseline + 0.1 * reward;
    if (e == 0) continue;
    for (const Step& s : steps) {
      double mean_feat[kFeatures] = {0, 0, 0, 0, 0};
      for (size_t b = 0; b < s.prob.size(); ++b) {
        const double g = (static_cast<int>(b) == s.action ? 1.0 : 0.0) - s.prob[b];
        table[s.t][b] += opts.learning_rate * advantage * g;
        for (int k = 0; k < kFeatures; ++k) mean_feat[k] += s.prob[b] * s.feat[b][static_cast<size_t>(k)];
      }
      for (int k = 0; k < kFeatures; ++k) {
        w[k] += 0.1 * opts.learning_rate * advantage *
                (s.feat[static_cast<size_t>(s.action)][static_cast<size_t>(k)] - mean_feat[k]);
      }
    }
  }
  Allocation greedy = run_episode(true, nullptr);
  if (report != nullptr) {
    report->episodes = opts.episodes;
    report->final_greedy_cost = greedy.cost;
    report->best_episode = greedy.cost <= best.cost ? opts.episodes : best_episode;
  }
  if (greedy.cost <= best.cost) best = greedy;
  if (best.bytes > budget_bytes) {
    return error(ErrorCode::kOverBudget, "RL allocation of {} bytes exceeds the budget of {}", best.bytes, budget_bytes);
  }
  return best;
}

}  // namespace frugal::quantize
