#!/usr/bin/env python3
"""scripts/check_layers.py catches what it is there to catch: a copy of the repository's sources passes,
and each kind of violation planted in a copy fails with a line naming the file."""
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "scripts", "check_layers.py")


def run(tree):
    p = subprocess.run([sys.executable, SCRIPT, tree], capture_output=True, text=True)
    return p.returncode, p.stdout


def copy_tree(dst):
    for top in ("src", "tools", "include", os.path.join("tests", "fixtures")):
        shutil.copytree(os.path.join(ROOT, top), os.path.join(dst, top))


def plant(tree, rel, line):
    with open(os.path.join(tree, rel), "a", encoding="utf-8") as f:
        f.write("\n" + line + "\n")


failures = 0


def check(name, ok, detail=""):
    global failures
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else f" ({detail})"))
    failures += not ok


cases = [
    ("an include going up a layer", "src/kernels/norm.cpp", '#include "model/text_model.h"', "src/kernels/norm.cpp"),
    ("the server reaching into the engine", "src/server/metrics.cpp", '#include "memory/kv_cache.h"',
     "src/server/metrics.cpp"),
    ("a tool reaching into the engine", "tools/m3/cmd_generate.cpp", '#include "model/text_model.h"',
     "tools/m3/cmd_generate.cpp"),
    ("a public header including an engine header", "include/m3/session.h", '#include "runtime/sampler.h"',
     "include/m3/session.h"),
    ("a low layer using an upper layer through the API", "src/kernels/rope.cpp", '#include "m3/session.h"',
     "src/kernels/rope.cpp"),
]
with tempfile.TemporaryDirectory() as tmp:
    clean = os.path.join(tmp, "clean")
    copy_tree(clean)
    rc, out = run(clean)
    check("the repository's sources pass", rc == 0, out)
    for i, (name, rel, line, must_name) in enumerate(cases):
        tree = os.path.join(tmp, f"case{i}")
        copy_tree(tree)
        plant(tree, rel, line)
        rc, out = run(tree)
        check(name + " fails, naming the file", rc == 1 and must_name in out, out)
print(f"check_layers self-test: {len(cases) + 1 - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
