#!/usr/bin/env bash
# Held-out loss of several training runs on one PNG (gnuplot), e.g. MSA against the dense baseline:
#   bash scripts/plot_runs.sh OUT.png runs/tiny-python runs/tiny-python-dense
# Each run's loss.eval.dat is (re)made from its log.jsonl by `m3 train --plot RUN`.
set -euo pipefail
out=$1; shift
m3=${M3:-$(dirname "$0")/../build/release/m3}
plot=""
for run in "$@"; do
  "$m3" train --plot "$run" >/dev/null 2>&1
  plot+="${plot:+, }'$run/loss.eval.dat' using 1:2 with linespoints lw 2 pt 7 title '$(basename "$run")'"
done
gnuplot <<GP
set terminal png size 800,480 font ',10'
set output '$out'
set grid
set xlabel 'step'
set ylabel 'held-out cross-entropy (nats)'
set title 'held-out loss at equal steps'
plot $plot
GP
echo "wrote $out"
