#!/usr/bin/python3
"""The default training corpus: the Python standard library sources that python3 installs on every
machine of this kind (no download), one JSONL document per .py file, in sorted path order so that the
corpus (and the held-out tail `m3 train` splits off) is the same on every machine with the same
Python. Test suites, generated files and files over --max-file-kb are left out.

  /usr/bin/python3 scripts/make_corpus.py --out data/python-stdlib.jsonl [--max-mb 16]
"""
import argparse
import glob
import json
import os
import sys
import sysconfig


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output .jsonl ({\"text\": ...} per line)")
    ap.add_argument("--root", default=sysconfig.get_paths()["stdlib"], help="source folder (default: the stdlib)")
    ap.add_argument("--max-mb", type=float, default=16.0, help="stop after this many MB of text")
    ap.add_argument("--max-file-kb", type=float, default=200.0, help="skip files larger than this")
    a = ap.parse_args()
    skip = ("/test/", "/tests/", "/idlelib/idle_test/", "/lib2to3/tests/", "/__pycache__/", "/site-packages/",
            "/dist-packages/")
    paths = sorted(p for p in glob.glob(os.path.join(a.root, "**", "*.py"), recursive=True)
                   if not any(s in p for s in skip) and os.path.getsize(p) <= a.max_file_kb * 1024)
    if not paths:
        sys.exit(f"make_corpus: no .py files under {a.root}")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    total, docs = 0, 0
    with open(a.out, "w", encoding="utf-8") as f:
        for p in paths:
            try:
                text = open(p, encoding="utf-8").read()
            except UnicodeDecodeError:
                continue
            f.write(json.dumps({"text": text, "source": os.path.relpath(p, a.root)}) + "\n")
            total += len(text.encode("utf-8"))
            docs += 1
            if total >= a.max_mb * 1e6:
                break
    print(f"make_corpus: {docs} files, {total / 1e6:.1f} MB -> {a.out}")


if __name__ == "__main__":
    main()
