#!/usr/bin/python3
"""Accuracy of a model on a synthetic long-context task through `m3 generate` (greedy), at several
prompt lengths: each example's prompt (from `m3 task-examples`, the generator `m3 train` trains on)
is generated from and the answer must come out exactly.

  /usr/bin/python3 scripts/eval_task.py -m RUN/checkpoint-N [--task passkey] [--lengths 1024,2048]
      [--count 50] [--m3 build/release/m3] [-t THREADS]
Prints one markdown row per length: tokens, correct, accuracy.
"""
import argparse
import json
import os
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--task", default="passkey")
    ap.add_argument("--lengths", default="1024")
    ap.add_argument("--count", type=int, default=50)
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--m3", default=os.path.join(os.path.dirname(__file__), "..", "build", "release", "m3"))
    ap.add_argument("-t", "--threads", type=int, default=0)
    ap.add_argument("--cache-type", default="bf16")
    a = ap.parse_args()
    print(f"| task | prompt tokens (mean) | correct | accuracy |\n|---|---|---|---|")
    for length in [int(x) for x in a.lengths.split(",")]:
        out = subprocess.run([a.m3, "task-examples", "-m", a.model, "--task", a.task, "--tokens", str(length),
                              "--count", str(a.count), "--seed", str(a.seed + length)],
                             capture_output=True, text=True, check=True).stdout
        examples = [json.loads(l) for l in out.splitlines() if l.strip()]
        correct, tokens = 0, 0
        for ex in examples:
            r = subprocess.run([a.m3, "generate", "-m", a.model, "-p", ex["prompt"], "-n", "8", "--temp", "0",
                                "-t", str(a.threads), "--cache-type", a.cache_type, "-c", str(ex["prompt_tokens"] + 16)],
                               capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"eval_task: m3 generate failed: {r.stderr.strip()}")
            correct += r.stdout.startswith(ex["answer"])
            tokens += ex["prompt_tokens"]
        print(f"| {a.task} | {tokens / len(examples):.0f} | {correct}/{len(examples)} | "
              f"{100.0 * correct / len(examples):.0f}% |", flush=True)


if __name__ == "__main__":
    main()
