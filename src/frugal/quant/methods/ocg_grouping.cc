#include "frugal/quant/methods/ocg_grouping.h"

#include <algorithm>
#include <numeric>

namespace frugal::quant::methods {
namespace {

// Channels by RMS, ties broken by index so that the order (and every file built from it) does
// not depend on the sort's implementation.
std::vector<int32_t> by_rms(std::span<const float> rms, bool descending) {
  std::vector<int32_t> idx(rms.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) {
    const float ra = rms[static_cast<size_t>(a)];
    const float rb = rms[static_cast<size_t>(b)];
    if (ra != rb) return descending ? ra > rb : ra < rb;
    return a < b;
  });
  return idx;
}

}  // namespace

int ocg_anchor_count(std::span<const float> rms) {
  const int n = static_cast<int>(rms.size());
  const int max_groups = n / kOcgGroupSize;
  if (max_groups == 0) return 0;
  const std::vector<int32_t> loud = by_rms(rms, true);
  const std::vector<int32_t> quiet = by_rms(rms, false);
  std::vector<char> anchor(static_cast<size_t>(n), 0);
  int k = 0;
  for (int cand = 0; cand < max_groups; ++cand) {
    const int32_t a = loud[static_cast<size_t>(cand)];
    anchor[static_cast<size_t>(a)] = 1;
    double companion_energy = 0;
    int taken = 0;
    for (int32_t c : quiet) {
      if (anchor[static_cast<size_t>(c)] != 0) continue;
      companion_energy += static_cast<double>(rms[static_cast<size_t>(c)]) * rms[static_cast<size_t>(c)];
      if (++taken == kOcgGroupSize - 1) break;
    }
    if (taken < kOcgGroupSize - 1) break;
    const double anchor_energy = static_cast<double>(rms[static_cast<size_t>(a)]) * rms[static_cast<size_t>(a)];
    if (!(anchor_energy > companion_energy)) break;
    k = cand + 1;
  }
  return k;
}

OcgGrouping ocg_grouping_with_anchors(std::span<const float> rms, int n_anchors) {
  const int n = static_cast<int>(rms.size());
  n_anchors = std::clamp(n_anchors, 0, n / kOcgGroupSize);
  OcgGrouping g;
  g.order.reserve(static_cast<size_t>(n));
  const std::vector<int32_t> loud = by_rms(rms, true);
  const std::vector<int32_t> quiet = by_rms(rms, false);
  std::vector<char> used(static_cast<size_t>(n), 0);
  for (int i = 0; i < n_anchors; ++i) used[static_cast<size_t>(loud[static_cast<size_t>(i)])] = 1;
  std::vector<int32_t> packed;
  size_t next_quiet = 0;
  for (int i = 0; i < n_anchors; ++i) {
    packed.push_back(loud[static_cast<size_t>(i)]);
    for (int taken = 0; taken < kOcgGroupSize - 1; ++taken) {
      // 16 * n_anchors <= n: there are always 15 free channels left for each anchor.
      while (used[static_cast<size_t>(quiet[next_quiet])] != 0) ++next_quiet;
      used[static_cast<size_t>(quiet[next_quiet])] = 1;
      packed.push_back(quiet[next_quiet]);
    }
  }
  for (int32_t c = 0; c < n; ++c) {
    if (used[static_cast<size_t>(c)] == 0) g.order.push_back(c);
  }
  g.order.insert(g.order.end(), packed.begin(), packed.end());
  g.n_anchors = n_anchors;
  return g;
}

OcgGrouping ocg_grouping(std::span<const float> rms) { return ocg_grouping_with_anchors(rms, ocg_anchor_count(rms)); }

}  // namespace frugal::quant::methods
