#pragma once
// What the Highway source files (attention/attention_*_simd.cpp, kernels/elementwise_simd.cpp,
// kernels/matmul_simd.cpp, kernels/matmul_blocked_simd.cpp, kernels/vec_ops_simd.cpp) share: the
// targets they compile and the one way their HWY_ONCE part hands a CpuPath its target's table.
// Include it first in such a file, before HWY_TARGET_INCLUDE and hwy/foreach_target.h.
//
// The targets: those with a CpuPath (SSE4 and the SVE2 variants would only add build time). A file
// that compiles fewer defines HWY_DISABLED_TARGETS itself before including this.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4 | HWY_SVE2 | HWY_SVE2_128 | HWY_SVE_256)
#endif
#include <hwy/detect_targets.h>

#include "base/cpu_dispatch.h"

// &N_<TARGET>::name where this build compiles the target, else nullptr.
#if HWY_TARGETS & HWY_AVX2
#define M3_HWY_TABLE_AVX2(name) (&N_AVX2::name)
#else
#define M3_HWY_TABLE_AVX2(name) nullptr
#endif
#if HWY_TARGETS & HWY_AVX3
#define M3_HWY_TABLE_AVX3(name) (&N_AVX3::name)
#else
#define M3_HWY_TABLE_AVX3(name) nullptr
#endif
#if HWY_TARGETS & HWY_NEON
#define M3_HWY_TABLE_NEON(name) (&N_NEON::name)
#else
#define M3_HWY_TABLE_NEON(name) nullptr
#endif
#if HWY_TARGETS & HWY_SVE
#define M3_HWY_TABLE_SVE(name) (&N_SVE::name)
#else
#define M3_HWY_TABLE_SVE(name) nullptr
#endif

// The table `name` (of type Type) that `path`'s Highway copy of this file defines, or nullptr
// (the generic path, or a target not compiled). Expanded where the copies' namespaces are visible.
#define M3_HWY_TABLE_OF(Type, name, path)                                                                  \
  (::m3::PathTables<Type>{nullptr, M3_HWY_TABLE_AVX2(name), M3_HWY_TABLE_AVX3(name), M3_HWY_TABLE_NEON(name), \
                          M3_HWY_TABLE_SVE(name)}                                                          \
       .of(path))
