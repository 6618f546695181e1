// The CUDA tests' guard: every one skips, naming why, on a machine without a usable GPU (CI).
#pragma once

#include <gtest/gtest.h>

#include "frugal/backend/cuda/cuda_backend.h"

#define SKIP_WITHOUT_GPU()                                                             \
  do {                                                                                 \
    auto gpu_info_ = ::frugal::cuda::device_info();                                    \
    if (!gpu_info_.ok()) GTEST_SKIP() << "no GPU: " << gpu_info_.status().message();  \
  } while (0)
