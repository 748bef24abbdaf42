#!/usr/bin/env bash
# Counts the 64-bit Arm instructions one 4-bit decode matmul executes, split-int8 (sdot) against
# the f32 grouped kernel, under qemu-user (one instruction per translation block, every block
# logged). No Arm machine is at hand, so this is what compares the NEON kernels: instruction
# counts, not time. Each count is (3 calls - 1 call) / 2, which leaves out the set-up.
# Usage: scripts/count_arm64_instructions.sh [aarch64 build dir with benches, default build-arm64]
#   (configure it as scripts/test_arm64.sh does, plus -DBRIGADE_BUILD_BENCH=ON, and build
#   kernel_calls_bench)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-arm64}
bench="$build/bench/kernel_calls_bench"
[[ -x "$bench" ]] || { echo "no $bench: build kernel_calls_bench for aarch64 first"; exit 1; }

count() {  # instructions executed by kernel_calls_bench "$@"
    qemu-aarch64-static -singlestep -d nochain,exec -D /dev/stderr "$bench" "$@" 2>&1 >/dev/null |
        grep -c '^Trace'
}

printf '%-10s %-6s %14s %14s\n' shape kernel "insns/call" "insns/byte"
for shape in 896x896 4864x896 896x4864 2048x2048; do
    rows=${shape%x*} cols=${shape#*x}
    bytes=$((rows * cols / 2))
    for kernel in split f32; do
        flag=()
        [[ $kernel == f32 ]] && flag=(--f32)
        one=$(count --rows "$rows" --cols "$cols" --calls 1 "${flag[@]}")
        three=$(count --rows "$rows" --cols "$cols" --calls 3 "${flag[@]}")
        per_call=$(((three - one) / 2))
        printf '%-10s %-6s %14d %14s\n' "$shape" "$kernel" "$per_call" \
            "$(awk -v a="$per_call" -v b="$bytes" 'BEGIN { printf "%.2f", a / b }')"
    done
done
