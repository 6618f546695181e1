// TileMix: mixed-precision prefill attention. The score matrix of a prefill chunk is cut into the
// same 64 x 64 tiles as sparse prefill (a block of queries by position against a block of key
// slots, per KV head with all of its query heads), and each tile's Q·Kᵀ is computed either in
// float or from int8 codes (int8_tile.h); both kinds of tile feed the same online softmax, and
// P·V stays float. A routing rule (router.h) predicts each tile's INT8 error and sends the
// round(F x tiles) tiles with the smallest prediction to INT8, F being --tilemix-int8.
//
// F = 0 is the float kernel unchanged (TileMix is off); F = 1 is uniform INT8 scores. Runs of
// fewer than 64 tokens (decode, verification) stay float, and so does a chunk whose keys are not
// exactly positions [0, last query] in slot order (evicted or windowed caches) or whose sequence
// has fewer keys than min_blocks tiles: those are counted as float fallbacks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "frugal/core/status.h"

namespace frugal::tilemix {

struct TileMixOptions {
  // The fraction of a chunk's tiles whose scores are computed in INT8, in [0, 1].
  double int8_fraction = 0;
  // A chunk whose sequence has fewer keys than this many 64-key tiles runs float.
  int32_t min_blocks = 4;
  bool enabled() const { return int8_fraction > 0; }
};

// What TileMix did, summed over attention calls (one per layer and prefill chunk).
struct TileMixStats {
  int64_t routed_calls = 0;  // (layer, chunk) pairs attended through a routing
  int64_t float_calls = 0;   // prefill pairs that fell back to float (too short, evicted/windowed keys)
  int64_t tiles_int8 = 0;    // (query block, key block, KV head) tiles computed in INT8
  int64_t tiles_total = 0;   // the tiles the routed calls computed
  double route_ms = 0;       // keys read back and quantized, tiles ranked (wall time)
  double int8_share() const { return tiles_total > 0 ? static_cast<double>(tiles_int8) / tiles_total : 0.0; }
};

// Option names as the CLI spells them (without "--"): tilemix-int8, tilemix-min-blocks.
std::vector<std::string> option_names();
bool is_option(const std::string& name);
// Sets one option from its text; `label` names it in messages ("--tilemix-int8: ...").
Status set_option(TileMixOptions& o, const std::string& name, const std::string& value, const std::string& label);

// Tiles a routing sends to INT8 out of n: round(fraction x n), halves rounded up.
int64_t int8_tile_count(double fraction, int64_t n);

}  // namespace frugal::tilemix
