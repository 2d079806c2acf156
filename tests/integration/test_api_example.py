#!/usr/bin/env python3
"""examples/simple.cpp, built on the public API alone (include/m3/), gives the text `m3 generate` gives
(both greedy, same checkpoint and prompt), and a bad model folder is one error line with status 1."""
import os
import subprocess
import sys

M3 = os.environ["M3_BIN"]
SIMPLE = os.environ["M3_SIMPLE"]
SCRATCH = os.environ.get("M3_SCRATCH", "/tmp/m3_api_example")
os.makedirs(SCRATCH, exist_ok=True)
model = os.path.join(SCRATCH, "tiny")
subprocess.run([M3, "make-checkpoint", "--preset", "tiny", "--seed", "4", "--out", model], check=True,
               capture_output=True)

failures = 0


def check(name, ok, detail=""):
    global failures
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else f" ({detail})"))
    failures += not ok


prompt = "The quick brown fox jumps over the lazy dog. " * 3
cli = subprocess.run([M3, "generate", "-m", model, "-p", prompt, "-n", "16", "-t", "1"], capture_output=True)
api = subprocess.run([SIMPLE, model, prompt, "16"], capture_output=True)
check("m3-simple runs", api.returncode == 0, api.stderr.decode(errors="replace"))
check("m3 generate runs", cli.returncode == 0, cli.stderr.decode(errors="replace"))
check("the API program prints what m3 generate prints", api.stdout == cli.stdout and len(api.stdout) > 1,
      (api.stdout, cli.stdout))
check("it reports its counts on stderr", b"prompt tokens" in api.stderr and b" generated" in api.stderr, api.stderr)

bad = subprocess.run([SIMPLE, os.path.join(SCRATCH, "missing"), "hi"], capture_output=True)
err = bad.stderr.decode(errors="replace").strip()
check("a missing model folder is one error line, status 1", bad.returncode == 1 and len(err.splitlines()) == 1 and
      "not a model folder" in err, (bad.returncode, err))

print(f"api example: {5 - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
