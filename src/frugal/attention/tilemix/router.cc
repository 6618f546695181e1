#include "frugal/attention/tilemix/router.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "frugal/attention/tilemix/int8_tile.h"
#include "frugal/attention/tilemix/tilemix.h"

namespace frugal::tilemix {

void BlockRange::add_row(const float* x, int dim, float scale) {
  float m = 0, s = 0;
  for (int e = 0; e < dim; ++e) {
    const float a = std::fabs(x[e] * scale);
    m = std::max(m, a);
    s += a;
  }
  max_abs = std::max(max_abs, m);
  max_mean_abs = std::max(max_mean_abs, s / static_cast<float>(dim));
}

float scale_range_error(const BlockRange& q, const BlockRange& k, int head_dim) {
  return static_cast<float>(head_dim) / (2.f * kCodeMax) * (k.max_abs * q.max_mean_abs + q.max_abs * k.max_mean_abs);
}

void ScaleRangeRouter::predict(const sparse::HeadInput& in, const sparse::BlockMask& mask, float* err) const {
  const int kb_n = mask.n_kb;
  std::vector<BlockRange> kr(static_cast<size_t>(kb_n));
  for (int32_t j = 0; j < in.n_k; ++j) {
    kr[static_cast<size_t>(j / sparse::kSparseBlock)].add_row(in.k + static_cast<int64_t>(j) * in.head_dim,
                                                              in.head_dim, 1.f);
  }
  for (int32_t r = 0; r < mask.n_qb; ++r) {
    const int32_t qb = mask.qb0 + r;
    const int32_t p0 = std::max(in.q_pos0, qb * sparse::kSparseBlock);
    const int32_t p1 = std::min(in.q_pos0 + in.n_q, (qb + 1) * sparse::kSparseBlock);
    BlockRange qr;
    for (int32_t p = p0; p < p1; ++p) {
      const float* qt = in.q + static_cast<int64_t>(p - in.q_pos0) * in.token_stride;
      for (int h = 0; h < in.n_rep; ++h) qr.add_row(qt + static_cast<int64_t>(h) * in.head_dim, in.head_dim, in.scale);
    }
    float* row = err + static_cast<int64_t>(r) * kb_n;
    for (int32_t kb = 0; kb <= qb && kb < kb_n; ++kb) {
      row[kb] = scale_range_error(qr, kr[static_cast<size_t>(kb)], in.head_dim);
    }
  }
}

void route_lowest(const float* err, std::vector<int64_t>& candidates, int64_t n, uint8_t* int8) {
  if (n <= 0) return;
  const auto less = [err](int64_t a, int64_t b) { return err[a] < err[b] || (err[a] == err[b] && a < b); };
  if (n < static_cast<int64_t>(candidates.size())) {
    std::nth_element(candidates.begin(), candidates.begin() + n, candidates.end(), less);
  }
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(candidates.size()); ++i) int8[candidates[static_cast<size_t>(i)]] = 1;
}

int64_t route_tiles(const TileRouter& router, const sparse::HeadInput& in, const sparse::BlockMask& mask,
                    const uint8_t* keep, double fraction, RouteScratch& scratch, uint8_t* int8, int64_t* tiles) {
  const int64_t bytes = mask.bytes();
  std::memset(int8, 0, static_cast<size_t>(bytes));
  if (scratch.err.size() < static_cast<size_t>(bytes)) scratch.err.resize(static_cast<size_t>(bytes));
  scratch.order.clear();
  for (int32_t r = 0; r < mask.n_qb; ++r) {
    const int32_t qb = mask.qb0 + r;
    for (int32_t kb = 0; kb <= qb && kb < mask.n_kb; ++kb) {
      const int64_t idx = static_cast<int64_t>(r) * mask.n_kb + kb;
      if (keep == nullptr || keep[idx] != 0) scratch.order.push_back(idx);
    }
  }
  const int64_t n = static_cast<int64_t>(scratch.order.size());
  *tiles = n;
  const int64_t n8 = int8_tile_count(fraction, n);
  if (n8 == 0) return 0;
  if (n8 == n) {
    for (int64_t idx : scratch.order) int8[idx] = 1;
    return n;
  }
  router.predict(in, mask, scratch.err.data());
  route_lowest(scratch.err.data(), scratch.order, n8, int8);
  return n8;
}

std::unique_ptr<TileRouter> make_router() { return std::make_unique<ScaleRangeRouter>(); }

}  // namespace frugal::tilemix
