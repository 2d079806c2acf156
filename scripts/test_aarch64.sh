#!/usr/bin/env bash
# The aarch64 build of the CPU layers (base, memory, format, kernels, attention) and their unit
# tests, cross-compiled and run under qemu-user: every kernel's NEON and SVE paths against its
# reference on an x86 machine. SVE runs at 512 bits (qemu's default), 128 (Graviton4, Grace) and
# 256 (Graviton3); the model-level attention tests also run forced onto NEON (the matmul tests
# run every path the CPU has, NEON included).
# At 128 and 256 bits only what depends on the vector length runs again: the attention kernels on
# the SVE path alone (M3_CPU=sve; the generic and NEON ones do not change), the whole attention at
# the MSA shapes, the matmul's SIMD agreement, the per-row kernels and the blocked formats' panel
# fills and direct tiles (which widen N lanes at a time). Each model-level test runs
# in a process of its own: under qemu 7.2 a test that follows one which ran thread pools ran up to
# 6x slower (its double arithmetic left qemu's fast path), which cost CI minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset aarch64 >/dev/null
cmake --build --preset aarch64 -j "$(nproc)"
export QEMU_CPU=max
ctest --preset aarch64
bin=build/aarch64/tests
model_tests="MatchesNaiveSpecAcrossShapes Bf16CacheMatchesNaiveSpecOnRoundedValues Fp8CacheMatchesNaiveSpecOnTheStoredValues
  DecodeSplitAcrossMoreThreadsThanGroupsMatchesNaiveSpec DecodeGivesThePrefillBitsOnAnyThreadCount"
for bytes in 16 32; do
  echo "attention kernels, the whole attention, the matmul's and the per-row kernels' SIMD paths, SVE at $((bytes * 8)) bits"
  export QEMU_CPU="max,sve-default-vector-length=$bytes"
  M3_CPU=sve qemu-aarch64 "$bin/attention_test" --gtest_brief=1 --gtest_filter='AttentionKernels.*'
  M3_CPU=sve qemu-aarch64 "$bin/attention_test" --gtest_brief=1 --gtest_filter='MsaAttention.MatchesNaiveSpecAcrossShapes'
  qemu-aarch64 "$bin/matmul_test" --gtest_brief=1 \
    --gtest_filter='Matmul.SimdPathsAgreeBitForBit:Matmul.NeverReadsPastARow:Matmul.GatherEqualsTheSameRowsComputedDirectly'
  qemu-aarch64 "$bin/kernels_test" --gtest_brief=1 --gtest_filter='Elementwise.*:VecOps.*'
  qemu-aarch64 "$bin/affine_format_test" --gtest_brief=1 --gtest_filter='*SimdPanelFills*:*BlockingChangesNoBit*'
  qemu-aarch64 "$bin/mxfp8_format_test" --gtest_brief=1 --gtest_filter='*SimdPanelFill*:*NanCodesAndHugeScales*'
done
export QEMU_CPU=max
echo "the whole attention, forced onto NEON"
for t in $model_tests; do
  M3_CPU=neon qemu-aarch64 "$bin/attention_test" --gtest_brief=1 --gtest_filter="MsaAttention.$t"
done
