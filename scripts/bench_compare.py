#!/usr/bin/env python3
"""Two builds of m3 side by side, for a refactor that must not slow anything down.

Runs `m3 bench` (pp/tg at depths) and `m3 bench attention` with the BEFORE and AFTER binaries in
alternation, ROUNDS times each, so that drift of the machine (other load, memory bandwidth)
hits both alike; prints one markdown table per benchmark with the medians and after/before.

  scripts/bench_compare.py BEFORE_M3 AFTER_M3 -m MODEL_DIR [--rounds 3] [--depths 0,16384]
      [--cache-type f32] [--shapes m3,tiny] [--contexts 16384,65536] [--clock wall|cpu]
"""
import argparse
import json
import statistics
import subprocess
import sys


def run(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out.stdout


def model_bench(m3, a):
    cmd = [m3, "bench", "-m", a.model, "-p", str(a.p), "-n", str(a.n), "-d", a.depths, "-r", "1",
           "--cache-type", a.cache_type, "--clock", a.clock, "--json"]
    rows = {}
    for line in run(cmd).splitlines():
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            rows[(r["test"], r["depth"])] = r["tps"]
    return rows


def attention_bench(m3, a):
    """{(shape, N): {column: value}} from the markdown tables of `m3 bench attention`."""
    cmd = [m3, "bench", "attention", "--shapes", a.shapes, "--contexts", a.contexts, "-r", "1",
           "--cache-type", a.cache_type, "--clock", a.clock, "--skip-bounds",
           "--dense-max", str(min(int(c) for c in a.contexts.split(",")))]  # dense only as much as required
    rows, header, shape = {}, None, None
    for line in run(cmd).splitlines():
        if line.startswith("## "):
            shape = line[3:].split(":")[0]
            header = None
        elif line.startswith("| N |"):
            header = [c.strip() for c in line.strip("|").split("|")]
        elif header and line.startswith("| ") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if len(cells) == len(header) and cells[0].isdigit():
                rows[(shape, int(cells[0]))] = dict(zip(header, cells))
    return rows


def first_number(text):
    return float(text.split()[0].rstrip("x*"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--depths", default="0,16384")
    ap.add_argument("--cache-type", default="f32")
    ap.add_argument("--shapes", default="m3,tiny")
    ap.add_argument("--contexts", default="16384,65536")
    ap.add_argument("--clock", default="wall")
    a = ap.parse_args()

    model = {"before": [], "after": []}
    attn = {"before": [], "after": []}
    for _ in range(a.rounds):
        for side, m3 in (("before", a.before), ("after", a.after)):
            model[side].append(model_bench(m3, a))
            attn[side].append(attention_bench(m3, a))

    print(f"Whole model ({a.model}, cache {a.cache_type}, {a.clock} clock, median of {a.rounds} alternating rounds)\n")
    print("| test | depth | before t/s | after t/s | after / before |")
    print("|---|---|---|---|---|")
    # The rows every run has (an older binary has no fill rows).
    keys = set.intersection(*(set(r) for side in model.values() for r in side))
    for key in sorted(keys, key=lambda k: (k[0][:2], k[1])):
        b = statistics.median(r[key] for r in model["before"])
        f = statistics.median(r[key] for r in model["after"])
        print(f"| {key[0]} | {key[1]} | {b:.1f} | {f:.1f} | {f / b:.3f} |")

    # The chunk column's header since `-o` (bench_report); older binaries print the first name.
    cols = ["MSA chunk ms", "MSA decode ms"]
    for side in attn.values():
        for r in side:
            for row in r.values():
                if "MSA chunk ms (index + attn)" in row:
                    row["MSA chunk ms"] = row["MSA chunk ms (index + attn)"]
    print(f"\nOne attention layer (`m3 bench attention`, cache {a.cache_type}; time: lower is better)\n")
    print("| shape | N | measure | before ms | after ms | after / before |")
    print("|---|---|---|---|---|---|")
    for key in sorted(attn["before"][0]):
        for c in cols:
            b = statistics.median(first_number(r[key][c]) for r in attn["before"])
            f = statistics.median(first_number(r[key][c]) for r in attn["after"])
            print(f"| {key[0]} | {key[1]} | {c} | {b:.3f} | {f:.3f} | {f / b:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
