#include "frugal/quantize/fisher_file.h"

#include <cmath>

namespace frugal::quantize {

Result<FisherFile> FisherFile::open(const std::string& path) {
  FisherFile f;
  f.path_ = path;
  FRUGAL_ASSIGN_OR_RETURN(f.file_, GgufFile::open(path));
  if (!f.file_->has("fisher.windows")) {
    return error(ErrorCode::kInvalidArgument, "{}: not a Fisher file (no fisher.windows key; write it with train/fisher.py)",
                 path);
  }
  FRUGAL_ASSIGN_OR_RETURN(f.windows_, f.file_->get_int("fisher.windows"));
  FRUGAL_ASSIGN_OR_RETURN(f.tokens_, f.file_->get_int_or("fisher.tokens", 0));
  return f;
}

Result<const float*> FisherFile::values_for(const GgufTensorInfo& weight) const {
  const GgufTensorInfo* t = file_->find_tensor(weight.name);
  if (t == nullptr) return error(ErrorCode::kNotFound, "{}: no Fisher tensor for '{}'", path_, weight.name);
  if (t->type != DType::kF32) {
    return error(ErrorCode::kInvalidArgument, "{}: Fisher tensor '{}' is {}, expected f32", path_, weight.name,
                 dtype_name(t->type));
  }
  if (t->dims != weight.dims) {
    auto dims = [](const std::vector<int64_t>& d) {
      std::string s;
      for (size_t i = 0; i < d.size(); ++i) {
        if (i > 0) s.push_back('x');
        s.append(std::to_string(d[i]));
      }
      return s;
    };
    return error(ErrorCode::kInvalidArgument, "{}: Fisher tensor '{}' has shape {}, the weight has {}", path_,
                 weight.name, dims(t->dims), dims(weight.dims));
  }
  const auto* v = reinterpret_cast<const float*>(t->data);
  const int64_t n = t->n_elements();
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(v[i]) || v[i] < 0) {
      return error(ErrorCode::kInvalidArgument, "{}: Fisher tensor '{}' has value {} at element {} (expected finite, >= 0)",
                   path_, weight.name, v[i], i);
    }
  }
  return v;
}

}  // namespace frugal::quantize
