#!/usr/bin/env bash
# Builds (Release, ./build) and runs the whole test suite with ctest.
# Usage: scripts/test.sh [extra ctest args, e.g. -L unit]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --no-build
# Let ccache share objects between clones in different directories.
export CCACHE_BASEDIR="$PWD"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build
cd build
ctest --output-on-failure --timeout 900 -j2 "$@"
