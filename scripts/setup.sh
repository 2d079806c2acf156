#!/usr/bin/env bash
# Installs every Debian package the build, the tests and the benchmarks need. Idempotent.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config            # build
  libgtest-dev libbenchmark-dev               # unit tests, microbenchmarks
  nlohmann-json3-dev                          # config.json, tokenizer.json, safetensors headers
  libpcre2-dev                                # tokenizer split regex with Unicode classes
  libcli11-dev                                # the m3 command line
  libedit-dev tmux                            # m3 chat's line editing and history; its terminal test
  chromium                                    # the chat page's browser test (headless, tests/web)
  libhwy-dev                                  # Google Highway: SIMD kernels for AVX2, AVX-512, NEON, SVE
  python3 python3-numpy                       # float64 reference (tests/reference)
  libstb-dev libjpeg62-turbo-dev python3-pil  # image decoding (stb_image, libjpeg-turbo as Pillow), image tests
  libboost-dev zlib1g-dev                     # HTTP server of m3 serve (Boost.Beast), gzip request bodies
  libopenblas-dev libdnnl-dev                 # optional: `m3 bench libs` compares our matmul with them
  libavformat-dev libavcodec-dev              # video decoding (FFmpeg, in-process)
  libswscale-dev libavutil-dev
  clang libclang-rt-dev                       # fuzz harnesses (libFuzzer + ASan/UBSan runtimes), scripts/fuzz.sh
  gnuplot-nox                                 # m3 train's loss curves (PNG)
)

missing=()
# The aarch64 cross build (scripts/test_aarch64.sh): Debian's cross compiler, qemu-user, and the
# arm64 builds of the two libraries the CPU layers and their tests link, from Debian's multiarch.
if [ "$(dpkg --print-architecture)" = amd64 ]; then
  packages+=(g++-aarch64-linux-gnu qemu-user libhwy-dev:arm64 libgtest-dev:arm64)
fi
# Node.js and npm run the tokenizer cross-check (js-tiktoken); the machine image usually has them.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
if [[ " ${missing[*]} " == *":arm64 "* ]] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
  $SUDO dpkg --add-architecture arm64
fi
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
