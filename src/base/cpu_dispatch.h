#pragma once
// The one way a kernel picks its CPU path (docs/ARCHITECTURE.md, "Kernels and CPU paths").
//
// A family of kernels is a struct of function pointers (a table). Each path the family has code
// for provides one table, of functions compiled for that path (a file-wide `#pragma GCC target`
// or target attributes on the functions; plain C++ for the generic table); a path it has no code
// for, or that the build's architecture lacks, gives nullptr. PathTables::active() is the table of the best path at or below cpu_active_path(), so
// `M3_CPU=avx2` on an AVX-512 machine runs exactly what an AVX2-only machine runs. Weight formats
// use the same rule for their matmul kernels (kernels/matmul.h, find_matmul_kernel).
#include "base/cpu_features.h"
#include "m3/error.h"

namespace m3 {

template <typename Table>
struct PathTables {
  const Table* generic = nullptr;  // required: the plain C++ path
  const Table* avx2 = nullptr;
  const Table* avx512 = nullptr;

  // The best table at or below `path`.
  const Table& at(CpuPath path) const {
    if (path >= CpuPath::Avx512 && avx512 != nullptr) return *avx512;
    if (path >= CpuPath::Avx2 && avx2 != nullptr) return *avx2;
    M3_CHECK(generic != nullptr, "a kernel family without its generic path");
    return *generic;
  }
  const Table& active() const { return at(cpu_active_path()); }
  // Which path `at(path)` runs.
  CpuPath path_of(CpuPath path) const {
    if (path >= CpuPath::Avx512 && avx512 != nullptr) return CpuPath::Avx512;
    if (path >= CpuPath::Avx2 && avx2 != nullptr) return CpuPath::Avx2;
    return CpuPath::Generic;
  }
};

}  // namespace m3
