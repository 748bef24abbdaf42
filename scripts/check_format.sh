#!/usr/bin/env bash
# Fails if any tracked C++ file differs from what clang-format (style: .clang-format) makes of it.
# Exit 77 (skipped) when clang-format or git is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null 2>&1 || { echo "clang-format not found: skipped"; exit 77; }
git rev-parse --git-dir >/dev/null 2>&1 || { echo "not a git checkout: skipped"; exit 77; }
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh')
clang-format --dry-run --Werror "${files[@]}"
echo "format: ${#files[@]} files clean"
