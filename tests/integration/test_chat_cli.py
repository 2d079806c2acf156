"""`m3 chat` driven through a pipe on a tiny random checkpoint: KV reuse across turns prefills
exactly the new tokens and gives the same replies as prefilling every turn cold (greedy); /clear
starts over; images and videos are part of the reused prefix; Ctrl-C (SIGINT) stops a long reply and the
chat goes on; reasoning budgets close the thought at the cap."""
import json
import os
import signal
import subprocess
import sys

import numpy as np
from PIL import Image

M3 = os.environ["M3_BIN"]
SCRATCH = os.environ["M3_SCRATCH"]
os.makedirs(SCRATCH, exist_ok=True)
results = []


def check(name, cond, detail=""):
    results.append(bool(cond))
    print(f"{'PASS' if cond else 'FAIL'} {name} {detail if not cond else ''}")


def run(*args, ok=True):
    r = subprocess.run([M3] + list(args), capture_output=True, text=True, timeout=600)
    if ok and r.returncode != 0:
        raise AssertionError(f"m3 {' '.join(args)} failed: {r.stderr}")
    return r


def chat(lines, *flags):
    """Runs one chat session on `lines`; returns (per-turn stats, stdout)."""
    r = subprocess.run([M3, "chat", "-m", model, "-t", "1", "--temp", "0", "--stats-json"] + list(flags),
                       input="".join(l + "\n" for l in lines), capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise AssertionError(f"m3 chat failed: {r.stderr}")
    stats = [json.loads(l) for l in r.stderr.splitlines() if l.startswith('{"turn"')]
    return stats, r.stdout


def count_tokens(text):
    ids = run("tokenize", "-m", model, "--special", "--text", text).stdout.strip()
    return len(ids.split(","))


model = os.path.join(SCRATCH, "tiny-vl")
run("make-checkpoint", "--preset", "tiny-vl", "--seed", "2", "--out", model)
for name, seed in (("a.png", 0), ("b.png", 1)):
    pixels = (np.random.RandomState(seed).rand(40, 56, 3) * 255).astype("uint8")
    Image.fromarray(pixels).save(os.path.join(SCRATCH, name))
img_a, img_b = os.path.join(SCRATCH, "a.png"), os.path.join(SCRATCH, "b.png")

# Multi-turn reuse. The cache holds turn 1's prompt and reply (all but the last generated token,
# which was never fed back), so turn 2 prefills that token (unless it was the end of turn) plus
# the new turn's markup and text.
turns = ["hello there", "what is two plus two?", "and three more?", "/clear", "hello there"]
warm, warm_out = chat(turns, "-n", "24")
cold, _ = chat(turns, "-n", "24", "--no-kv-reuse")
check("five lines give four turns", len(warm) == 4 and len(cold) == 4, warm)
t1, t2 = warm[0], warm[1]
check("turn 1 prefills everything", t1["reused_tokens"] == 0 and t1["prefilled_tokens"] == t1["prompt_tokens"], t1)
check("turn 2 reuses turn 1's prompt and reply",
      t2["reused_tokens"] == t1["prompt_tokens"] + t1["generated_tokens"] - 1, (t1, t2))
new_turn = count_tokens("[e~[\n]~b]user\n" + turns[1] + "[e~[\n]~b]ai\n")
check("turn 2 prefills exactly the new tokens",
      t2["prefilled_tokens"] == new_turn + (0 if t1["stopped_at_eos"] else 1)
      and t2["reused_tokens"] + t2["prefilled_tokens"] == t2["prompt_tokens"], (new_turn, t2))
check("turn 3 reuses turn 2", warm[2]["reused_tokens"] == t2["prompt_tokens"] + t2["generated_tokens"] - 1, warm[2])
check("replies with reuse equal cold prefills",
      [t["content"] for t in warm] == [t["content"] for t in cold] and all(t["reused_tokens"] == 0 for t in cold),
      (warm, cold))
check("replies are not empty", all(t["generated_tokens"] > 0 for t in warm), warm)
after = warm[3]
check("/clear starts over: the same prompt and reply as turn 1",
      after["prompt_tokens"] == t1["prompt_tokens"] and after["content"] == t1["content"], (t1, after))
check("/clear keeps the cache: the old turn 1 prefix is reused", after["reused_tokens"] == after["prompt_tokens"] - 1,
      after)
check("piped output has no ANSI escapes", "\x1b[" not in warm_out, repr(warm_out[:200]))

# Images: the same text with a different image at the same position must not reuse the image rows.
img_turns = ["/image " + img_a, "describe", "/clear", "/image " + img_b, "describe", "/image " + img_a, "again"]
warm_i, out_i = chat(img_turns, "-n", "8")
cold_i, _ = chat(img_turns, "-n", "8", "--no-kv-reuse")
check("image turns", len(warm_i) == 3, warm_i)
check("image replies with reuse equal cold prefills", [t["content"] for t in warm_i] == [t["content"] for t in cold_i],
      (warm_i, cold_i))
# The image (start-of-image, 6 image tokens, end-of-image for 56x40) comes right before the text.
# Reuse compares the rows' keys (the features'), so it stops at the first image row: the
# start-of-image token before it is the same token in both prompts and stays reused.
after_image = 7 + count_tokens("describe[e~[\n]~b]ai\n")
check("another image at the same place cuts the reuse at its first row",
      warm_i[1]["prompt_tokens"] == warm_i[0]["prompt_tokens"]
      and warm_i[1]["reused_tokens"] == warm_i[0]["prompt_tokens"] - after_image, (after_image, warm_i))
check("a second image in the same conversation reuses the first",
      warm_i[2]["reused_tokens"] == warm_i[1]["prompt_tokens"] + warm_i[1]["generated_tokens"] - 1, warm_i)
check("/image reports the attachment", "image attached" in out_i, out_i)

# Videos: per temporal group a timestamp, start, video tokens, end; reused like images.
clip_a, clip_b = os.path.join(SCRATCH, "a.mp4"), os.path.join(SCRATCH, "b.mp4")
run("make-video", clip_a)
run("make-video", "--frames", "20", "--fps", "5", clip_b)
vid_turns = ["/video " + clip_a, "describe", "/video " + clip_b, "/video /nonexistent.mp4", "again"]
warm_v, out_v = chat(vid_turns, "-n", "8")
cold_v, _ = chat(vid_turns, "-n", "8", "--no-kv-reuse")
text_only, _ = chat(["describe"], "-n", "8")
check("video turns", len(warm_v) == 2 and len(cold_v) == 2, warm_v)
check("video replies with reuse equal cold prefills", [t["content"] for t in warm_v] == [t["content"] for t in cold_v],
      (warm_v, cold_v))
video_tokens = warm_v[0]["prompt_tokens"] - text_only[0]["prompt_tokens"]
check("the video adds its groups' tokens to the prompt", video_tokens > 8, video_tokens)
check("a second video in the same conversation reuses the first turn",
      warm_v[1]["reused_tokens"] == warm_v[0]["prompt_tokens"] + warm_v[0]["generated_tokens"] - 1, warm_v)
check("/video reports the attachment, and a missing file is an error that keeps the chat going",
      "video attached" in out_v and "error:" in out_v and "nonexistent.mp4" in out_v, out_v)

# Ctrl-C during a long reply stops it; the next line is answered in the same session (and is
# stopped the same way).
p = subprocess.Popen([M3, "chat", "-m", model, "-t", "1", "--temp", "0", "--stats-json", "--ignore-eos", "-n", "50000"],
                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def interrupt_turn(text):
    p.stdin.write(text + "\n")
    p.stdin.flush()
    for line in p.stderr:
        if line.startswith('{"event":"decoding"}'):
            break
    p.send_signal(signal.SIGINT)
    for line in p.stderr:
        if line.startswith('{"turn"'):
            return json.loads(line)
    return None


try:
    first = interrupt_turn("tell me a long story")
    second = interrupt_turn("and then?")
    p.stdin.close()
    rc = p.wait(timeout=600)
finally:
    if p.poll() is None:
        p.kill()
check("SIGINT stops the reply early", first is not None and first["interrupted"] and first["generated_tokens"] < 50000,
      first)
check("the chat answers the next line after SIGINT", second is not None and second["turn"] == 2
      and second["reused_tokens"] > 0 and second["generated_tokens"] > 0 and rc == 0, (second, rc))

# Tools: the definitions enter the developer turn; a tool result without a tool call to answer is
# one error line and the chat goes on.
tools = os.path.join(SCRATCH, "tools.json")
with open(tools, "w") as f:
    json.dump([{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}], f)
plain, _ = chat(["weather in Paris?"], "-n", "4")
with_tools, tool_out = chat(["weather in Paris?", "/tool {\"temp\": 21}", "thanks"], "-n", "4", "--tools", tools)
check("--tools adds the definitions to the prompt", with_tools[0]["prompt_tokens"] > plain[0]["prompt_tokens"] + 50,
      (plain, with_tools))
check("/tool without a tool call is an error and the chat goes on",
      "error: messages[2]: a tool message must follow an assistant message with tool_calls" in tool_out
      and [t["turn"] for t in with_tools] == [1, 2] and with_tools[1]["reused_tokens"] > 0, (tool_out, with_tools))

bad_tools = os.path.join(SCRATCH, "bad_tools.json")
with open(bad_tools, "w") as f:
    f.write('[{"type": "function"}]')
bad = run("chat", "-m", model, "--tools", bad_tools, ok=False)
check("malformed --tools is one error line at start", bad.returncode == 1 and
      bad.stderr.strip() == f"m3: error: {bad_tools}: tools[0].function: missing", bad.stderr)

# Reasoning budgets: an explicit budget enables thinking and closes the thought at the cap.
b, _ = chat(["think about it"], "-n", "12", "--reasoning-effort", "3")
check("budget 3: three reasoning tokens, then the forced closer",
      b[0]["reasoning_tokens"] == 3 and b[0]["forced_tokens"] == 1 and b[0]["reasoning_content"] != "", b)
n, _ = chat(["no thinking"], "-n", "6", "--reasoning-effort", "none")
check("effort none: no reasoning", n[0]["reasoning_tokens"] == 0 and n[0]["reasoning_content"] == "", n)
_, colored = chat(["think about it"], "-n", "12", "--reasoning-effort", "3", "--color", "always")
check("--color always dims the reasoning", "\x1b[2m" in colored, repr(colored[:200]))
bad = run("chat", "-m", model, "--reasoning-effort", "lots", ok=False)
check("bad --reasoning-effort is one error line",
      bad.returncode == 1 and bad.stderr.strip().startswith("m3: error: --reasoning-effort") and
      len(bad.stderr.strip().splitlines()) == 1, bad.stderr)

failed = results.count(False)
print(f"chat cli: {len(results) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
