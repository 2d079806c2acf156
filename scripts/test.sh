#!/usr/bin/env bash
# Everything CI runs: install packages, build Release and run every test (unit + integration
# against the float64 NumPy reference), then the aarch64 build of the CPU layers under qemu (NEON and
# SVE kernels against their references), then build with ASan+UBSan and run the unit tests again,
# then a short run of every fuzz harness (clang + libFuzzer; docs/FUZZING.md).
# Each stage prints its wall time, so that the CI budget (30 minutes on 2 cores) can be kept.
set -euo pipefail
cd "$(dirname "$0")/.."
stage() {
  local t0=$SECONDS
  "$@"
  echo "test.sh: stage '$*' took $(( SECONDS - t0 )) s"
}
stage bash scripts/setup.sh
stage bash scripts/build.sh release
stage ctest --preset release
stage bash scripts/test_aarch64.sh
stage bash scripts/build.sh asan
stage ctest --preset asan
stage bash scripts/fuzz.sh 10
