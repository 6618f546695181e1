// Included first by every SIMD kernel file, before any Highway header: the set of targets
// compiled into the kernels. SSSE3 is dropped to save build time (SSE4 covers the same CPUs
// from 2008 on). Highway adds its portable SCALAR (or EMU128) target as the last resort.
#pragma once

#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3)
#endif
