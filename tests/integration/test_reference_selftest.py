#!/usr/bin/python3
"""Runs the float64 reference's own self-test (tests/reference/selftest.py): the oracle that the
engine's logits are compared with must itself be right. Needs no engine binary."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("M3_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
SELFTEST = os.path.join(SOURCE_DIR, "tests", "reference", "selftest.py")


def main():
    p = subprocess.run([sys.executable, SELFTEST], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=900)
    sys.stdout.write(p.stdout)
    last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    ok = p.returncode == 0 and last.startswith("selftest:") and last.endswith(" 0 failed")
    print(f"reference-selftest: {'passed' if ok else 'FAILED (exit %d)' % p.returncode}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
