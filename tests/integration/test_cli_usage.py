"""The command line as a llama.cpp user types it (docs/CLI.md): --version, help and "did you mean",
the documented exit codes, plain messages for bad values, the usual flags on every command that
runs a model (-c/--ctx-size, -s/--seed, -ctk/-ctv, -ngl, --no-mmap, --mlock, --verbose,
--log-file), one sampling default (the model's generation_config.json, else the release's), Ctrl-C
in generate (statistics, exit 130), and one-line errors for inputs that are not regular files."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

M3 = os.environ["M3_BIN"]
SCRATCH = os.environ["M3_SCRATCH"]
os.makedirs(SCRATCH, exist_ok=True)
results = []


def run(*args, env=None, timeout=600):
    e = dict(os.environ, **(env or {}))
    return subprocess.run([M3] + list(args), capture_output=True, text=True, timeout=timeout, env=e)


def check(name, cond, detail=""):
    results.append(bool(cond))
    print(f"{'PASS' if cond else 'FAIL'} {name} {'' if cond else detail}")


def lines(text):
    return [l for l in text.splitlines() if l.strip()]


def usage_error(r, *words):
    """Exit 2 and one line on stderr holding every word."""
    ls = lines(r.stderr)
    return r.returncode == 2 and len(ls) == 1 and all(w in ls[0] for w in words)


def run_error(r, *words):
    ls = lines(r.stderr)
    return r.returncode == 1 and len(ls) == 1 and ls[0].startswith("m3: error: ") and all(w in ls[0] for w in words)


tiny = os.path.join(SCRATCH, "tiny")
if not os.path.exists(os.path.join(tiny, "config.json")):
    assert run("make-checkpoint", "--preset", "tiny", "--seed", "3", "--out", tiny).returncode == 0

# --version: version, commit, build, CPU path (forced with M3_CPU).
v = run("--version")
check("--version exits 0 with version, commit, compiler and Highway", v.returncode == 0 and
      re.search(r"m3\.cpp \d+\.\d+\.\d+ \(commit [0-9a-f]+", v.stdout) and "Highway" in v.stdout, v.stdout + v.stderr)
vg = run("--version", env={"M3_CPU": "generic"})
check("--version names the CPU path in use", "CPU path generic" in vg.stdout and "best on this CPU" in vg.stdout, vg.stdout)

# help, unknown commands, did you mean.
h = run("help")
check("m3 help lists the commands, exit 0", h.returncode == 0 and "generate" in h.stdout and "serve" in h.stdout, h.stdout)
check("m3 help generate shows its flags", "--ctx-size" in run("help", "generate").stdout)
bare = run()
check("m3 alone prints the commands on stderr, exit 2", bare.returncode == 2 and "serve" in bare.stderr, bare.stderr)
check("an unknown command says so, exit 2", usage_error(run("foo"), "no command 'foo'", "m3 help"), run("foo").stderr)
check("a mistyped command suggests the right one", usage_error(run("genrate", "-m", tiny), "did you mean 'generate'"),
      run("genrate").stderr)
check("m3 help on an unknown command suggests too", usage_error(run("help", "serv"), "did you mean 'serve'"),
      run("help", "serv").stderr)

# Bad values in plain words, exit 2.
r = run("generate", "-m", tiny, "-p", "x", "-n", "gl")
check("-n gl: expected a whole number", usage_error(r, "--max-tokens", "expected a whole number, got 'gl'"), r.stderr)
r = run("generate", "-m", tiny, "-p", "x", "-n", "1.5")
check("-n 1.5: expected a whole number", usage_error(r, "expected a whole number, got '1.5'"), r.stderr)
r = run("generate", "-m", tiny, "-p", "x", "--temp", "warm")
check("--temp warm: expected a number", usage_error(r, "--temp", "expected a number, got 'warm'"), r.stderr)
r = run("serve", "-m", tiny, "--port", "99999")
check("--port 99999: the range in plain numbers", usage_error(r, "expected a value from 0 to 65535, got '99999'")
      and len(r.stderr) < 200, r.stderr)
r = run("generate", "-m", tiny, "-p", "x", "--no-such-flag")
check("an unknown flag is a usage error naming it", usage_error(r, "--no-such-flag"), r.stderr)
r = run("generate", "-p", "x")
check("a missing -m is a usage error", usage_error(r, "--model"), r.stderr)

# -ngl from a llama.cpp habit: accepted, a note, the run goes on (before: "-n gl").
prompt = "The quick brown fox jumps over the lazy dog. " * 4
greedy = ["--temp", "0", "--ignore-eos"]
base = run("generate", "-m", tiny, "-p", prompt, "-n", "8", *greedy)
r = run("generate", "-m", tiny, "-p", prompt, "-n", "8", *greedy, "-ngl", "99")
check("-ngl 99 is accepted and ignored with a note", r.returncode == 0 and r.stdout == base.stdout and
      "--n-gpu-layers 99 ignored" in r.stderr, r.stderr)

# -c/--ctx-size: a longer prompt is an error; the generation stops when the context is full.
r = run("generate", "-m", tiny, "-p", prompt, "-c", "8")
check("a prompt longer than -c is one error line", run_error(r, "-c/--ctx-size", "holds 8"), r.stderr)
n_prompt = int(re.search(r"prompt (\d+) tokens", base.stderr).group(1))
r = run("generate", "-m", tiny, "-p", prompt, "-n", "100", *greedy, "--ctx-size", str(n_prompt + 5))
gen = re.search(r"generated (\d+) tokens", r.stderr)
check("generation stops when the context is full", r.returncode == 0 and gen and int(gen.group(1)) == 5 and
      "the context is full" in r.stderr, r.stderr)
r = run("generate", "-m", tiny, "-p", "x", "-c", "99999999")
check("-c beyond max_position_embeddings is refused", run_error(r, "max_position_embeddings"), r.stderr)

# -ctk/-ctv: one cache type for K, V and the index keys.
r = run("generate", "-m", tiny, "-p", prompt, "-n", "4", *greedy, "-ctk", "bf16", "-ctv", "bf16")
check("-ctk bf16 -ctv bf16 runs a bf16 cache", r.returncode == 0 and "MiB bf16" in r.stderr, r.stderr)
r = run("generate", "-m", tiny, "-p", prompt, "-ctk", "bf16", "-ctv", "f32")
check("-ctk and -ctv that differ are refused", run_error(r, "-ctk bf16", "-ctv f32"), r.stderr)

# -s/--seed: the same seed the same text; the default is seeded too.
s1 = run("generate", "-m", tiny, "-p", prompt, "-n", "12", "--ignore-eos", "-s", "7")
s2 = run("generate", "-m", tiny, "-p", prompt, "-n", "12", "--ignore-eos", "--seed", "7")
check("-s and --seed are one flag, reproducible", s1.returncode == 0 and s1.stdout == s2.stdout, (s1.stdout, s2.stdout))

# One sampling default: the release's (T 1.0, top-p 0.95, top-k 40) unless generation_config.json says otherwise.
d = run("generate", "-m", tiny, "-p", prompt, "-n", "12", "--ignore-eos")
x = run("generate", "-m", tiny, "-p", prompt, "-n", "12", "--ignore-eos", "--temp", "1", "--top-p", "0.95", "--top-k", "40")
check("the default sampling is temperature 1, top-p 0.95, top-k 40", d.returncode == 0 and d.stdout == x.stdout,
      (d.stdout, x.stdout))
greedy_cfg = os.path.join(SCRATCH, "tiny-greedy")
shutil.copytree(tiny, greedy_cfg, dirs_exist_ok=True)
with open(os.path.join(greedy_cfg, "generation_config.json"), "w") as f:
    json.dump({"do_sample": False, "temperature": 0.7}, f)
g = run("generate", "-m", greedy_cfg, "-p", prompt, "-n", "8", "--ignore-eos")
check("generation_config.json do_sample false makes the default greedy", g.returncode == 0 and g.stdout == base.stdout,
      (g.stdout, base.stdout))
with open(os.path.join(greedy_cfg, "generation_config.json"), "w") as f:
    f.write('{"temperature": "hot"}')
r = run("generate", "-m", greedy_cfg, "-p", "x")
check("a bad generation_config.json field is one error line naming it", run_error(r, "generation_config.json", "temperature"),
      r.stderr)

# --no-mmap and --mlock load the same weights; --verbose prints the startup summary.
r = run("generate", "-m", tiny, "-p", prompt, "-n", "8", *greedy, "--no-mmap", "--verbose")
check("--no-mmap gives the same text, --verbose says how the weights were loaded", r.returncode == 0 and
      r.stdout == base.stdout and "read into memory" in r.stderr and "CPU path" in r.stderr and "parameters" in r.stderr,
      r.stderr)
r = run("generate", "-m", tiny, "-p", prompt, "-n", "8", *greedy, "--mlock", "-v")
check("--mlock locks the weights (or names RLIMIT_MEMLOCK)", (r.returncode == 0 and r.stdout == base.stdout and
      "locked" in r.stderr) or run_error(r, "ulimit -l"), r.stderr)

# --log-file: stderr goes to the file; a fatal error reaches the terminal too.
log = os.path.join(SCRATCH, "m3.log")
if os.path.exists(log):
    os.remove(log)
r = run("generate", "-m", tiny, "-p", prompt, "-n", "4", *greedy, "--log-file", log)
logged = open(log).read()
check("--log-file takes the statistics off the terminal", r.returncode == 0 and r.stderr == "" and "generated 4 tokens" in logged,
      (r.stderr, logged))
r = run("generate", "-m", tiny, "-p", prompt, "-c", "4", "--log-file", log)
check("an error with --log-file is in the log and on the terminal", run_error(r, "-c/--ctx-size") and
      "-c/--ctx-size" in open(log).read().splitlines()[-1], (r.stderr, open(log).read()[-300:]))

# Inputs that are not regular files: one line, exit 1.
check("-f on a folder is one error line", run_error(run("generate", "-m", tiny, "-f", SCRATCH), "is a folder"))
check("-m on a file is one error line", run_error(run("generate", "-m", log, "-p", "x"), "not a model folder"))
vl = os.path.join(SCRATCH, "tiny-vl")
if not os.path.exists(os.path.join(vl, "config.json")):
    assert run("make-checkpoint", "--preset", "tiny-vl", "--seed", "3", "--out", vl).returncode == 0
r = run("generate", "-m", vl, "-p", "x", "--image", SCRATCH)
check("--image on a folder is one error line", run_error(r, "is a folder, not an image file"), r.stderr)
r = run("generate", "-m", vl, "-p", "x", "--video", SCRATCH)
check("--video on a folder is one error line", run_error(r, "is a folder, not a video file"), r.stderr)

# inspect: the cache in the type the commands use (bf16 unless told), the total for a serve, the RAM.
def per_token(r):
    return int(re.search(r"= ([\d,]+) bytes \(--cache-type", r.stdout).group(1).replace(",", ""))


i16 = run("inspect", tiny, "-c", "4096")
i32 = run("inspect", tiny, "-c", "4096", "--cache-type", "f32")
i8 = run("inspect", tiny, "-c", "4096", "--cache-type", "fp8")
check("inspect counts the cache in the default type (bf16; f32 twice that)", i16.returncode == 0 and
      "--cache-type bf16" in i16.stdout and per_token(i32) == 2 * per_token(i16), (i16.stdout[-600:], i32.stderr))
# fp8: a byte per element (half of bf16) plus a scale byte per vector: K, V of 4 layers x 2 heads, 3 index keys.
check("inspect counts the fp8 cache: half of bf16 plus a scale byte per vector",
      per_token(i8) == per_token(i16) // 2 + 2 * 4 * 2 + 3, i8.stdout[-600:])
ip = run("inspect", tiny, "-c", "4096", "--parallel", "4", "--cache-mb", "0", "--ram", "64")
check("inspect totals weights + P caches + prefix cache and says it fits", ip.returncode == 0 and
      "4 sequence cache(s)" in ip.stdout and "fits          in --ram 64.00 GiB" in ip.stdout, ip.stdout[-500:])
ismall = run("inspect", tiny, "-c", "65536", "--parallel", "8", "--ram", "0.01")
check("inspect says what to change when it does not fit", "does not fit" in ismall.stdout and "Lower -c" in ismall.stdout,
      ismall.stdout[-500:])

# Ctrl-C in generate: the text so far, a final newline, the statistics, exit 130.
p = subprocess.Popen([M3, "generate", "-m", tiny, "-p", prompt, "-n", "1000000", "--ignore-eos", "-t", "1"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
first = p.stdout.read(1)  # the first generated byte: decoding has started
time.sleep(0.3)
p.send_signal(signal.SIGINT)
rest, err = p.communicate(timeout=120)
out, err = (first + rest).decode(errors="replace"), err.decode(errors="replace")
check("Ctrl-C in generate prints the statistics and exits 130", p.returncode == 130 and "generated" in err and
      "interrupted" in err and out.endswith("\n"), (p.returncode, err[-300:]))

print(f"cli usage: {sum(results)}/{len(results)} passed")
sys.exit(0 if all(results) else 1)
