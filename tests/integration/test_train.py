"""`m3 train` as a user runs it: a recipe trains a tiny M3 (preset model, Python sources as the
corpus, MSA selection active at the training length) and the held-out loss falls; the log has every
step with its losses, gradient norms, expert loads and per-layer indexer KL and recall; loss.png is a
PNG; a checkpoint written mid-run loads in `m3 generate` and `m3 serve` as it is; a run resumed from
that checkpoint gives the uninterrupted run's loss curve and final weights bit for bit; a passkey
task run reports answer accuracy; bad recipes get one-line errors."""
import filecmp
import glob
import http.client
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.environ["M3_SOURCE_DIR"], "tests", "server"))
import server_client  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from m3_cli import M3, Checks, one_error_line, run  # noqa: E402

SCRATCH = os.environ["M3_SCRATCH"]
os.makedirs(SCRATCH, exist_ok=True)
check = Checks()


def write_recipe(name, recipe):
    path = os.path.join(SCRATCH, name + ".json")
    with open(path, "w") as f:
        json.dump(recipe, f)
    return path


def log_rows(run_dir, kind):
    rows = [json.loads(l) for l in open(os.path.join(run_dir, "log.jsonl"))]
    return [r for r in rows if r["kind"] == kind]


corpus = sorted(glob.glob("/usr/lib/python3*/json/*.py"))[:4]
base = {
    "model": {"preset": "tiny", "layers": 3, "block_size": 8, "topk": 2, "seed": 1},
    "data": {"files": corpus, "valid_fraction": 0.1},
    "seq_len": 64, "batch_size": 2, "steps": 8,
    "optimizer": {"lr": 3e-3},
    "schedule": {"warmup_steps": 2},
    "msa": {"dense_warmup_steps": 2},
    "eval": {"every": 4, "batches": 2},
    "checkpoint": {"every": 4},
    "threads": 2,
}
full = os.path.join(SCRATCH, "full")
shutil.rmtree(full, ignore_errors=True)
r = run("train", "--config", write_recipe("base", dict(base, out=full)))
train_rows, eval_rows = log_rows(full, "train"), log_rows(full, "eval")
check("the log has one row per step", [row["step"] for row in train_rows] == list(range(1, 9)))
check("the log rows carry loss, lr, gradient norms, KL per layer, expert loads",
      all(k in train_rows[-1] for k in ("loss", "lr", "grad_norm", "indexer_grad_norm", "layer_kl", "expert_load",
                                        "tokens_per_s")))
check("the dense warm-up, then the sparse stage", [row["stage"] for row in train_rows[:3]] == ["dense", "dense", "sparse"])
check("the held-out loss falls", eval_rows[-1]["val_loss"] < train_rows[0]["loss"] - 0.5,
      f"(first train loss {train_rows[0]['loss']:.3f}, last held-out {eval_rows[-1]['val_loss']:.3f})")
check("indexer recall is reported for the MSA layers",
      all(0 < v <= 1 for v in eval_rows[-1]["recall"][1:]) and eval_rows[-1]["recall"][0] == -1,
      str(eval_rows[-1]["recall"]))
png = open(os.path.join(full, "loss.png"), "rb").read(8) if os.path.exists(os.path.join(full, "loss.png")) else b""
check("loss.png is a PNG", png == b"\x89PNG\r\n\x1a\n")
check("the progress lines show loss, tokens/s and ETA", "tok/s" in r.stderr and "ETA" in r.stderr)

mid = os.path.join(full, "checkpoint-4")
g = run("generate", "-m", mid, "-p", "def loads(", "-n", "8", "--temp", "0", ok=False)
check("a mid-run checkpoint loads in m3 generate", g.returncode == 0 and "generated 8 tokens" in g.stderr,
      g.stderr.strip()[-300:])
proc, port = server_client.start_server(M3, mid, ["-t", "1"], os.path.join(SCRATCH, "serve.log"))
try:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", "/v1/completions", json.dumps({"prompt": "import json", "max_tokens": 5}),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    body = json.loads(resp.read())
    check("a mid-run checkpoint serves completions in m3 serve",
          resp.status == 200 and body["usage"]["completion_tokens"] == 5, str(body)[:200])
finally:
    proc.terminate()
    proc.wait(timeout=30)

# Resume: a copy of the run cut back to its step-4 checkpoint, continued to step 8.
resumed = os.path.join(SCRATCH, "resumed")
shutil.rmtree(resumed, ignore_errors=True)
shutil.copytree(full, resumed)
for d in ("checkpoint-8", "loss.png"):
    p = os.path.join(resumed, d)
    shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) else os.remove(p)
run("train", "--config", write_recipe("resume", dict(base, out=resumed)), "--resume",
    os.path.join(resumed, "checkpoint-4"))
a = [(row["step"], row["loss"], row["kl"], row["grad_norm"]) for row in log_rows(full, "train")]
b = [(row["step"], row["loss"], row["kl"], row["grad_norm"]) for row in log_rows(resumed, "train")]
check("the resumed run's loss curve equals the uninterrupted one bit for bit", a == b,
      f"({a[-1]} vs {b[-1]})")
check("the resumed run's final weights equal the uninterrupted run's",
      filecmp.cmp(os.path.join(full, "checkpoint-8", "model.safetensors"),
                  os.path.join(resumed, "checkpoint-8", "model.safetensors"), shallow=False))

# A synthetic task: the held-out examples' answer accuracy is logged.
task = os.path.join(SCRATCH, "task")
shutil.rmtree(task, ignore_errors=True)
run("train", "--config", write_recipe("task", dict(base, out=task, data={"task": "passkey", "eval_examples": 4},
                                                     seq_len=128, steps=2, checkpoint={"every": 0})))
ev = log_rows(task, "eval")[-1]
check("a passkey run reports held-out answer accuracy", 0.0 <= ev.get("accuracy", -1) <= 1.0, str(ev))

# Bad recipes: one line naming the problem.
bad = [
    ({"stepz": 3}, ["unknown key 'stepz'"]),
    ({"optimizer": {"lr": 1e-3, "betas": [0.9, 0.9]}}, ["unknown key 'optimizer.betas'"]),
    ({"data": {"files": [os.path.join(SCRATCH, "missing.txt")]}}, ["missing.txt", "no such file"]),
    ({"model": dict(base["model"], config={"num_attention_heads": 3})}, ["num_attention_heads"]),
    ({"steps": 0}, ["steps"]),
    ({"seq_len": "long"}, ["seq_len", "number"]),
]
empty = os.path.join(SCRATCH, "empty.txt")
open(empty, "w").close()
bad.append(({"data": {"files": [empty]}}, ["no text"]))
for i, (change, words) in enumerate(bad):
    recipe = dict(base, out=os.path.join(SCRATCH, f"bad{i}"))
    recipe.update(change)
    r = run("train", "--config", write_recipe(f"bad{i}", recipe), ok=False)
    check(f"bad recipe {change} is one error line", one_error_line(r, *words, ignore_prefix="m3 train:"), r.stderr.strip()[-300:])
r = run("train", "--config", os.path.join(SCRATCH, "nope.json"), ok=False)
check("a missing recipe file is one error line", one_error_line(r, "nope.json"), r.stderr.strip())

sys.exit(check.exit_code())
