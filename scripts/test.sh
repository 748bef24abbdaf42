#!/usr/bin/env bash
# Builds (Release, ./build) and runs the whole test suite with ctest.
# Usage: scripts/test.sh [extra ctest args, e.g. -L unit]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --no-build --arm64
# Let ccache share objects between clones in different directories.
export CCACHE_BASEDIR="$PWD"
# The e2e test drives `brigade serve` with the official openai npm package (skipped without it).
if command -v npm >/dev/null 2>&1 && [ ! -d tests/e2e/node_modules/openai ]; then
  (cd tests/e2e && npm ci --no-audit --no-fund) || echo "npm ci failed: the e2e test will be skipped"
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build
cd build
status=0
ctest --output-on-failure --timeout 900 -j2 "$@" || status=$?
if [ "$status" -ne 0 ] && [ -s Testing/Temporary/LastTestsFailed.log ]; then
  # CI keeps only the tail of the log: repeat each failed test's failures (the first lines of
  # each, cut short) at the end.
  echo "==== output of the failed tests (repeated from above) ===="
  while IFS=: read -r _ name; do
    echo "---- $name"
    awk -v name="$name" '
      /^[0-9]+\/[0-9]+ Test: / && substr($0, index($0, " Test: ") + 7) == name { on = 1 }
      on { print }
      on && /^"[^"]*" end time:/ { exit }' Testing/Temporary/LastTest.log |
      grep -A6 -E "Failure|FAILED|what\(\)|Timeout|Exception|error:" | cut -c1-400 | head -n 30
  done < Testing/Temporary/LastTestsFailed.log
fi
exit "$status"
