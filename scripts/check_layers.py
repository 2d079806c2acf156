#!/usr/bin/env python3
"""Checks that the source folders form layers that only look down, and that the front ends use only
the public API (docs/ARCHITECTURE.md, "Layers" and "The public API").

Every `#include "folder/..."` of a file under src/, tools/ or tests/fixtures/ is an edge from the file's folder to
that folder. The check fails (exit 1, one line per problem) when
  * an edge goes to a folder of a higher layer than the file's own, or to a folder not in LAYERS;
  * the folder graph has a cycle (implied by the first rule, reported on its own for clarity);
  * a public header (include/m3/) includes anything but other public headers: the API is self-contained;
  * a front end (src/server/, tools/m3/) includes an engine header (anything but include/m3/, its own
    folder and, for tools/m3/, the server it starts), unless the file is in BELOW_THE_API with its reason.
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
    ["runtime", "fixtures", "train"],  # fixtures: tests/fixtures (random checkpoints), linked by tools and tests;
    # train: backward passes, losses, optimizer beside the inference layers they reuse
    ["server"],
    ["m3"],  # tools/m3, the command line
]

# Each public header belongs to the layer of the folder that implements it: a folder of src/ may
# include a public header of its own layer or below (the engine's own layers use the API's types,
# never an upper layer through it).
PUBLIC_HOME = {
    "m3/error.h": "base", "m3/dtype.h": "base", "m3/bench_clock.h": "base", "m3/version.h": "base",
    "m3/npy.h": "io", "m3/tokenizer.h": "tokenizer", "m3/media.h": "vision",
    "m3/sampling.h": "runtime", "m3/engine.h": "runtime", "m3/prompt.h": "runtime",
    "m3/generation.h": "runtime", "m3/session.h": "runtime", "m3/batch.h": "runtime",
}  # m3/chat/*.h: "chat"


def public_home(inc):
    return "chat" if inc.startswith("m3/chat/") else PUBLIC_HOME.get(inc)


# Front ends: they may include include/m3/ ("m3/..."), their own folder, and these folders.
FRONT_ENDS = {"server": set(), "m3": {"server"}}

# tools/m3 files that work below the public API on purpose, and why. Everything else in tools/m3 and
# src/server uses include/m3/ alone.
BELOW_THE_API = {
    "tools/m3/bench_report.cpp": "names the CPU paths the attention and matmul kernels run on, in every bench report",
    "tools/m3/cmd_bench.cpp": "counts each test's work from the config and the stored formats (io/model_work.h), "
                              "to read the whole model's speed against the machine's bounds, and reads the "
                              "bandwidth again beside each decode run (base/machine_bounds.h)",
    "tools/m3/cmd_bench_attention.cpp": "times the attention kernels themselves against the machine's bounds",
    "tools/m3/bench_attention_kernels.cpp": "times each CPU path's attention kernel table alone (--kernels)",
    "tools/m3/cmd_bench_matmul.cpp": "times the matmul kernels themselves against the machine's bounds",
    "tools/m3/cmd_bench_gemm_libs.cpp": "times the matmul kernels side by side with OpenBLAS and oneDNN",
    "tools/m3/cmd_bench_train.cpp": "times a training step (src/train/) op by op against the FMA peak",
    "tools/m3/cmd_bench_vision.cpp": "times one vision-tower layer and video decoding, below the encode call",
    "tools/m3/cmd_make_checkpoint.cpp": "writes test checkpoints with the fixtures library (not part of the engine)",
    "tools/m3/cmd_inspect.cpp": "reads config.json and safetensors headers without loading a model",
    "tools/m3/cmd_preprocess.cpp": "runs one stage of the image pipeline (decode, resize, patchify) for the reference checks",
    "tools/m3/cmd_preprocess_video.cpp": "runs one stage of the video pipeline (frame sampling, preprocessing) for the reference checks",
    "tools/m3/cmd_video_tokens.cpp": "tabulates the video token counts of the frame-sampling rules",
    "tools/m3/cmd_make_video.cpp": "encodes synthetic test clips with FFmpeg",
    "tools/m3/cmd_quantize.cpp": "rewrites checkpoint files in another weight format (formats, safetensors), not a model run",
    "tools/m3/cmd_grad.cpp": "computes a training gradient (src/train/), which the inference API does not expose",
    "tools/m3/cmd_task_examples.cpp": "prints the training task generator's examples (src/train/) for evaluation",
    "tools/m3/cmd_train.cpp": "runs the trainer (src/train/) and makes preset models with the fixtures library",
    "tools/m3/cmd_perplexity.cpp": "reads the scored text with the engine's one-line file errors (base/read_file.h)",
}

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


def check_public_api(root, problems):
    """include/m3/ includes only include/m3/; front ends include only the API (and BELOW_THE_API)."""
    for dirpath, _, files in os.walk(os.path.join(root, "include", "m3")):
        for f in sorted(files):
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, root)
            with open(path, encoding="utf-8") as fh:
                for inc in INCLUDE.findall(fh.read()):
                    if not inc.startswith("m3/"):
                        problems.append(f"{rel}: the public header includes \"{inc}\" (only include/m3/ headers)")
    for path, folder in sorted(source_files(root)):
        if folder not in FRONT_ENDS:
            continue
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        if rel in BELOW_THE_API:
            continue
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        for inc in INCLUDE.findall(text):
            if "/" not in inc:
                continue
            target = inc.split("/")[0]
            if target in ("m3", folder) or target in FRONT_ENDS[folder] or layer_of(target) is None:
                continue
            problems.append(f"{rel}: includes \"{inc}\": {folder} uses only the public API (include/m3/); "
                            f"list the file in BELOW_THE_API of scripts/check_layers.py with a reason if it must")
    for rel in sorted(BELOW_THE_API):
        if not os.path.exists(os.path.join(root, rel)):
            problems.append(f"scripts/check_layers.py: BELOW_THE_API names {rel}, which does not exist")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    root = os.path.abspath(root)
    problems = []
    edges = {}
    check_public_api(root, problems)
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
            if target == "m3":  # the public API: its header's home layer must not be above the file's
                home = public_home(inc)
                if home is None:
                    problems.append(f"{rel}: includes \"{inc}\", which is not in PUBLIC_HOME of scripts/check_layers.py")
                elif layer_of(home) > own:
                    problems.append(f"{rel}: includes \"{inc}\": it belongs to {home}, above {folder}")
                continue
            if target == folder:
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
    print(f"check_layers: {sum(len(v) for v in edges.values())} folder edges, all downward, no cycle; "
          f"src/server and tools/m3 use only include/m3/ ({len(BELOW_THE_API)} tools listed below the API)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
