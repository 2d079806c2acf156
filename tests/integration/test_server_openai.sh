#!/usr/bin/env bash
# `m3 serve` driven by the official OpenAI Node SDK (pinned in tests/server/package.json, installed
# into $M3_SCRATCH and cached there). Two servers on free loopback ports over one tiny random
# checkpoint: "warm" (prefix cache on, no key) and "cold" (prefix cache off, --api-key), so a
# second turn on the warm one can be compared with the same request on the cold one.
# The checks themselves are in tests/server/openai_client.cjs; a few raw-HTTP ones (413) are here.
# Last line: "server-openai: N passed, M failed"; exit status non-zero on any failure.
set -uo pipefail

: "${M3_BIN:?M3_BIN must name the m3 binary}"
: "${M3_SOURCE_DIR:?M3_SOURCE_DIR must name the source tree}"
: "${M3_SCRATCH:?M3_SCRATCH must name a scratch folder}"
helpers="$M3_SOURCE_DIR/tests/server"
node_dir="$M3_SCRATCH/node"
mkdir -p "$M3_SCRATCH" "$node_dir"

passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok - $*"; }
bad() { failed=$((failed + 1)); echo "FAIL - $*"; }
finish() {
  echo "server-openai: $passed passed, $failed failed"
  [[ $failed -eq 0 ]]
  exit
}

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
}
trap cleanup EXIT

# The pinned SDK, unless this scratch folder already has exactly that version.
package=$(node -p "Object.entries(require('$helpers/package.json').dependencies).map(([n, v]) => n + '@' + v).join(' ')")
installed=$(node -p "try { 'openai@' + require('$node_dir/node_modules/openai/package.json').version } catch { '' }")
if [[ "$installed" != "$package" ]]; then
  echo "installing $package into $node_dir"
  if ! npm install --prefix "$node_dir" --no-audit --no-fund --no-save "$package" >"$M3_SCRATCH/npm.log" 2>&1; then
    cat "$M3_SCRATCH/npm.log" >&2
    bad "could not install $package from the npm registry"
    finish
  fi
fi

model="$M3_SCRATCH/tiny"
rm -rf "$model"
if ! "$M3_BIN" make-checkpoint --preset tiny --seed 1 --out "$model" >"$M3_SCRATCH/make-checkpoint.log" 2>&1; then
  cat "$M3_SCRATCH/make-checkpoint.log" >&2
  bad "make-checkpoint"
  finish
fi
key="test-key-$RANDOM$RANDOM"

# Starts a server on a free loopback port (--port 0: the kernel picks one, the server prints it;
# a few tries in case of trouble) and waits for /health. Sets $url.
start_server() {
  local name=$1
  shift
  local log="$M3_SCRATCH/$name.log" try pid port i
  url=""
  for try in 1 2 3; do
    "$M3_BIN" serve -m "$model" --host 127.0.0.1 --port 0 -t 1 --ctx 16384 "$@" >"$log" 2>&1 &
    pid=$!
    port=""
    for i in $(seq 1 200); do  # 20 s
      port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$log" 2>/dev/null | grep -o '[0-9]*$')
      [[ -n "$port" ]] && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if [[ -n "$port" ]]; then
      for i in $(seq 1 100); do
        if [[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$port/health")" == 200 ]]; then
          pids+=("$pid")
          url="http://127.0.0.1:$port"
          return 0
        fi
        sleep 0.1
      done
    fi
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    echo "server $name did not come up (try $try):" >&2
    cat "$log" >&2
  done
  return 1
}

if start_server warm --max-body-bytes 1000000 --parallel 3; then warm_url=$url; ok "warm server up at $warm_url"; else bad "warm server start"; finish; fi
if start_server cold --cache-mb 0 --api-key "$key"; then cold_url=$url; ok "cold server up at $cold_url"; else bad "cold server start"; finish; fi

M3_NODE_MODULES="$node_dir/node_modules" M3_URL="$warm_url" M3_COLD_URL="$cold_url" M3_API_KEY="$key" M3_MODEL="$model" \
  timeout 600 node "$helpers/openai_client.cjs" >"$M3_SCRATCH/node.out" 2>&1
node_rc=$?
cat "$M3_SCRATCH/node.out"
summary=$(grep -E '^node: [0-9]+ passed, [0-9]+ failed$' "$M3_SCRATCH/node.out" | tail -1)
if [[ -n "$summary" ]]; then
  passed=$((passed + $(echo "$summary" | awk '{print $2}')))
  failed=$((failed + $(echo "$summary" | awk '{print $4}')))
  [[ $node_rc -ne 0 && $(echo "$summary" | awk '{print $4}') -eq 0 ]] && bad "node exited with $node_rc"
else
  bad "node client did not finish (exit $node_rc)"
fi

# Body over --max-body-bytes: 413 with an OpenAI error body, and the server keeps serving.
head -c 1500000 /dev/zero | tr '\0' ' ' >"$M3_SCRATCH/big.json"
code=$(curl -s -o "$M3_SCRATCH/413.json" -w '%{http_code}' --max-time 30 -H 'Content-Type: application/json' \
  --data-binary @"$M3_SCRATCH/big.json" "$warm_url/v1/chat/completions")
if [[ "$code" == 413 ]] && grep -q '"error"' "$M3_SCRATCH/413.json"; then ok "413 for a body over --max-body-bytes"
else bad "413 for a large body: got HTTP $code $(head -c 300 "$M3_SCRATCH/413.json")"; fi
if [[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$warm_url/health")" == 200 ]]; then ok "serving after the 413"
else bad "/health after the 413"; fi

# Both servers are still alive (no crash along the way).
for p in "${pids[@]}"; do
  if kill -0 "$p" 2>/dev/null; then ok "server $p alive at the end"; else bad "server $p died"; cat "$M3_SCRATCH"/*.log >&2; fi
done
finish
