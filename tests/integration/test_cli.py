"""The `m3` command as a user types it: generate (deterministic, stats line, sampling flags),
sharded checkpoints, inspect on the real M3 config, tokenize with and without special tokens, and
bad flags or inputs ending in one clear error line."""
import os
import platform
import subprocess
import sys

import numpy as np

M3 = os.environ["M3_BIN"]
SRC = os.environ["M3_SOURCE_DIR"]
SCRATCH = os.environ["M3_SCRATCH"]
os.makedirs(SCRATCH, exist_ok=True)
results = []


def run(*args, ok=True):
    r = subprocess.run([M3] + list(args), capture_output=True, text=True, timeout=600)
    if ok and r.returncode != 0:
        raise AssertionError(f"m3 {' '.join(args)} failed: {r.stderr}")
    return r


def check(name, cond, detail=""):
    results.append(bool(cond))
    print(f"{'PASS' if cond else 'FAIL'} {name} {detail if not cond else ''}")


def one_error_line(r, *words):
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    return (r.returncode == 1 and len(lines) == 1 and lines[0].startswith("m3: error: ")
            and all(w.lower() in lines[0].lower() for w in words))


tiny = os.path.join(SCRATCH, "tiny")
run("make-checkpoint", "--preset", "tiny", "--seed", "5", "--out", tiny)

# generate: greedy twice gives the same text; seeded sampling twice gives the same text.
prompt = "The quick brown fox jumps over the lazy dog. " * 20
g1 = run("generate", "-m", tiny, "-p", prompt, "-n", "12", "--ignore-eos", "--temp", "0")
g2 = run("generate", "-m", tiny, "-p", prompt, "-n", "12", "--ignore-eos", "--temp", "0", "-t", "1")
check("greedy is deterministic across thread counts", g1.stdout == g2.stdout and len(g1.stdout.strip()) > 0, g1.stdout + "|" + g2.stdout)
check("stats line reports prefill and decode speed", "prefill" in g1.stderr and "decode" in g1.stderr and "tok/s" in g1.stderr, g1.stderr)
s1 = run("generate", "-m", tiny, "-p", prompt, "-n", "12", "--temp", "0.9", "--top-k", "40", "--top-p", "0.9",
         "--min-p", "0.01", "--repeat-penalty", "1.1", "--seed", "3", "--ignore-eos")
s2 = run("generate", "-m", tiny, "-p", prompt, "-n", "12", "--temp", "0.9", "--top-k", "40", "--top-p", "0.9",
         "--min-p", "0.01", "--repeat-penalty", "1.1", "--seed", "3", "--ignore-eos")
check("seeded sampling is reproducible", s1.stdout == s2.stdout, s1.stdout + "|" + s2.stdout)

# A sharded checkpoint loads through model.safetensors.index.json and gives the same logits.
sharded = os.path.join(SCRATCH, "tiny-sharded")
run("make-checkpoint", "--preset", "tiny", "--seed", "5", "--out", sharded, "--shard-mb", "0.5")
shards = [f for f in os.listdir(sharded) if f.endswith(".safetensors")]
check("sharded checkpoint has several shards and an index", len(shards) > 2 and os.path.exists(os.path.join(sharded, "model.safetensors.index.json")), shards)
a, b = os.path.join(SCRATCH, "a.npy"), os.path.join(SCRATCH, "b.npy")
run("logits", "-m", tiny, "--text", prompt, "--out", a)
run("logits", "-m", sharded, "--text", prompt, "--out", b)
check("sharded logits equal single-file logits", np.array_equal(np.load(a), np.load(b)))

# inspect on the real config gives the release's parameter count.
r = run("inspect", os.path.join(SRC, "configs/MiniMax-M3/config.json"))
check("inspect counts 427,040,140,160 parameters", "427,040,140,160" in r.stdout, r.stdout[:400])
check("inspect reports active parameters", "active" in r.stdout)

