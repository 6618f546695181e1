// Outlier-Companion Grouping (OCGQuant, arXiv 2609.00066; the algorithm as the reference note
// describes Eshamont/OCGQuant's reorder step): a reordering of a linear layer's input channels so
// that each large-activation channel (an "anchor") shares its 16-element NVFP4 scale group only
// with the 15 quietest channels instead of with 15 ordinary ones.
//
// Why it helps: an NVFP4 group's E4M3 scale is set by its largest element, so one outlier in a
// group coarsens the grid of the other 15 ("collateral" error). Packing the outlier with channels
// that are near zero anyway costs little (they round to zero, losing only their own small
// energy), and the remaining groups no longer contain the outlier.
//
// Inputs are per-channel RMS values from calibration (sqrt of the imatrix's mean squares).
//   Anchor count k: walk channels by descending RMS; the k-th is accepted while
//     rms_k^2 > sum of rms^2 over the 15 lowest-RMS channels that are not among the first k,
//   and k <= n / 16. (As published: the test charges each candidate the same 15 quietest
//   channels, while packing below hands companions out cumulatively.)
//   Packing: anchor i (in descending RMS) takes the 15 lowest-RMS channels not yet taken and not
//   anchors; the k packed groups [anchor, companions ascending] go to the end, every other
//   channel keeps its original relative order at the front.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace frugal::quant::methods {

inline constexpr int kOcgGroupSize = 16;  // NVFP4's scale group

struct OcgGrouping {
  // order[i] = the original channel placed at position i: a permutation of 0..n-1.
  std::vector<int32_t> order;
  // The last n_anchors * 16 positions are the packed groups, each starting with its anchor.
  int n_anchors = 0;
};

// The number of anchors the rule above accepts. rms.size() must be a multiple of 16.
int ocg_anchor_count(std::span<const float> rms);

// The reordering with exactly `n_anchors` (0..rms.size() / 16) packed groups.
OcgGrouping ocg_grouping_with_anchors(std::span<const float> rms, int n_anchors);

// ocg_grouping_with_anchors(rms, ocg_anchor_count(rms)).
OcgGrouping ocg_grouping(std::span<const float> rms);

}  // namespace frugal::quant::methods
