#!/usr/bin/env bash
# Builds the libFuzzer harnesses (the `fuzz` preset) and runs each for a time budget.
#   scripts/fuzz.sh [SECONDS_PER_HARNESS] [HARNESS...]     e.g. scripts/fuzz.sh 20   (CI)
#                                                               scripts/fuzz.sh 1800 image video
# HARNESS is a name from tests/fuzz/fuzz_<name>.cpp (default: all). Each runs on its corpus in
# build/fuzz/corpus/<name> (the seeds of tests/fuzz/corpus/<name> copied in; what a run finds is
# kept there for the next run). Exits non-zero when any harness finds a crash, sanitizer report,
# uncaught exception, slow input or out-of-memory, and prints the reproducer's path: replay it with
#   build/fuzz/tests/fuzz/fuzz_<name> PATH
# Environment: FUZZ_TIMEOUT (seconds one input may take, default 10), FUZZ_RSS_MB (default 2048).
# Harnesses run as many at once as there are cores; several invocations may also run at once on
# different harnesses (each writes only its own folders).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
harnesses=("$@")
if [ ${#harnesses[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.cpp; do
    n="$(basename "$f" .cpp)"
    harnesses+=("${n#fuzz_}")
  done
fi
timeout_s="${FUZZ_TIMEOUT:-10}"
rss_mb="${FUZZ_RSS_MB:-2048}"

start=$(date +%s)
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$(nproc)"
echo "fuzz: build took $(( $(date +%s) - start )) s"

bin=build/fuzz/tests/fuzz
# Leaks are findings too; UBSan already aborts (-fno-sanitize-recover), print its stack.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# One harness: its table row (and reproducers) go to build/fuzz/logs/<name>.row, and a file
# <name>.finding marks a finding, so that several run at once and the table prints in order.
fuzz_one() {
  local h="$1"
  local corpus="build/fuzz/corpus/$h" findings="build/fuzz/findings/$h" log="build/fuzz/logs/$h.log"
  local row="build/fuzz/logs/$h.row"
  mkdir -p "$corpus" "$findings" "$(dirname "$log")"
  rm -f "build/fuzz/logs/$h.finding" "$row"  # no stale row if this run stops early
  cp -n tests/fuzz/corpus/"$h"/* "$corpus"/ 2>/dev/null || true
  local t0 rc=0
  t0=$(date +%s)
  "$bin/fuzz_$h" "$corpus" -max_total_time="$seconds" -timeout="$timeout_s" -rss_limit_mb="$rss_mb" \
    -artifact_prefix="$findings/" -print_final_stats=1 >"$log" 2>&1 || rc=$?
  # The numbers of the table (docs/FUZZING.md): libFuzzer's final stats and its last status line.
  local execs last cov ft reproducers result="ok"
  execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+.*cov: [0-9]+' "$log" | tail -1 || true)
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")
  ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")
  reproducers=$(sed -nE 's/.*(Test unit written to|artifact_prefix.*; Test unit written to) (.*)$/\2/p' "$log" | sort -u)
  if [ "$rc" -ne 0 ] || [ -n "$reproducers" ]; then
    result="FINDING (log $log)"
    touch "build/fuzz/logs/$h.finding"
  fi
  {
    printf '%-15s %8s %12s %8s %8s  %s\n' "$h" "$(( $(date +%s) - t0 ))" "${execs:--}" "${cov:--}" "${ft:--}" "$result"
    for r in $reproducers; do echo "  reproducer: $r   (replay: $bin/fuzz_$h $r)"; done
    if [ "$result" != ok ]; then grep -m1 -E 'ERROR: |runtime error|fuzz finding|terminate called|deadly signal' "$log" | sed 's/^/  /' || true; fi
  } >"$row"
}

# As many harnesses at once as there are cores (each is one process on one core).
jobs_max="$(nproc)"
for h in "${harnesses[@]}"; do
  [ -x "$bin/fuzz_$h" ] || { echo "fuzz: no harness '$h' (tests/fuzz/fuzz_$h.cpp)"; exit 2; }
done
for h in "${harnesses[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
  fuzz_one "$h" &
done
wait
failed=()
printf '%-15s %8s %12s %8s %8s  %s\n' harness seconds executions cov features result
for h in "${harnesses[@]}"; do
  cat "build/fuzz/logs/$h.row"
  [ -e "build/fuzz/logs/$h.finding" ] && failed+=("$h")
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: findings in: ${failed[*]}"
  exit 1
fi
echo "fuzz: no findings"