# tokenize: special-token text in user input stays plain unless --special is given.
eot = run("tokenize", "-m", tiny, "--text", "]~b]", "--special").stdout.strip()
plain = run("tokenize", "-m", tiny, "--text", "]~b]").stdout.strip()
check("special token only with --special", "," not in eot and plain != eot and eot not in plain.split(","), f"{eot} vs {plain}")
text = "héllo wörld 🙂 ]<]minimax[>[<tool_call>"
ids = run("tokenize", "-m", tiny, "--text", text).stdout.strip()
back = run("tokenize", "-m", tiny, "--decode", "--text", ids).stdout
check("tokenize round trip", back.rstrip("\n") == text, repr(back))
# Several --file: one line of ids per file, in order, the same as one run per file (an empty file
# gives an empty line); --decode takes one file.
files = []
for k, t in enumerate([text, "", "second file\n]~b]"]):
    files.append(os.path.join(SCRATCH, f"tok{k}.txt"))
    with open(files[-1], "w", encoding="utf-8") as fh:
        fh.write(t)
each = [run("tokenize", "-m", tiny, "--file", f, "--special").stdout for f in files]
both = run("tokenize", "-m", tiny, "--file", files[0], "--file", files[1], "--file", files[2], "--special").stdout
check("tokenize several files: one line each, as separate runs", both == "".join(each) and both.count("\n") == 3,
      f"{both!r} vs {each!r}")
r = run("tokenize", "-m", tiny, "--decode", "--file", files[0], "--file", files[1], ok=False)
check("tokenize --decode with two files is one error line", one_error_line(r, "--decode", "one --file"), r.stderr)

# bench: one pp and one tg line per depth, in the order given; a smaller depth after a larger one
# cuts the shared cache back (every depth is a prefix of the same fill text). A depth the cache grows
# to has a fill row first: the tokens prefilled to reach it (from the previous depth), timed.
import json  # noqa: E402
b = run("bench", "-m", tiny, "-p", "16", "-n", "4", "-d", "0,96,40", "-r", "1", "--json")
rows = [json.loads(l) for l in b.stdout.splitlines() if l.startswith("{")]
check("bench --json gives pp and tg per depth, and the fill to a deeper one",
      [(r["test"], r["depth"]) for r in rows]
      == [("pp16", 0), ("tg4", 0), ("fill96", 96), ("pp16", 96), ("tg4", 96), ("pp16", 40), ("tg4", 40)]
      and all(r["tps"] > 0 and r["gflops"] > 0 for r in rows), b.stdout)
deeper = [json.loads(l) for l in run("bench", "-m", tiny, "-p", "8", "-n", "2", "-d", "32,80", "-r", "1", "--skip-bounds",
                                     "--json").stdout.splitlines() if l.startswith("{")]
check("bench: a fill from the previous depth counts only the tokens it prefilled",
      [(r["test"], r["depth"]) for r in deeper] == [("fill32", 32), ("pp8", 32), ("tg2", 32), ("fill48", 80), ("pp8", 80),
                                                    ("tg2", 80)], json.dumps(deeper)[:600])
# -o md|csv|json|jsonl on every bench subcommand (llama-bench's convention); each names the CPU path
# its kernels ran on and, unless skipped, the bounds it measured.
doc = json.loads(run("bench", "-m", tiny, "-p", "16", "-n", "4", "-d", "0", "-r", "1", "-o", "json").stdout)
check("bench -o json: one document with the run's CPU path, bounds and rows",
      doc["run"]["cpu_path"] in ("avx512", "avx2", "neon", "sve", "generic") and doc["run"]["fma_peak_gflops"] > 0
      and doc["run"]["read_bandwidth_gbs"] > 0 and [r["test"] for r in doc["tables"][0]["rows"]] == ["pp16", "tg4"],
      json.dumps(doc)[:400])
