#!/usr/bin/env bash
# Installs Brigade's dependencies on Debian 12 (apt) and builds a Release into ./build.
# Usage: scripts/setup.sh [--no-build] [--arm64 | --arm64-missing]
#   --arm64          also installs what scripts/test_arm64.sh needs (the tests run it): Debian's
#                    aarch64 cross compiler, qemu-user-static and the arm64 -dev packages. A
#                    failure there only warns: that test then skips and says why.
#   --arm64-missing  only prints those of them that are not installed (test_arm64.sh asks).
set -euo pipefail
cd "$(dirname "$0")/.."
build=1
arm64=0
for arg in "$@"; do
  case "$arg" in
    --no-build) build=0 ;;
    --arm64) arm64=1 ;;
    --arm64-missing) arm64=2 ;;
    *) echo "setup: unknown option $arg" >&2; exit 2 ;;
  esac
done
SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO="sudo"

# The packages of "$@" that dpkg does not have installed, one per line.
missing_of() {
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

ARM64_PACKAGES=(g++-aarch64-linux-gnu qemu-user-static)
for p in libboost1.81-dev libsodium-dev libspdlog-dev libhwy-dev libopenblas-dev libpcre2-dev \
         libutf8proc-dev libgtest-dev libgmock-dev; do
  ARM64_PACKAGES+=("$p:arm64")
done
if ((arm64 == 2)); then
  missing_of "${ARM64_PACKAGES[@]}"
  exit 0
fi

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config clang clang-format
  libboost1.81-dev libsodium-dev nlohmann-json3-dev libspdlog-dev libcli11-dev
  libhwy-dev libopenblas-dev libpcre2-dev libutf8proc-dev
  libgtest-dev libgmock-dev libbenchmark-dev iproute2 curl
)
# Node.js (for the end-to-end tests with the official `openai` npm client) may already come
# from another source; only install Debian's when there is none.
command -v node >/dev/null 2>&1 || PACKAGES+=(nodejs npm)

mapfile -t missing < <(missing_of "${PACKAGES[@]}")
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

if ((arm64)); then
  mapfile -t missing < <(missing_of "${ARM64_PACKAGES[@]}")
  if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    if ! { $SUDO dpkg --add-architecture arm64 && $SUDO apt-get update -qq &&
           DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"; }; then
      echo "setup: WARNING: the arm64 test tools could not be installed; the emulated Arm tests will be skipped"
    fi
  fi
fi

((build)) || exit 0
export CCACHE_BASEDIR="$PWD"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build
