#!/usr/bin/env python3
"""Checks that the source folders form layers that only look down (docs/ARCHITECTURE.md, "Layers").

Every `#include "folder/..."` of a file under src/, tools/ or tests/fixtures/ is an edge from the file's folder to
that folder. The check fails (exit 1, one line per problem) when
  * an edge goes to a folder of a higher layer than the file's own, or to a folder not in LAYERS;
  * the folder graph has a cycle (implied by the first rule, reported on its own for clarity).
Usage: scripts/check_layers.py [repo root]   (CI runs it as the ctest `check_layers`)
"""
import os
import re
import sys

# Lowest first. A folder may include its own files and folders of a strictly lower layer; folders on
# one line are one layer and do not include each other.
LAYERS = [
    ["base"],
    ["format"],  # weight formats: descriptors, LinearWeight, the registry
    ["io", "kernels", "tokenizer", "memory"],
    ["attention", "chat"],
    ["model", "vision"],
    ["runtime", "fixtures"],  # fixtures: tests/fixtures (random checkpoints), linked by tools and tests
    ["server"],
    ["m3"],  # tools/m3, the command line
]

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(folder):
    for i, names in enumerate(LAYERS):
        if folder in names:
            return i
    return None


def source_files(root):
    """(path, folder) of every C++ file of src/<folder>/, tools/<folder>/ and tests/fixtures/."""
    for top in ("src", "tools", os.path.join("tests", "fixtures")):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if f.endswith((".h", ".cpp")):
                    path = os.path.join(dirpath, f)
                    rel = os.path.relpath(path, root).split(os.sep)
                    yield path, (rel[1] if rel[0] != "tests" else "fixtures")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    root = os.path.abspath(root)
    problems = []
    edges = {}
    for path, folder in sorted(source_files(root)):
        rel = os.path.relpath(path, root)
        own = layer_of(folder)
        if own is None:
            problems.append(f"{rel}: folder '{folder}' is in no layer of scripts/check_layers.py")
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for inc in INCLUDE.findall(text):
            if "/" not in inc:
                continue  # same-folder or system-style header
            target = inc.split("/")[0]
            if target == folder or target == "m3":  # own folder; include/m3 is the public API
                continue
            t = layer_of(target)
            if t is None:
                continue  # not one of ours (e.g. a library's "oneapi/..." header)
            edges.setdefault(folder, set()).add(target)
            if t >= own:
                problems.append(f"{rel}: includes \"{inc}\": {target} is not below {folder} (layer {t} >= {own})")

    # Cycles in the folder graph (depth-first search with colours).
    colour = {}
    stack = []

    def visit(n):
        colour[n] = 1
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if colour.get(m) == 1:
                cycle = stack[stack.index(m):] + [m]
                problems.append("include cycle: " + " -> ".join(cycle))
            elif colour.get(m) is None:
                visit(m)
        stack.pop()
        colour[n] = 2

    for n in sorted(edges):
        if colour.get(n) is None:
            visit(n)

    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} problem(s)")
        return 1
    print(f"check_layers: {sum(len(v) for v in edges.values())} folder edges, all downward, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