# ... each row read against the bounds: pp in GFLOP/s of the FMA peak, tg also in bytes read per
# second of the bandwidth measured beside its runs; a decode step reads at most every tensor of the
# checkpoint once (plus its few cache bytes at depth 0), and more than lm_head alone.
pp, tg = doc["tables"][0]["rows"]
tg_bytes_per_token = tg["gbs"] * 1e9 / tg["tps"]
tiny_bytes = os.path.getsize(os.path.join(tiny, "model.safetensors"))
check("bench: pp and tg rows in GFLOP/s and % of the FMA peak, tg in GB/s and % of the bandwidth beside it",
      pp["gflops"] > 0 and 0 < pp["fma_peak_pct"] and pp["gbs"] == "–" and pp["bandwidth_gbs"] == "–"
      and tg["gflops"] > 0 and tg["bandwidth_gbs"] > 0
      and abs(tg["bandwidth_pct"] - 100 * tg["gbs"] / tg["bandwidth_gbs"]) <= 1
      and 0.05 * tiny_bytes < tg_bytes_per_token < 1.01 * tiny_bytes,
      json.dumps(doc["tables"][0])[:600])
# Several models side by side (llama-bench's -m A -m B): each model's pp and tg rows per depth, in
# the order given, each read against the first model's speed at the same test and depth.
two = json.loads(run("bench", "-m", tiny, "-m", tiny, "-p", "8", "-n", "2", "-d", "0,32", "-r", "2", "--skip-bounds",
                     "-o", "json").stdout)["tables"][0]["rows"]
pairs = [(2, 0), (3, 1), (7, 4), (8, 5), (9, 6)]  # (second model's row, the first model's at the same test and depth)
check("bench with two -m: rows per depth and model, × the first model's speed",
      [(r["depth"], r["test"]) for r in two] == [(0, "pp8"), (0, "tg2"), (0, "pp8"), (0, "tg2"),
                                                   (32, "fill32"), (32, "pp8"), (32, "tg2"), (32, "fill32"), (32, "pp8"),
                                                   (32, "tg2")]
      and all(r["model"] == tiny for r in two) and all(two[i]["vs_first"] == 1 for i in (0, 1, 4, 5, 6))
      and all(abs(two[i]["vs_first"] - two[i]["tps"] / two[j]["tps"]) < 0.01 * two[i]["vs_first"] + 0.006
              for i, j in pairs), json.dumps(two)[:600])
# The default thread count follows the CPUs the process may use (taskset, a container's cpuset).
if platform.system() == "Linux" and os.path.exists("/usr/bin/taskset"):
    pinned = subprocess.run(["taskset", "-c", str(min(os.sched_getaffinity(0))), M3, "bench", "-m", tiny, "-p", "8", "-n",
                             "2", "-d", "0", "-r", "1", "--skip-bounds", "-o", "json"], capture_output=True, text=True)
    check("bench under taskset -c CPU runs one thread", pinned.returncode == 0
          and json.loads(pinned.stdout)["run"]["threads"] == 1, pinned.stdout[:300] + pinned.stderr[:300])
ac = run("bench", "attention", "--shapes", "tiny", "--contexts", "256", "-r", "1", "--skip-bounds", "-o", "csv").stdout
ac_lines = [l for l in ac.splitlines() if l and not l.startswith("#")]
check("bench attention -o csv: facts as comments, one header and one row per depth",
      any(l.startswith("# attention_kernels,") for l in ac.splitlines()) and ac_lines[0].startswith("n,msa_chunk_ms,")
      and len(ac_lines) == 2 and ac_lines[1].startswith("256,"), ac)
# --head-dims: the shape again at each head size (attention and index), one table each.
hd = json.loads(run("bench", "attention", "--shapes", "tiny", "--head-dims", "80,33", "--contexts", "256", "-r", "1",
                    "--skip-bounds", "-o", "json").stdout)
check("bench attention --head-dims: one table per head size, named in its title",
      [("head_dim 80, index 2x80" in t["title"], "head_dim 33, index 2x33" in t["title"]) for t in hd["tables"]]
      == [(True, False), (False, True)] and all(t["rows"][0]["sparse_attn_gflops"] > 0 for t in hd["tables"]),
      json.dumps(hd)[:600])
