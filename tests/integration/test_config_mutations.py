"""Mutation fuzz over config.json values, through the real CLI on a checkpoint whose tensors are at
hand: every numeric value of a tiny vision checkpoint's config is replaced, one at a time, by
values a lying file could hold. Each run must load and compute, or exit 1 with one line on stderr
naming the problem, never crash or hang, and never try to allocate what the numbers ask for before
they are checked (num_hidden_layers: 2000000000 once spent 17 s allocating 8 GB of per-layer
tables before the mismatch was noticed, or was killed for memory; under the 4 GiB limit below it
is "out of memory", which fails the test). The timeout only detects hangs."""
import json
import os
import resource
import shutil
import subprocess
import sys

M3 = os.environ["M3_BIN"]
SCRATCH = os.environ["M3_SCRATCH"]
os.makedirs(SCRATCH, exist_ok=True)
GOOD = os.path.join(SCRATCH, "good")
HANG_SECONDS = 120


# Address space per run: a tiny checkpoint needs a few MB, so 4 GiB is generous; a table sized
# from an unchecked number (2e9 layers: 8 GB) fails to allocate instead of taking the machine.
MEMORY_LIMIT = 4 << 30


def limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run(args, limited=False):
    return subprocess.run([M3] + args, capture_output=True, text=True, timeout=HANG_SECONDS,
                          preexec_fn=limit_memory if limited else None)


def numeric_paths(value, path=()):
    """Paths to every number in the config (lists: their first element stands for the rest)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from numeric_paths(v, path + (k,))
    elif isinstance(value, list):
        if value:
            yield from numeric_paths(value[0], path + (0,))
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield path


def set_at(cfg, path, new):
    for p in path[:-1]:
        cfg = cfg[p]
    cfg[path[-1]] = new


def get_at(cfg, path):
    for p in path:
        cfg = cfg[p]
    return cfg


def main():
    r = run(["make-checkpoint", "--preset", "tiny-vl", "--seed", "5", "--out", GOOD])
    assert r.returncode == 0, r.stderr
    base = json.load(open(os.path.join(GOOD, "config.json")))
    work = os.path.join(SCRATCH, "mutated")
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(GOOD, work)
    out = os.path.join(SCRATCH, "out.npy")
    paths = list(numeric_paths(base))
    assert len(paths) > 20, paths
    mutants = []  # (description, config)
    for path in paths:
        original = get_at(base, path)
        for new in [0, -1, 2000000000, 2147483647, 9223372036854775807, original * 2 + 1, 0.5, "x", None]:
            cfg = json.loads(json.dumps(base))
            set_at(cfg, path, new)
            mutants.append((f"{'.'.join(map(str, path))} = {new!r}", cfg))
    # Every key removed once (a short file), and a huge layer count with the optional per-layer
    # lists absent, so that their defaults would be sized from it.
    for path in dict.fromkeys(p[:-1] if p[-1] == 0 else p for p in paths):
        cfg = json.loads(json.dumps(base))
        parent = get_at(cfg, path[:-1])
        del parent[path[-1]]
        mutants.append((f"{'.'.join(map(str, path))} removed", cfg))
    for layers in [2000000000, 2147483647]:
        for absent in [["moe_layer_freq"], ["sparse_attention_config"], ["moe_layer_freq", "sparse_attention_config"]]:
            cfg = json.loads(json.dumps(base))
            cfg["text_config"]["num_hidden_layers"] = layers
            for key in absent:
                cfg["text_config"].pop(key, None)
            mutants.append((f"num_hidden_layers = {layers} without {' and '.join(absent)}", cfg))
    failures, loaded, refused = [], 0, 0
    for what, cfg in mutants:
        with open(os.path.join(work, "config.json"), "w") as f:
            json.dump(cfg, f)
        try:
            r = run(["logits", "-m", work, "--tokens", "1,2,3", "--out", out], limited=True)
        except subprocess.TimeoutExpired:
            failures.append(f"{what}: no answer after {HANG_SECONDS} s")
            continue
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        if r.returncode == 0:
            loaded += 1
        elif r.returncode == 1 and len(lines) == 1 and work in lines[0] and not any(
                w in lines[0] for w in ("out of memory", "bad_alloc")):
            refused += 1  # one line naming the checkpoint's file, not an allocation that failed
        else:
            failures.append(f"{what}: exit {r.returncode}, stderr {r.stderr[-400:]!r}")
        if "Sanitizer" in r.stderr or "runtime error" in r.stderr:
            failures.append(f"{what}: sanitizer report {r.stderr[-400:]!r}")
    print(f"{len(paths)} values, {len(mutants)} mutants: {loaded} loaded, {refused} refused with one line")
    for f in failures:
        print("FAIL", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
