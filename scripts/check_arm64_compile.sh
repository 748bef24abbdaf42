#!/usr/bin/env bash
# Compiles the CPU backend (model/cpu/*.cpp) for 64-bit Arm with clang's AArch64 backend, so a
# change that breaks the NEON code paths (Apple silicon, Arm Linux) fails here even though no
# Arm machine is at hand. Twice: with the dot-product extension (the int8 sdot kernel) and
# without it (the portable fallbacks). Object code is produced and thrown away; nothing runs.
#
# There is no Arm sysroot on the build machines, so the host's libstdc++ and glibc headers are
# used. They are architecture-neutral except for two x86-64 selections, which a small shim
# directory overrides: <bits/wordsize.h> (64-bit words) and <gnu/stubs.h>'s 32-bit include.
#
# Exit 77 (skipped) when no clang with the AArch64 target or no libstdc++ headers are found.
set -euo pipefail
cd "$(dirname "$0")/.."

clang=""
for c in clang++ clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++-14; do
    if command -v "$c" >/dev/null 2>&1; then
        clang="$c"
        break
    fi
done
[[ -n "$clang" ]] || { echo "no clang++ found: skipped"; exit 77; }
"$clang" --print-targets 2>/dev/null | grep -q aarch64 ||
    { echo "$clang has no AArch64 target: skipped"; exit 77; }
gcc_version=$(g++ -dumpversion 2>/dev/null || true)
multiarch=$(g++ -print-multiarch 2>/dev/null || true)
cxx_include=/usr/include/c++/$gcc_version
cxx_arch_include=/usr/include/$multiarch/c++/$gcc_version
if [[ -z "$gcc_version" || -z "$multiarch" || ! -d "$cxx_include" || ! -d "$cxx_arch_include" ]]; then
    echo "libstdc++ headers not found: skipped"
    exit 77
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/shim/bits" "$work/shim/gnu"
printf '#define __WORDSIZE 64\n#define __WORDSIZE_TIME64_COMPAT32 1\n#define __SYSCALL_WORDSIZE 64\n' \
    >"$work/shim/bits/wordsize.h"
: >"$work/shim/gnu/stubs-32.h"

flags=(--target=aarch64-linux-gnu -std=c++20 -O1 -Werror=return-type -nostdinc++
       -isystem "$work/shim" -isystem "$cxx_include" -isystem "$cxx_arch_include"
       -isystem "$cxx_include/backward" -idirafter "/usr/include/$multiarch" -I .)
mapfile -t sources < <(ls model/cpu/*.cpp)
failed=0
for march in armv8.2-a+dotprod armv8-a; do
    for src in "${sources[@]}"; do
        obj="$work/$(basename "$src" .cpp)-$march.o"
        if ! "$clang" "${flags[@]}" -march="$march" -c "$src" -o "$obj"; then
            echo "FAILED: $src (-march=$march)"
            failed=1
        fi
    done
done
# The dot-product kernels must really be in the first build (their files compile to nothing
# when the compiler does not announce the extension).
for kernel in matmul_int8_neon:gemv_rows_neon_dot matmul_split_int8_neon:gemv_neon_dot; do
    if ! nm -C "$work/${kernel%%:*}-armv8.2-a+dotprod.o" 2>/dev/null | grep -q "${kernel#*:}"; then
        echo "FAILED: the NEON dot-product kernel ${kernel#*:} was not compiled"
        failed=1
    fi
done
[[ $failed == 0 ]] || exit 1
echo "arm64: ${#sources[@]} files compiled for armv8.2-a+dotprod and armv8-a with $clang"
