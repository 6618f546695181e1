// The attention weights an eviction round scores tokens with (snapkv, h2o, tova, rkv): the softmax
// of each recorded query over the keys it could see when it ran (keys at positions after the query,
// or at or before query - window, get weight 0; a query that saw none gets a row of zeros).
//
// attention_probs() computes the scores in tiles of 8 queries x 4 keys whose 32 sums stay in
// registers, the queries transposed so that a tile's 8 query values of one dimension are one
// vector load: independent sums the compiler vectorizes, where the reference's per-pair dot
// product is one dependent chain of additions. Each
// score still adds its head_dim products in order from a zero start, so the two agree bit for bit
// (tests/kv/attention_probs_test.cc); the reference is the specification.
#pragma once

#include <cstdint>
#include <vector>

namespace frugal {

struct ProbsQueries {
  const float* const* rows = nullptr;  // [m]: query row j, head_dim floats
  const int32_t* pos = nullptr;        // [m]: its position
  int m = 0;
};

// probs [m][n]: row j = softmax over the keys ([n][head_dim], positions kpos) query j could see, of
// scale * (q_j . k_i). window > 0: a query at position p sees keys at positions in (p - window, p].
void attention_probs(const ProbsQueries& q, const float* keys, const int32_t* kpos, int32_t n, int head_dim,
                     float scale, int32_t window, float* probs, std::vector<float>& scratch);
void attention_probs_reference(const ProbsQueries& q, const float* keys, const int32_t* kpos, int32_t n, int head_dim,
                               float scale, int32_t window, float* probs);

}  // namespace frugal