# --kernels: a dense softmax step's kernels alone, per CPU path this machine runs (the plain
# reference first), with each shape's call as the walk makes it: the tiny preset's 8 pages of 16
# keys in one paged call, 32 query heads; M3's one block of 128, 32 heads (2 rows of 16).
kj = json.loads(run("bench", "attention", "--kernels", "--shapes", "tiny,m3", "--head-dims", "32", "-r", "1",
                    "--skip-bounds", "-o", "json").stdout)
simd_paths = {"x86_64": {"avx2"}, "aarch64": {"neon"}}.get(platform.machine(), set())
check("bench attention --kernels: the step's q·k, softmax and P·V per path, each timed, shapes as the walk calls them",
      len(kj["tables"]) == 2 and "32 query heads x 128 keys (8 pages of 16) x 32 dims" in kj["tables"][0]["title"]
      and "32 query heads x 128 keys (1 page of 128) x 32 dims" in kj["tables"][1]["title"]
      and all([r["path"] for r in t["rows"]][0] == "generic" and simd_paths <= {r["path"] for r in t["rows"]}
              and all(r[c] > 0 for r in t["rows"] for c in ("qk_gflops", "softmax_ns", "pv_gflops", "step_gflops"))
              and all(r["step_of_peak"] == "–" for r in t["rows"]) for t in kj["tables"]), json.dumps(kj)[:800])
bad_hd = run("bench", "attention", "--head-dims", "0", ok=False)
check("bench attention --head-dims rejects a zero size", bad_hd.returncode != 0 and "--head-dims" in bad_hd.stderr,
      bad_hd.stderr)
mj = [json.loads(l) for l in run("bench", "matmul", "-m", "1,4", "-s", "64x96", "-r", "1", "--bandwidth-mib", "8",
                                 "--stream-mib", "0", "-o", "jsonl").stdout.splitlines()]
check("bench matmul -o jsonl: one object per row, with the kernels' path",
      [r["m"] for r in mj] == [1, 4] and all(r["matmul_kernels"] and r["gflops"] > 0 for r in mj), str(mj)[:400])
ms = [json.loads(l) for l in run("bench", "matmul", "-m", "1", "-s", "64x96", "-r", "1", "--stream-mib", "0",
                                 "--skip-bounds", "-o", "jsonl").stdout.splitlines()]
check("bench matmul --skip-bounds: the rows without a bound, and no bandwidth or peak in the facts",
      len(ms) == 1 and ms[0]["gflops"] > 0 and ms[0]["of_bound"] == "–"
      and not ms[0].get("read_bandwidth_gbs") and not ms[0].get("fma_peak_gflops"), str(ms)[:400])
fj = json.loads(run("bench", "matmul", "--weights", "affine4-g32", "--kernels", "-m", "1", "-s", "12x128", "-r", "1",
                    "--stream-mib", "0", "--skip-bounds", "-o", "json").stdout)
fills = [r["fill"] for r in fj["tables"][0]["rows"]]
decode = [r["kernel"] for r in fj["tables"][1]["rows"]]
# Every x86 machine this runs on has AVX2 (hand-written kernels and their Highway copy); Arm has NEON.
simd_fills, simd_decode = {
    "x86_64": ({"avx2", "avx2 (Highway)"}, {"avx2 panel path", "avx2 direct", "avx2 direct (Highway)"}),
    "aarch64": ({"neon (Highway)"}, {"neon panel path", "neon direct (Highway)"}),
}.get(platform.machine(), (set(), set()))
check("bench matmul --kernels: the blocked format's panel fills, the scalar code first, each timed",
      "Panel fills of affine4-g32" in fj["tables"][0]["title"] and fills[0] == "scalar" and simd_fills <= set(fills)
      and all(r["ns_per_32"] > 0 for r in fj["tables"][0]["rows"]), json.dumps(fj)[:600])
check("bench matmul --kernels: the decode kernels at M = 1, each path's panel path and direct tiles, each timed",
      "Decode kernels of affine4-g32" in fj["tables"][1]["title"] and simd_decode <= set(decode)
      and all(r["ns_per_32"] > 0 and r["gflops"] > 0 for r in fj["tables"][1]["rows"])
      and fj["tables"][2]["rows"][0]["gflops"] > 0, json.dumps(fj)[:800])
