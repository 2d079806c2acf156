"""Malformed checkpoints through the real CLI: each case must end in exit status 1 and one line on
stderr that names the problem (never a crash, never a partial run)."""
import json
import os
import shutil
import struct
import subprocess
import sys

M3 = os.environ["M3_BIN"]
SCRATCH = os.environ["M3_SCRATCH"]
os.makedirs(SCRATCH, exist_ok=True)
GOOD = os.path.join(SCRATCH, "good")
# The same checkpoint in mlx-lm's affine layout (tests/reference/quantize_numpy.py).
GOOD_AFFINE = os.path.join(SCRATCH, "good-affine")
QUANTIZER = os.path.join(os.environ["M3_SOURCE_DIR"], "tests", "reference", "quantize_numpy.py")


def run(args):
    return subprocess.run([M3] + args, capture_output=True, text=True, timeout=300)


def read_st(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_st(path, header, data, header_len_override=None):
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    n = len(h) if header_len_override is None else header_len_override
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", n) + h + data)


def variant(name, base=GOOD):
    d = os.path.join(SCRATCH, name)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(base, d)
    return d, os.path.join(d, "model.safetensors")


def first_tensor_named(header, suffix):
    return next(k for k in header if k.endswith(suffix))


def case_truncated(d, st):
    raw = open(st, "rb").read()
    open(st, "wb").write(raw[: len(raw) - 1000])


def case_header_past_end(d, st):
    header, data = read_st(st)
    write_st(st, header, data, header_len_override=len(open(st, "rb").read()) + 10)


def case_overlap(d, st):
    header, data = read_st(st)
    names = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])
    a, b = names[1], names[2]
    size = header[b]["data_offsets"][1] - header[b]["data_offsets"][0]
    start = header[a]["data_offsets"][0]
    header[b]["data_offsets"] = [start, start + size]
    write_st(st, header, data)


def case_out_of_range(d, st):
    header, data = read_st(st)
    last = max((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][1])
    b, e = header[last]["data_offsets"]
    header[last]["data_offsets"] = [b, e + 4096]
    write_st(st, header, data)


def case_wrong_byte_size(d, st):
    header, data = read_st(st)
    k = first_tensor_named(header, "q_norm.weight")
    header[k]["shape"] = [header[k]["shape"][0] * 2]
    write_st(st, header, data)


def case_missing_tensor(d, st):
    header, data = read_st(st)
    k = first_tensor_named(header, "layers.1.self_attn.index_k_norm.weight")
    header["language_model.model.layers.1.self_attn.renamed_norm.weight"] = header.pop(k)
    write_st(st, header, data)


def case_shape_vs_config(d, st):
    header, data = read_st(st)
    k = first_tensor_named(header, "layers.0.self_attn.q_norm.weight")
    n = header[k]["shape"][0]
    header[k]["shape"] = [2, n // 2]  # same bytes, wrong shape for the config
    write_st(st, header, data)


def case_bad_config(d, st):
    cfg = json.load(open(os.path.join(d, "config.json")))
    cfg["text_config"]["num_key_value_heads"] = 3
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))


def case_bad_json_config(d, st):
    open(os.path.join(d, "config.json"), "w").write('{"text_config": {')


def case_missing_weights_file(d, st):
    os.remove(st)


def edit_quantization(d, edit):
    path = os.path.join(d, "config.json")
    cfg = json.load(open(path))
    for key in ("quantization", "quantization_config"):
        edit(cfg[key])
    json.dump(cfg, open(path, "w"))


def case_affine_bits_vs_config(d, st):
    # The config says 8-bit for a module stored 4-bit.
    edit_quantization(d, lambda q: q.update({"language_model.model.layers.1.self_attn.q_proj": {"bits": 8, "group_size": 64}}))


def case_affine_unsupported_mode(d, st):
    edit_quantization(d, lambda q: q.update({"mode": "mxfp4"}))


def case_affine_unsupported_bits(d, st):
    edit_quantization(d, lambda q: q.update({"bits": 3}))


def case_affine_scales_shape(d, st):
    header, data = read_st(st)
    k = first_tensor_named(header, "layers.1.self_attn.q_proj.scales")
    rows, groups = header[k]["shape"]
    header[k]["shape"] = [rows // 2, groups * 2]  # same bytes, another group size
    write_st(st, header, data)


# case -> words the one-line error must contain (case-insensitive)[, the checkpoint it modifies]
CASES = [
    (case_truncated, ["model.safetensors"]),
    (case_header_past_end, ["model.safetensors", "header"]),
    (case_overlap, ["model.safetensors", "overlap"]),
    (case_out_of_range, ["model.safetensors"]),
    (case_wrong_byte_size, ["model.safetensors", "q_norm.weight"]),
    (case_missing_tensor, ["missing tensor", "index_k_norm.weight"]),
    (case_shape_vs_config, ["q_norm.weight", "shape"]),
    (case_bad_config, ["config.json", "num_key_value_heads"]),
    (case_bad_json_config, ["config.json"]),
    (case_missing_weights_file, ["safetensors"]),
    (case_affine_bits_vs_config, ["q_proj.weight", "4-bit", "8-bit"], GOOD_AFFINE),
    (case_affine_unsupported_mode, ["config.json", "quantization.mode", "mxfp4"], GOOD_AFFINE),
    (case_affine_unsupported_bits, ["config.json", "quantization.bits", "3-bit"], GOOD_AFFINE),
    (case_affine_scales_shape, ["q_proj.scales", "shape"], GOOD_AFFINE),
]


def main():
    r = run(["make-checkpoint", "--preset", "tiny", "--seed", "3", "--out", GOOD])
    assert r.returncode == 0, r.stderr
    r = run(["logits", "-m", GOOD, "--tokens", "1,2,3", "--out", os.path.join(SCRATCH, "ok.npy")])
    assert r.returncode == 0, "the unmodified checkpoint must load: " + r.stderr
    q = subprocess.run([sys.executable, QUANTIZER, GOOD, GOOD_AFFINE], capture_output=True, text=True, timeout=300)
    assert q.returncode == 0, q.stderr
    r = run(["logits", "-m", GOOD_AFFINE, "--tokens", "1,2,3", "--out", os.path.join(SCRATCH, "ok.npy")])
    assert r.returncode == 0, "the unmodified affine checkpoint must load: " + r.stderr
    passed = failed = 0
    for case, words, *base in CASES:
        d, st = variant(case.__name__, *base)
        case(d, st)
        out = os.path.join(d, "out.npy")
        r = run(["logits", "-m", d, "--tokens", "1,2,3", "--out", out])
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        ok = (r.returncode == 1 and len(lines) == 1 and lines[0].startswith("m3: error: ")
              and all(w.lower() in lines[0].lower() for w in words) and not os.path.exists(out))
        print(f"{'PASS' if ok else 'FAIL'} {case.__name__}: exit {r.returncode}: {r.stderr.strip()[:300]}")
        passed += ok
        failed += not ok
    print(f"bad-checkpoints: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
