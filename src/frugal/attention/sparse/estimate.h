// Pieces the sparse prefill methods share (docs/long-context.md): the attention of a chunk's last
// queries estimated exactly, its vertical and slash sums, the smallest set of largest entries that
// covers a share of a total, and the conversion of chosen keys and offsets to key blocks.
#pragma once

#include <cstdint>
#include <vector>

#include "frugal/attention/sparse/prefill_sparsity.h"

namespace frugal::sparse {

// The chunk's last L queries: rows [row0, n_q) of the chunk, positions [pos0, pos0 + L).
struct LastQueries {
  int32_t L = 0;
  int32_t row0 = 0;
  int32_t pos0 = 0;
};
LastQueries last_queries(const HeadInput& in, int32_t last_q);

// Softmax probabilities of query head h's last L queries over every key: a[j * L + i] is the
// probability of key j for query i (0 for a key after the query). qt holds dim x L floats, m and l
// L floats each; a holds n_k x L floats.
void estimate_attention(const HeadInput& in, int h, const LastQueries& lq, float* qt, float* a, float* m, float* l);

// Column sums vert[j] = sum_i a_ij and diagonal sums slash[o] = sum_i a_{i, p_i - o}, both over
// keys j >= first_key only and both multiplied by `scale` (n_k entries each).
void vertical_slash_sums(const float* a, int32_t n_k, const LastQueries& lq, int32_t first_key, float scale,
                         float* vert, float* slash);

// Marks with flag[idx] the fewest entries of v[cand[0..n)] whose sum reaches target, largest first
// (ties to the lower index); every candidate when their sum falls short. Reorders cand. Returns the
// count marked.
int32_t cover(const float* v, int32_t* cand, int32_t n, double target, uint8_t* flag);

// Adds the key blocks a selected key (vsel[j]) or offset (ssel[o]) crosses: vblock[j / 64] for a key,
// and for offset o the block diagonals o / 64 and, unless o is a multiple of 64, o / 64 + 1
// (dblock[d]: key block qb - d of query block qb). vblock and dblock hold n_blocks + 1 bytes.
void mark_vertical_slash(const uint8_t* vsel, const uint8_t* ssel, int32_t n_k, uint8_t* vblock, uint8_t* dblock);

// Sets the mask bits of the causal blocks that vblock or dblock select.
void apply_vertical_slash(const BlockMask& mask, int32_t n_blocks, const uint8_t* vblock, const uint8_t* dblock);

// Mean key of each key block (n_blocks x dim; the last block may be partial).
void key_block_means(const HeadInput& in, float* kbar);

// Mean query of query head h over the chunk's queries in each row of the mask (n_qb x dim; the
// first and last rows may hold fewer than 64 of the chunk's queries), multiplied by in.scale.
void query_block_means(const HeadInput& in, int h, const BlockMask& mask, float* qbar);

}  // namespace frugal::sparse
