"""What the integration tests that drive `m3` share: running it, one-line error checks, and the
PASS/FAIL tally (a module beside the tests; the ctest glob runs only test_*.py)."""
import os
import subprocess

M3 = os.environ.get("M3_BIN", "m3")
SCRATCH = os.environ.get("M3_SCRATCH", "/tmp/m3-scratch")


class Checks:
    def __init__(self):
        self.results = []

    def __call__(self, name, cond, detail=""):
        self.results.append(bool(cond))
        print(f"{'PASS' if cond else 'FAIL'} {name} {detail}", flush=True)

    def exit_code(self):
        print(f"{sum(self.results)}/{len(self.results)} checks passed")
        return 0 if all(self.results) else 1


def run(*args, ok=True, timeout=900):
    r = subprocess.run([M3] + list(args), capture_output=True, text=True, timeout=timeout)
    if ok and r.returncode != 0:
        raise AssertionError(f"m3 {' '.join(args)} failed: {r.stderr}")
    return r


def one_error_line(r, *words, ignore_prefix=None):
    """Exit status 1 and one stderr line "m3: error: ..." holding every word (case-insensitive);
    lines starting with ignore_prefix (a command's banner) are not counted."""
    lines = [l for l in r.stderr.splitlines() if l.strip() and not (ignore_prefix and l.startswith(ignore_prefix))]
    return (r.returncode == 1 and len(lines) == 1 and lines[0].startswith("m3: error: ")
            and all(w.lower() in lines[0].lower() for w in words))
