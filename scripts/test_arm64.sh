#!/usr/bin/env bash
# Builds the engine's unit suites for 64-bit Arm Linux and runs them under qemu-user, so the
# NEON code paths (Highway's NEON target, the sdot split-int8 and int8 kernels, the 32-register
# tiles) run and are checked against the scalar reference and Hugging Face's outputs, on an x86
# machine.
# Usage: scripts/test_arm64.sh [build dir, default build-arm64]
#
# Needs Debian's cross toolchain, qemu-user-static and the arm64 -dev packages (multiarch);
# `scripts/setup.sh --no-build --arm64` installs them. Exits 77 (skipped) without them.
# The build is for armv8.2-a with dot products, which Apple silicon and recent Arm servers have.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-arm64}

mapfile -t missing < <(scripts/setup.sh --arm64-missing)
[[ -e /lib/ld-linux-aarch64.so.1 ]] || missing+=(libc6:arm64)
if ((${#missing[@]})); then
    echo "skipped: missing ${missing[*]} (scripts/setup.sh --no-build --arm64 installs them)"
    exit 77
fi

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE="$PWD/scripts/aarch64-linux-gnu.cmake" \
    -DCMAKE_CXX_FLAGS="-march=armv8.2-a+dotprod" -DBRIGADE_BUILD_BENCH=OFF >/dev/null
suites=(brigade_cpu_tests brigade_text_tests brigade_model_tests)
if ! cmake --build "$build" --target "${suites[@]}" >"$build/build.log" 2>&1; then
    grep -v "^\[" "$build/build.log" | tail -n 60
    echo "the aarch64 build failed"
    exit 1
fi
status=0
for suite in "${suites[@]}"; do
    echo "==== $suite (aarch64, emulated)"
    start=$SECONDS
    if scripts/qemu-aarch64.sh "$build/tests/$suite" --gtest_brief=1; then
        echo "==== $suite passed in $((SECONDS - start)) s"
    else
        echo "==== $suite FAILED"
        status=1
    fi
done
exit "$status"
