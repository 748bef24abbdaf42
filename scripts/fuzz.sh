#!/usr/bin/env bash
# Builds every libFuzzer target (tests/fuzz/*_fuzz.cpp) with clang and runs each one for a
# bounded time. Corpora persist in BUILD_DIR/fuzz-corpus/<target>; crashing inputs are written
# to BUILD_DIR/fuzz-artifacts/. Seeds: tests/fuzz/seeds/<target>/ when that folder exists.
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET=60] [BUILD_DIR=build-fuzz] [TARGET...]
# Exit status: 0 if every target ran its time without a finding, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${1:-60}"
build="${2:-build-fuzz}"
shift $(( $# > 2 ? 2 : $# ))

if ! command -v clang++ >/dev/null; then
    echo "fuzz.sh: clang++ not found (libFuzzer needs clang)" >&2
    exit 1
fi

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    for f in tests/fuzz/*_fuzz.cpp; do
        [ -e "$f" ] || continue
        targets+=("$(basename "$f" .cpp)")
    done
fi
if [ ${#targets[@]} -eq 0 ]; then
    echo "fuzz.sh: no tests/fuzz/*_fuzz.cpp targets" >&2
    exit 1
fi

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DBRIGADE_FUZZ=ON -DBRIGADE_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" --target "${targets[@]}"

mkdir -p "$build/fuzz-artifacts"
failed=()
for t in "${targets[@]}"; do
    corpus="$build/fuzz-corpus/$t"
    mkdir -p "$corpus"
    dirs=("$corpus")
    [ -d "tests/fuzz/seeds/$t" ] && dirs+=("tests/fuzz/seeds/$t")
    echo "== $t: ${secs}s"
    if ! "$build/tests/$t" -max_total_time="$secs" -max_len=4096 -timeout=10 \
        -print_final_stats=1 -artifact_prefix="$build/fuzz-artifacts/$t-" "${dirs[@]}"; then
        failed+=("$t")
    fi
done

if [ ${#failed[@]} -ne 0 ]; then
    echo "fuzz.sh: findings in: ${failed[*]} (inputs in $build/fuzz-artifacts/)" >&2
    exit 1
fi
echo "fuzz.sh: ${#targets[@]} target(s) ran ${secs}s each without findings"
