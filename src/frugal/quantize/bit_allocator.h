// Mixed-precision allocation under a size budget: each unit (a layer, or one tensor) is stored in
// one of its candidate types, each with a size in bytes and a cost (the Fisher-weighted squared
// quantization error of fisher_cost.h, or anything additive); pick one type per unit so that the
// total size stays within the budget and the total cost is as small as possible.
//
// Two allocators over the same table:
//   allocate_dp: the exact 0/1 multiple-choice knapsack by dynamic programming over a byte grid.
//   allocate_rl: FAMPWQ's reinforcement-learning allocator (HAQ-style REINFORCE agent).
// Neither ever returns an allocation over the budget.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "frugal/core/dtype.h"
#include "frugal/core/status.h"

namespace frugal::quantize {

struct AllocationOption {
  DType type = DType::kF16;
  uint64_t bytes = 0;
  double cost = 0;
};

struct AllocationUnit {
  std::string name;                  // "blk.3" or a tensor name
  std::vector<std::string> tensors;  // the model tensors that take the unit's type
  int64_t n_weights = 0;
  std::vector<AllocationOption> options;  // at least one
};

struct Allocation {
  std::vector<int> choice;  // index into units[i].options
  uint64_t bytes = 0;
  double cost = 0;
};

// The smallest and largest total size any allocation can have.
uint64_t min_total_bytes(const std::vector<AllocationUnit>& units);
uint64_t max_total_bytes(const std::vector<AllocationUnit>& units);
// Bytes and cost of a given choice.
Allocation evaluate_allocation(const std::vector<AllocationUnit>& units, std::vector<int> choice);

struct DpOptions {
  // Cells of the byte grid at most. The grid unit is the greatest common divisor of every
  // option's size, which makes the program exact (every reachable total is a multiple of it); when
  // budget / gcd exceeds max_cells the unit grows to ceil(budget / max_cells) and option sizes are
  // rounded up to it: the result is then still within the budget, and its cost is at most the
  // optimum under (budget - units.size() * unit).
  int64_t max_cells = int64_t{1} << 20;
};

struct DpReport {
  uint64_t grid_bytes = 0;  // the grid unit
  int64_t cells = 0;
  bool exact = false;       // grid_bytes is the gcd: the optimum itself
};

Result<Allocation> allocate_dp(const std::vector<AllocationUnit>& units, uint64_t budget_bytes,
                               const DpOptions& opts = {}, DpReport* report = nullptr);

struct RlOptions {
  uint64_t seed = 1;
  int episodes = 3000;
  double learning_rate = 0.1;
};

struct RlReport {
  int episodes = 0;
  int best_episode = 0;     // the episode whose allocation is returned
  double final_greedy_cost = 0;  // the trained policy's greedy allocation
};

// An agent walks the units in order. State: the unit's index and share of the weights, its cost
// vector, the budget left per remaining weight. Action: one of the unit's types; actions that
// would leave too few bytes for the remaining units at their smallest types are masked, so every
// episode ends within the budget. Reward at the end of an episode: -(total cost) / (cost of the
// smallest allocation). The policy is a softmax over per-action scores (a table indexed by unit
// and action plus a linear function of action features), trained by REINFORCE with a moving
// baseline; the best allocation seen in any episode (or the final greedy one, if better) is
// returned. Deterministic for a seed.
Result<Allocation> allocate_rl(const std::vector<AllocationUnit>& units, uint64_t budget_bytes,
                               const RlOptions& opts = {}, RlReport* report = nullptr);

}  // namespace frugal::quantize
