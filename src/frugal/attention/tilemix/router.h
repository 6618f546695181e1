// TileMix routing: which tiles of a prefill chunk compute their scores in INT8.
//
// A router predicts, for every tile the kernel computes, the error INT8 scores would bring; the
// round(F x tiles) tiles with the smallest prediction (ties: the earlier tile, row by row) go to
// INT8 (route_tiles). The tiles are those of one KV head of one chunk: query block r of the
// chunk's rows (sparse::BlockMask) against key block kb <= its own block, less the blocks a sparse
// prefill mask drops when one is given.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "frugal/attention/sparse/prefill_sparsity.h"

namespace frugal::tilemix {

// Magnitudes of a block of rows: the largest |x| of any element, and the largest mean |x| of a row.
struct BlockRange {
  float max_abs = 0;
  float max_mean_abs = 0;
  void add_row(const float* x, int dim, float scale);
};

class TileRouter {
 public:
  virtual ~TileRouter() = default;
  virtual const char* name() const = 0;
  // err[r * mask.n_kb + kb]: the predicted INT8 error of tile (row r of the mask, key block kb),
  // for every causal tile (kb <= mask.qb0 + r); others are left alone. `in` is the chunk's view of
  // one KV head (queries unscaled, keys as floats, in.scale the softmax scale).
  virtual void predict(const sparse::HeadInput& in, const sparse::BlockMask& mask, float* err) const = 0;
};

// The rule built in: the bound on any score's INT8 error in the tile from the tiles' ranges
// (int8_tile.h, with |q|_1 <= dim x max mean|q| and the scales max|x| / 127):
//   err = dim / 254 x (Kmax x Qmean + Qmax x Kmean)
// Q from the tile's query rows (every query head of the group) times the softmax scale, K from
// its 64 keys. Tiles with outlier channels or large-norm rows rank last.
class ScaleRangeRouter final : public TileRouter {
 public:
  const char* name() const override { return "scale-range"; }
  void predict(const sparse::HeadInput& in, const sparse::BlockMask& mask, float* err) const override;
};

float scale_range_error(const BlockRange& q, const BlockRange& k, int head_dim);

// Reused buffers of one worker.
struct RouteScratch {
  std::vector<float> err;
  std::vector<int64_t> order;
};

// Predicts with `router` and writes the route (1: INT8, 0: float) of every tile of the mask's rows
// into `int8` (mask.bytes() bytes, zero outside the candidates). `keep`, when not null, is a
// sparse prefill mask of the same shape: only the tiles it keeps are candidates. Returns the
// candidates in *tiles and the INT8 tiles (int8_tile_count(fraction, *tiles)).
int64_t route_tiles(const TileRouter& router, const sparse::HeadInput& in, const sparse::BlockMask& mask,
                    const uint8_t* keep, double fraction, RouteScratch& scratch, uint8_t* int8, int64_t* tiles);

// Chooses the n lowest of err[idx] over the candidate indices, ties by index; sets int8[idx] = 1.
void route_lowest(const float* err, std::vector<int64_t>& candidates, int64_t n, uint8_t* int8);

std::unique_ptr<TileRouter> make_router();

}  // namespace frugal::tilemix
