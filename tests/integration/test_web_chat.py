#!/usr/bin/env python3
"""The chat page of `m3 serve` in a real browser: Debian's chromium, headless, driven by
playwright-core (pinned in tests/web/package.json, installed from the npm registry into the scratch
folder) against `m3 serve --api-key K` on a tiny vision checkpoint. The checks are in
tests/web/web_chat_client.cjs; the screenshot (streamed reply, folded reasoning, attached image) is
kept as build/.../scratch/test_web_chat/web_chat.png."""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["M3_SOURCE_DIR"], "tests", "server"))
import server_client  # noqa: E402
from PIL import Image  # noqa: E402

M3 = os.environ["M3_BIN"]
SRC = os.environ["M3_SOURCE_DIR"]
SCRATCH = os.environ["M3_SCRATCH"]
os.makedirs(SCRATCH, exist_ok=True)
KEY = "page-key-123"

chromium = shutil.which("chromium") or shutil.which("chromium-browser")
if chromium is None:
    print("FAIL - Debian's chromium is not installed (scripts/setup.sh installs it)")
    sys.exit(1)
node_dir = os.path.join(SCRATCH, "node")
deps = json.load(open(os.path.join(SRC, "tests", "web", "package.json")))["dependencies"]
want = [f"{n}@{v}" for n, v in deps.items()]
have = os.path.join(node_dir, "node_modules", "playwright-core", "package.json")
if not os.path.exists(have) or f"playwright-core@{json.load(open(have))['version']}" not in want:
    r = subprocess.run(["npm", "install", "--prefix", node_dir, "--no-audit", "--no-fund", "--no-save", *want],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        print("FAIL - npm install " + " ".join(want) + ":\n" + r.stderr[-2000:])
        sys.exit(1)

model = server_client.make_checkpoint(M3, "tiny-vl", 3, os.path.join(SCRATCH, "tiny-vl"))
image = os.path.join(SCRATCH, "picture.png")
im = Image.new("RGB", (96, 64))
for x in range(96):
    for y in range(64):
        im.putpixel((x, y), (x * 2, y * 3, 160 if (x // 16 + y // 16) % 2 else 40))
im.save(image)
shot = os.path.join(SCRATCH, "web_chat.png")
if os.path.exists(shot):
    os.remove(shot)

proc, port = server_client.start_server(M3, model, ["-t", "2", "--parallel", "2", "--api-key", KEY],
                                        os.path.join(SCRATCH, "server.log"))
try:
    env = dict(os.environ, M3_URL=f"http://127.0.0.1:{port}/", M3_API_KEY=KEY, M3_IMAGE=image, M3_SHOT=shot,
               M3_NODE_MODULES=os.path.join(node_dir, "node_modules"), M3_CHROMIUM=chromium)
    r = subprocess.run(["node", os.path.join(SRC, "tests", "web", "web_chat_client.cjs")], env=env,
                       capture_output=True, text=True, timeout=900)
    print(r.stdout + r.stderr)
    ok = r.returncode == 0 and os.path.exists(shot) and os.path.getsize(shot) > 10000
    if not os.path.exists(shot):
        print("FAIL - no screenshot")
finally:
    server_client.stop_servers([proc])
print(f"screenshot: {shot}")
sys.exit(0 if ok else 1)
