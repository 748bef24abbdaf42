#!/usr/bin/env bash
# Installs Brigade's dependencies on Debian 12 (apt) and builds a Release into ./build.
# Usage: scripts/setup.sh [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config clang clang-format
  libboost1.81-dev libsodium-dev nlohmann-json3-dev libspdlog-dev libcli11-dev
  libhwy-dev libopenblas-dev libpcre2-dev libutf8proc-dev
  libgtest-dev libgmock-dev libbenchmark-dev iproute2 curl
)
# Node.js (for the end-to-end tests with the official `openai` npm client) may already come
# from another source; only install Debian's when there is none.
command -v node >/dev/null 2>&1 || PACKAGES+=(nodejs npm)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

[[ "${1:-}" == "--no-build" ]] && exit 0
export CCACHE_BASEDIR="$PWD"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build
