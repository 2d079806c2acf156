"""`m3 perplexity` as a user runs it: its perplexity, mean KL divergence, 99th-percentile KL and top-1
agreement equal what NumPy computes from `m3 logits` of the same chunks (the second half of each
scored); a model against itself has KL 0 and 100% agreement; bad input gets one error line."""
import math
import os
import re
import shutil
import subprocess
import sys

import numpy as np

M3 = os.environ["M3_BIN"]
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
    print(f"{'PASS' if cond else 'FAIL'} {name} {detail if not cond else ''}", flush=True)


def one_error_line(r, *words):
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    return (r.returncode == 1 and len(lines) == 1 and lines[0].startswith("m3: error: ")
            and all(w.lower() in lines[0].lower() for w in words))


def fresh(name):
    d = os.path.join(SCRATCH, name)
    shutil.rmtree(d, ignore_errors=True)
    return d


def field(out, label):
    m = re.search(rf"^{re.escape(label)}\s+([0-9.]+)", out, re.M)
    return float(m.group(1)) if m else float("nan")


def log_softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


base, quant = fresh("base"), fresh("affine4")
run("make-checkpoint", "--preset", "tiny", "--seed", "21", "--out", base)
run("quantize", "-m", base, "--out", quant, "--format", "affine4")
C, N = 96, 3
ids = np.random.default_rng(9).integers(0, 560, C * N + 17)  # a partial last chunk is not scored
ids_path = os.path.join(SCRATCH, "ids.txt")
open(ids_path, "w").write(",".join(map(str, ids)))

r = run("perplexity", "-m", quant, "--tokens-file", ids_path, "-c", str(C), "--kl-base", base)
print(r.stdout)
nll, kl, same = [], [], []
for c in range(N):
    chunk = ids[c * C:(c + 1) * C]
    lq, lp = [], []
    for model, acc in ((quant, lq), (base, lp)):
        out = os.path.join(SCRATCH, "chunk.npy")
        run("logits", "-m", model, "--tokens", ",".join(map(str, chunk)), "--out", out)
        acc.append(log_softmax(np.load(out).astype(np.float64)))
    lq, lp = lq[0], lp[0]
    for i in range(C // 2 - 1, C - 1):
        nll.append(-lq[i, chunk[i + 1]])
        kl.append(max(0.0, float((np.exp(lp[i]) * (lp[i] - lq[i])).sum())))
        same.append(float(np.argmax(lp[i]) == np.argmax(lq[i])))
ppl = math.exp(np.mean(nll))
kls = np.sort(kl)
p99 = kls[min(len(kls) - 1, math.ceil(0.99 * len(kls)) - 1)]
check("scores the second half of each whole chunk", f"{N} chunks of {C} tokens" in r.stdout
      and f"({N * C // 2} tokens)" in r.stdout, r.stdout[:200])
check("perplexity equals NumPy's from m3 logits", abs(field(r.stdout, "PPL") - ppl) <= 1e-3 * ppl,
      f"{field(r.stdout, 'PPL')} vs {ppl}")
check("mean KL equals NumPy's", abs(field(r.stdout, "mean KL") - np.mean(kl)) <= 1e-4 * np.mean(kl) + 2e-6,
      f"{field(r.stdout, 'mean KL')} vs {np.mean(kl)}")
check("KL 99th percentile equals NumPy's", abs(field(r.stdout, "KL 99th percentile") - p99) <= 1e-4 * p99 + 2e-6,
      f"{field(r.stdout, 'KL 99th percentile')} vs {p99}")
check("top-1 agreement equals NumPy's", abs(field(r.stdout, "same top token") - 100 * np.mean(same)) < 0.01,
      f"{field(r.stdout, 'same top token')} vs {100 * np.mean(same)}")
check("a quantized model differs from its base", field(r.stdout, "mean KL") > 0)

s = run("perplexity", "-m", base, "--tokens-file", ids_path, "-c", str(C), "--kl-base", base, "--chunks", "1")
check("a model against itself: KL 0, 100% agreement", field(s.stdout, "mean KL") == 0.0
      and field(s.stdout, "same top token") == 100.0 and "1 chunks" in s.stdout, s.stdout)

text = os.path.join(SCRATCH, "text.txt")
open(text, "w").write("The quick brown fox jumps over the lazy dog. " * 40)
t = run("perplexity", "-m", base, "-f", text, "-c", "64")
check("a text file is tokenized and scored", field(t.stdout, "PPL") > 1.0, t.stdout)

check("text shorter than a chunk", one_error_line(run("perplexity", "-m", base, "-f", text, "-c", "100000",
                                                      ok=False), "one chunk needs"))
check("missing text file", one_error_line(run("perplexity", "-m", base, "-f", os.path.join(SCRATCH, "none.txt"),
                                              ok=False), "none.txt"))
check("a --kl-base that is not a checkpoint", one_error_line(run("perplexity", "-m", base, "-f", text, "--kl-base",
                                                         fresh("nothing"), ok=False), "config"))

print(f"perplexity: {sum(results)} passed, {len(results) - sum(results)} failed")
sys.exit(0 if all(results) else 1)