# MXFP8: every widening of the x86 direct tiles, the one this CPU runs marked and named in the facts.
xj = json.loads(run("bench", "matmul", "--weights", "mxfp8", "--kernels", "-m", "1", "-s", "12x128", "-r", "1",
                    "--stream-mib", "0", "--skip-bounds", "-o", "json").stdout)
xdecode = [r["kernel"] for r in xj["tables"][1]["rows"]]
widening = xj["run"]["mxfp8_widening"]
if platform.machine() == "x86_64":
    other = "f32" if widening == "f16" else "f16"
    check("bench matmul --kernels, mxfp8: both widenings timed on each path, this CPU's marked as the facts name it",
          widening in ("f16", "f32")
          and all(f"{p} direct ({widening} widening, this CPU's)" in xdecode and f"{p} direct ({other} widening)" in xdecode
                  for p in {"avx2", xj["run"]["cpu_path"]} & {"avx2", "avx512"})
          and all(r["ns_per_32"] > 0 for r in xj["tables"][1]["rows"]), json.dumps(xj)[:800])
    # M3_MXFP8_WIDENING forces the other one; an unknown name is a warning and changes nothing.
    def widening_with(value):
        r = subprocess.run([M3, "bench", "matmul", "--weights", "mxfp8", "-m", "1", "-s", "12x128", "-r", "1",
                            "--stream-mib", "0", "--skip-bounds", "-o", "json"], capture_output=True, text=True,
                           timeout=600, env=dict(os.environ, M3_MXFP8_WIDENING=value))
        return json.loads(r.stdout)["run"]["mxfp8_widening"], r.stderr
    forced, forced_err = widening_with(other)
    kept, bogus_err = widening_with("f64")
    check("M3_MXFP8_WIDENING forces a widening; an unknown one is a warning naming the choices",
          forced == other and kept == widening and "M3_MXFP8_WIDENING=f64" in bogus_err and "f16, f32" in bogus_err,
          f"{forced} {kept} {forced_err} {bogus_err}")
else:
    check("bench matmul --kernels, mxfp8: the facts name the widening", widening in ("f16", "tables"), widening)
bad_f = run("bench", "matmul", "--fills", "-s", "64x64", "-m", "1", "-r", "1", "--skip-bounds", ok=False)
check("bench matmul --kernels (or --fills) on a dense format is one error line",
      bad_f.returncode != 0 and "--kernels" in bad_f.stderr, bad_f.stderr)
bad_o = run("bench", "matmul", "-o", "xml", ok=False)
check("bench -o rejects an unknown format", bad_o.returncode != 0 and "xml" in bad_o.stderr, bad_o.stderr)
bj = run("bench", "json", "-m", tiny, "-r", "1", ok=False)
check("bench json: the sample answer's tokens stay allowed under the JSON mask",
      bj.returncode == 0 and "allowed tokens" in bj.stdout, bj.stdout + bj.stderr)
check("presence/frequency penalties are sampling flags",
      run("generate", "-m", tiny, "-p", "x", "-n", "4", "--presence-penalty", "1.5", "--frequency-penalty", "-0.5").returncode == 0)
check("a penalty out of range is one error line",
      one_error_line(run("generate", "-m", tiny, "-p", "x", "--presence-penalty", "3", ok=False), "presence_penalty"))

# Bad input: one line, exit 1.
check("bad sampling flag", one_error_line(run("generate", "-m", tiny, "-p", "x", "--top-p", "0", ok=False), "top_p"))
check("token outside the vocabulary", one_error_line(run("logits", "-m", tiny, "--tokens", "1,99999", "--out", a, ok=False), "99999", "vocabulary"))
check("missing model folder", one_error_line(run("generate", "-m", os.path.join(SCRATCH, "nope"), "-p", "x", ok=False), "nope"))
check("malformed token list", one_error_line(run("logits", "-m", tiny, "--tokens", "1,x,3", "--out", a, ok=False), "--tokens"))

failed = results.count(False)
print(f"cli: {len(results) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
