"""`m3 chat` in a real terminal (tmux), as a person types: Left/Right edit a line, Up recalls the
previous input, the history survives a restart and Ctrl-R searches it, /set changes sampling,
/show names the model, and /save then /load restores a conversation whose next turn reuses the
cache. Skipped (exit 0 with a note) only where tmux is missing; scripts/setup.sh installs it."""
import json
import os
import shutil
import subprocess
import sys
import time

M3 = os.environ["M3_BIN"]
SCRATCH = os.environ["M3_SCRATCH"]
os.makedirs(SCRATCH, exist_ok=True)
results = []


def check(name, cond, detail=""):
    results.append(bool(cond))
    print(f"{'PASS' if cond else 'FAIL'} {name} {'' if cond else detail}", flush=True)


if shutil.which("tmux") is None:
    print("SKIP: tmux is not installed (scripts/setup.sh installs it)")
    sys.exit(0)

model = os.path.join(SCRATCH, "tiny")
if not os.path.exists(os.path.join(model, "config.json")):
    subprocess.run([M3, "make-checkpoint", "--preset", "tiny", "--seed", "2", "--out", model], check=True,
                   stdout=subprocess.DEVNULL)
home = os.path.join(SCRATCH, "home")
shutil.rmtree(home, ignore_errors=True)
os.makedirs(home)
stats_path = os.path.join(SCRATCH, "stats.jsonl")
saved = os.path.join(SCRATCH, "conversation.json")
socket = os.path.join(SCRATCH, "tmux.sock")
env = dict(os.environ, HOME=home, TERM="xterm")
env.pop("XDG_STATE_HOME", None)


def tmux(*args):
    return subprocess.run(["tmux", "-S", socket, *args], env=env, capture_output=True, text=True, timeout=30)


def start():
    if os.path.exists(stats_path):
        os.remove(stats_path)
    cmd = f"{M3} chat -m {model} -n 6 --temp 0 --color never --stats-json 2>{stats_path}"
    tmux("new-session", "-d", "-s", "chat", "-x", "160", "-y", "50", cmd)
    wait_for(lambda: "type a message" in screen(), "the banner")


def screen():
    return tmux("capture-pane", "-t", "chat", "-p").stdout


def keys(*k):
    tmux("send-keys", "-t", "chat", *k)


def wait_for(cond, what, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.1)
    print(f"timed out waiting for {what}; screen:\n{screen()}")
    return False


def turns():
    if not os.path.exists(stats_path):
        return []
    out = []
    for line in open(stats_path, errors="replace"):
        line = line.strip()
        if line.startswith("{") and '"turn"' in line:
            out.append(json.loads(line))
    return out


def last_prompt_line():
    lines = [l for l in screen().splitlines() if l.strip()]
    return lines[-1] if lines else ""


try:
    start()
    check("the banner names the model, context, threads and cache", all(w in screen() for w in ("layers", "context", "threads", "cache bf16")),
          screen())
    keys("hello wrld")
    keys("Left", "Left", "Left", "o")  # Left three times, then type the missing letter in place
    wait_for(lambda: "> hello world" in screen(), "the edited line")
    check("Left moves the cursor and typing inserts there", "> hello world" in screen(), screen())
    keys("Enter")
    check("the edited line is the message sent", wait_for(lambda: len(turns()) == 1, "turn 1"), screen())
    keys("Up")
    check("Up recalls the previous input", wait_for(lambda: last_prompt_line() == "> hello world", "recall"), last_prompt_line())
    keys("End", "Left", "Left", "Left", "Left", "Left", "Right", "X")  # edit the recalled line in the middle
    check("Right moves the cursor back", wait_for(lambda: last_prompt_line() == "> hello wXorld", "Right"), last_prompt_line())
    keys("C-u")  # clear the line
    keys("/set temp 0.5", "Enter")
    check("/set changes sampling", wait_for(lambda: "temp 0.5, top-p" in screen(), "/set"), screen())
    keys("/set temp 0", "Enter")
    keys("/show", "Enter")
    check("/show names the model and the conversation", wait_for(lambda: "conversation: 2 messages" in screen(), "/show"), screen())
    keys(f"/save {saved}", "Enter")
    wait_for(lambda: "(saved 2 messages" in screen(), "/save")
    conv = json.load(open(saved)) if os.path.exists(saved) else []
    check("/save writes the OpenAI messages", [m.get("role") for m in conv] == ["user", "assistant"] and
          conv[0].get("content") == "hello world", conv)
    keys("/clear", "Enter")
    keys(f"/load {saved}", "Enter")
    wait_for(lambda: "(loaded 2 messages" in screen(), "/load")
    keys("and then?", "Enter")
    wait_for(lambda: len(turns()) == 2, "turn 2")
    t = turns()
    check("after /load the next turn reuses the cached conversation", len(t) == 2 and t[1]["reused_tokens"] >= t[0]["prompt_tokens"],
          t)
    keys("C-d")
    wait_for(lambda: tmux("has-session", "-t", "chat").returncode != 0, "exit")
    hist = os.path.join(home, ".local", "state", "m3", "chat_history")
    check("the history is written on exit", os.path.exists(hist) and "and\\040then?" in open(hist).read(), hist)

    start()  # a new run: the history is there
    keys("Up")
    check("Up in a new run recalls the last input of the previous one",
          wait_for(lambda: last_prompt_line() == "> and then?", "history across runs"), last_prompt_line())
    keys("C-u", "C-r", "hello")  # back through the history to the first message
    check("Ctrl-R searches the history", wait_for(lambda: "> hello world" in screen().split("> and then?")[-1], "search"), screen())
    keys("C-g", "C-u", "C-d")
finally:
    tmux("kill-server")

print(f"chat repl: {sum(results)}/{len(results)} passed")
sys.exit(0 if all(results) else 1)
