#!/usr/bin/env bash
# Builds (Release, ./build) and runs the whole test suite with ctest.
# Usage: scripts/test.sh [extra ctest args, e.g. -L unit]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --no-build
# Let ccache share objects between clones in different directories.
export CCACHE_BASEDIR="$PWD"
# The e2e test drives `brigade serve` with the official openai npm package (skipped without it).
if command -v npm >/dev/null 2>&1 && [ ! -d tests/e2e/node_modules/openai ]; then
  (cd tests/e2e && npm ci --no-audit --no-fund) || echo "npm ci failed: the e2e test will be skipped"
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build
cd build
ctest --output-on-failure --timeout 900 -j2 "$@"
