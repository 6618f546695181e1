// FluxBin weights on the GPU (quant/fluxbin.h has the format): the upload's device layout and the
// three launchers the other types get from gemv.cu's decoders: a lookup-table GEMV for up to
// kGemvMaxTokens tokens, dequantization to F16 (larger batches go through cuBLAS) and embedding
// rows.
//
// The GEMV works on quads: lane l of a warp always owns columns 4l .. 4l + 3 of every group of 128,
// so a row's signs for one lane and group are one nibble per basis. Per group, basis and token the
// block builds in shared memory the 16 sums  T[m] = sum_i (bit i of m ? u_i : -u_i)  of each
// quad's u_i = c_k[j] x_j (the paper's partial sums, 4 columns per table instead of 8: a 16-entry
// table per lane fits shared memory for every warp of the block, and lane l reads entry m of its
// own quad at m * 32 + l, so the 32 lanes never share a bank). A row then costs, per lane, group
// and token, two table reads and two multiply-adds by its row scales: no per-element multiply.
//
// Device layout, one allocation, groups padded to a multiple of 4 (zero signs, scales and salient
// values: they add nothing):
//   data:           uint32 [rows][groups / 4][32]: word l of a row's 4-group chunk holds, in byte
//                   i, lane l's nibble of basis 1 (low) and basis 2 (high) of group 4q + i, so a
//                   warp reads a row's chunk as 128 contiguous bytes;
//   scales:         __half2 [rows][groups] (r_1, r_2);
//   col_scales:     __half [2][groups * 128];
//   hybrid only:    salient_idx [groups][S], salient_scales __half [rows][groups],
//                   salient_codes [rows][groups][S / 2] (low nibble first, value scale * (code - 8)).
#pragma once

#include <cstdint>

#include "frugal/backend/backend.h"
#include "frugal/backend/cuda/common.cuh"

namespace frugal::cuda {

// Groups of 128 columns after padding to whole chunks of 4.
__host__ __device__ inline int64_t fluxbin_padded_groups(int64_t cols) { return (cols / 128 + 3) / 4 * 4; }
// Device bytes of a FluxBin weight.
uint64_t fluxbin_device_bytes(int64_t rows, int64_t cols, int salient);
// Repacks w (kFLUXBIN with its bound companions) into the device layout and copies it; `consumed`
// is told of the weight's bytes once they are on the device. cols must be a multiple of 128.
Status upload_fluxbin(const WeightTensor& w, DevWeight* dst, void** alloc, uint64_t* bytes, cudaStream_t stream,
                      HostConsumed consumed = {});

// y_i [n][rows] (+)= x [n][cols] W_i^T (+ b_i) for the set's FluxBin weights, n <= kGemvMaxTokens.
void launch_fluxbin_gemv_set(const GemvSet& set, const float* x, int n, bool accumulate, cudaStream_t s);
// set_fluxbin_gemv_shape (cuda_backend.h) picks the GEMV's block shape.
void launch_fluxbin_dequant_f16(const DevWeight& w, __half* out, cudaStream_t s);
void launch_fluxbin_get_rows(const DevWeight& w, const int32_t* ids, int n, float* y, cudaStream_t s);

}  // namespace frugal::cuda
