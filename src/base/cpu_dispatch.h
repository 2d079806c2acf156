#pragma once
// The one way a kernel picks its CPU path (docs/ARCHITECTURE.md, "Kernels and CPU paths").
//
// A family of kernels is a struct of function pointers (a table). Each path the family has code
// for provides one table, of functions compiled for that path (Highway's per-target copies, a
// file-wide `#pragma GCC target`, or plain C++ for the generic table); a path it has no code for,
// or that the build's architecture lacks, gives nullptr. PathTables::active() is the table of the
// best path at or below cpu_active_path() in its chain (base/cpu_features.h), so `M3_CPU=avx2` on
// an AVX-512 machine runs exactly what an AVX2-only machine runs. Weight formats use the same rule
// for their matmul kernels (kernels/matmul.h, find_matmul_kernel).
#include "base/cpu_features.h"
#include "m3/error.h"

namespace m3 {

template <typename Table>
struct PathTables {
  const Table* generic = nullptr;  // required: the plain C++ path
  const Table* avx2 = nullptr;
  const Table* avx512 = nullptr;
  const Table* neon = nullptr;
  const Table* sve = nullptr;

  // The table of exactly `path` (nullptr when the family has none).
  const Table* of(CpuPath path) const {
    switch (path) {
      case CpuPath::Generic: return generic;
      case CpuPath::Avx2: return avx2;
      case CpuPath::Avx512: return avx512;
      case CpuPath::Neon: return neon;
      case CpuPath::Sve: return sve;
    }
    return nullptr;
  }
  // Which path `at(path)` runs: the first one down the chain from `path` with a table.
  CpuPath path_of(CpuPath path) const {
    while (path != CpuPath::Generic && of(path) == nullptr) path = cpu_path_below(path);
    return path;
  }
  // The best table at or below `path`.
  const Table& at(CpuPath path) const {
    const Table* t = of(path_of(path));
    M3_CHECK(t != nullptr, "a kernel family without its generic path");
    return *t;
  }
  const Table& active() const { return at(cpu_active_path()); }
};

}  // namespace m3
