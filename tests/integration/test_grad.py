"""`m3 grad` as a user runs it, checked independently: on a random tiny checkpoint with MSA selection
active (block 4, top-2, 28 tokens), in the sparse stage and the dense warm-up, its losses equal the
float64 NumPy reference's (tests/reference/m3_reference.py, training_losses) and, for every tensor it
writes, the directional derivative of its gradient along a random direction agrees within 1e-2
relative with central differences of the reference's loss (CE for the backbone, the indexer KL for
the index branch), the reference holding the MSA selections and MoE top-k fixed. Bad input gets one
error line."""
import json
import os
import re
import shutil
import sys

import numpy as np

SRC = os.environ["M3_SOURCE_DIR"]
SCRATCH = os.environ["M3_SCRATCH"]
os.makedirs(SCRATCH, exist_ok=True)
sys.path.insert(0, os.path.join(SRC, "tests", "reference"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import m3_reference as R  # noqa: E402
from m3_cli import Checks, one_error_line, run  # noqa: E402

check = Checks()


def read_f32_safetensors(path):
    header, meta, start = R.read_safetensors_header(path)
    raw = open(path, "rb").read()
    out = {}
    for name, info in header.items():
        assert info["dtype"] == "F32", f"{name}: {info['dtype']}"
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(raw[start + b:start + e], dtype="<f4").reshape(info["shape"]).astype(np.float64)
    return out, meta


model = os.path.join(SCRATCH, "tiny")
shutil.rmtree(model, ignore_errors=True)
run("make-checkpoint", "--preset", "tiny", "--seed", "5", "--block-size", "4", "--topk", "2", "--layers", "3",
    "--out", model)
vocab = json.load(open(os.path.join(model, "config.json")))["text_config"]["vocab_size"]
ids = [int(t) for t in np.random.default_rng(4).integers(0, vocab, 28)]
ids_arg = ",".join(map(str, ids))

for warmup in (False, True):
    stage = "warm-up" if warmup else "sparse"
    out = os.path.join(SCRATCH, f"grad_{'warmup' if warmup else 'sparse'}.safetensors")
    r = run("grad", "-m", model, "--tokens", ids_arg, "--out", out, *(["--indexer-warmup"] if warmup else []))
    printed = {k: float(v) for k, v in re.findall(r"^(ce_loss|kl_loss) (\S+)$", r.stdout, re.M)}
    grads, meta = read_f32_safetensors(out)

    ref = R.M3Reference(model)
    ce, kl, per_layer, decisions = R.training_losses(ref, ids, warmup=warmup)
    sparse_rows = int(sum((s.sum(axis=2) < (np.arange(len(ids)) // 4 + 1)[None, :]).sum()
                          for s in decisions["selection"].values()))
    check(f"{stage}: selection is sparse for some rows", sparse_rows > 0, f"({sparse_rows} group-rows)")
    check(f"{stage}: CE equals the reference's", abs(printed["ce_loss"] - ce) <= 1e-5 * ce,
          f"(m3 {printed['ce_loss']:.9g}, reference {ce:.9g})")
    check(f"{stage}: KL equals the reference's", abs(printed["kl_loss"] - kl) <= 1e-4 * kl,
          f"(m3 {printed['kl_loss']:.9g}, reference {kl:.9g})")
    check(f"{stage}: the file's metadata has the losses", abs(float(meta["ce_loss"]) - printed["ce_loss"]) < 1e-6)
    check(f"{stage}: every parameter but the routing bias has a gradient",
          all(("e_score_correction_bias" in n) == (n not in grads) for n in
              [n for n in R.Checkpoint(model).names() if n.startswith("language_model.")]))

    rng = np.random.default_rng(11)
    worst, worst_name, compared = 0.0, "", 0
    for name, g in grads.items():
        short = name[len(R.PREFIX):]
        w0 = ref.w(short).astype(np.float64)
        scale = max(float(np.sqrt(np.mean(w0 ** 2))), 0.01)
        u = rng.standard_normal(w0.shape) * scale
        h = 1e-4
        indexer = ".index_" in name

        def loss(step):
            ref.overrides = {short: w0 + step * u}
            c, k, _, _ = R.training_losses(ref, ids, warmup=warmup, frozen=decisions)
            return k if indexer else c

        fd = (loss(h) - loss(-h)) / (2 * h)
        ref.overrides = {}
        analytic = float(np.sum(g * u))
        size = max(abs(fd), abs(analytic))
        if size < 1e-7:  # an expert no token was routed to
            continue
        rel = abs(analytic - fd) / size
        compared += 1
        if rel > worst:
            worst, worst_name = rel, name
    check(f"{stage}: directional derivatives of {compared} tensors agree within 1e-2", worst < 1e-2 and compared > 60,
          f"(worst {worst:.2e} on {worst_name})")

r = run("grad", "-m", model, "--tokens", "5", "--out", os.path.join(SCRATCH, "x.safetensors"), ok=False)
check("one token is an error", one_error_line(r, "at least 2 tokens"), r.stderr.strip())
r = run("grad", "-m", model, "--tokens", f"1,{vocab + 3}", "--out", os.path.join(SCRATCH, "x.safetensors"), ok=False)
check("an id outside the vocabulary is an error", one_error_line(r, "outside the vocabulary"), r.stderr.strip())
r = run("grad", "-m", os.path.join(SCRATCH, "missing"), "--tokens", "1,2", "--out", os.path.join(SCRATCH, "x.st"),
        ok=False)
check("a missing model is an error", one_error_line(r, "config.json"), r.stderr.strip())

sys.exit(check.exit_code())
