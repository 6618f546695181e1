// Importance matrices in llama.cpp's legacy imatrix.dat format (what llama-imatrix of build 4748
// writes and llama-quantize reads), so a file from either tool works with either quantizer.
//
// Layout, little-endian:
//   i32 n_entries
//   n_entries x { i32 name_len, name bytes, i32 ncall, i32 nval, f32 values[nval] }
//   i32 chunks, i32 dataset_len, dataset bytes        (optional trailer)
// values[j] is the sum over calls of the mean squared activation of input column j, i.e. the
// per-column sum of squares divided by the rows that contributed and multiplied by ncall; a
// reader divides by ncall to get the mean squared activation the quantizers weigh columns by.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "frugal/core/status.h"

namespace frugal::quantize {

struct ImatrixEntry {
  int32_t ncall = 0;          // matrix products that contributed
  std::vector<float> values;  // as stored (see above)
  // The mean squared activation per column: values / ncall (values as stored when ncall is 0).
  std::vector<float> mean() const;
};

struct Imatrix {
  std::map<std::string, ImatrixEntry> entries;  // by weight tensor name
  int32_t chunks = 0;    // calibration chunks (0 when the file has no trailer)
  std::string dataset;   // the calibration text's file name, as recorded
};

// Every error names the file and the entry at fault; non-finite values are refused.
Result<Imatrix> read_imatrix(const std::string& path);
// Written to a temporary file beside `path` and renamed into place.
Status write_imatrix(const std::string& path, const Imatrix& m);

}  // namespace frugal::quantize
