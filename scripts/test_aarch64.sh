#!/usr/bin/env bash
# The aarch64 build of the CPU layers (base, memory, format, kernels, attention) and their unit
# tests, cross-compiled and run under qemu-user: every kernel's NEON and SVE paths against its
# reference on an x86 machine. SVE runs at 512 bits (qemu's default), 128 (Graviton4, Grace) and
# 256 (Graviton3); the model-level attention tests also run forced onto NEON (the matmul tests
# run every path the CPU has, NEON included).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset aarch64 >/dev/null
cmake --build --preset aarch64 -j "$(nproc)"
export QEMU_CPU=max
ctest --preset aarch64
bin=build/aarch64/tests
for bytes in 16 32; do
  echo "attention_test, the matmul's and the per-row kernels' SIMD paths, SVE at $((bytes * 8)) bits"
  QEMU_CPU="max,sve-default-vector-length=$bytes" qemu-aarch64 "$bin/attention_test" --gtest_brief=1
  QEMU_CPU="max,sve-default-vector-length=$bytes" qemu-aarch64 "$bin/matmul_test" --gtest_brief=1 \
    --gtest_filter='Matmul.SimdPathsAgreeBitForBit:Matmul.NeverReadsPastARow:Matmul.GatherEqualsTheSameRowsComputedDirectly'
  QEMU_CPU="max,sve-default-vector-length=$bytes" qemu-aarch64 "$bin/kernels_test" --gtest_brief=1 \
    --gtest_filter='Elementwise.*:VecOps.*'
done
echo "attention_test, forced onto NEON"
M3_CPU=neon qemu-aarch64 "$bin/attention_test" --gtest_brief=1
