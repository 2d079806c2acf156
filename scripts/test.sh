#!/usr/bin/env bash
# Everything CI runs: install packages, build Release and run every test (unit + integration
# against the float64 NumPy reference), then the aarch64 build of the CPU layers under qemu (NEON and
# SVE kernels against their references), then build with ASan+UBSan and run the unit tests again,
# then a short run of every fuzz harness (clang + libFuzzer; docs/FUZZING.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release
ctest --preset release
bash scripts/test_aarch64.sh
bash scripts/build.sh asan
ctest --preset asan
bash scripts/fuzz.sh 10
