#!/usr/bin/env bash
# Decode and prefill with the weights memory-mapped under a memory cap smaller than the checkpoint
# (docs/FORMATS.md, "Memory planning"): what a user sees when the model does not fit in RAM. The
# mapped pages are charged to the cap's cgroup, so the kernel evicts weights and every decode step
# reads back from disk what it evicted.
# Usage (root): scripts/bench_memory_cap.sh MODEL_DIR CAP_MIB [m3 bench flags...]
#   e.g. scripts/bench_memory_cap.sh models/m3-slice 2048 -p 64 -n 8 -d 0 -r 1
# Uses a cgroup v1 memory controller (/sys/fs/cgroup/memory), else cgroup v2, else systemd-run -p MemoryMax.
set -euo pipefail
cd "$(dirname "$0")/.."
model="$1"
cap_mib="$2"
shift 2
m3=./build/release/m3
bytes=$((cap_mib * 1024 * 1024))
# Start cold: drop the page cache (the checkpoint may be cached from an earlier run).
sync
echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
if [ -d /sys/fs/cgroup/memory ] && [ -w /sys/fs/cgroup/memory ]; then
  cg=/sys/fs/cgroup/memory/m3-cap-$$
  mkdir "$cg"
  trap 'rmdir "$cg" 2>/dev/null || true' EXIT
  echo "$bytes" > "$cg/memory.limit_in_bytes"
  (echo $BASHPID > "$cg/cgroup.procs" && exec "$m3" bench -m "$model" "$@")
  echo "peak usage $(($(cat "$cg/memory.max_usage_in_bytes") / 1048576)) MiB of a $cap_mib MiB cap (cgroup v1)" >&2
elif [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers; then
  cg=/sys/fs/cgroup/m3-cap-$$
  mkdir "$cg"
  trap 'rmdir "$cg" 2>/dev/null || true' EXIT
  echo "$bytes" > "$cg/memory.max"
  (echo $BASHPID > "$cg/cgroup.procs" && exec "$m3" bench -m "$model" "$@")
  echo "peak usage $(($(cat "$cg/memory.peak" 2>/dev/null || echo 0) / 1048576)) MiB of a $cap_mib MiB cap (cgroup v2)" >&2
else
  systemd-run --scope -p MemoryMax="$bytes" "$m3" bench -m "$model" "$@"
fi
