#!/usr/bin/env bash
# Runs a 64-bit Arm Linux binary under qemu-user (the emulator named by the aarch64 toolchain
# file). The loader and libraries are Debian's arm64 multiarch ones (/lib/ld-linux-aarch64.so.1,
# /lib/aarch64-linux-gnu): the cross toolchain's own copy of glibc in /usr/aarch64-linux-gnu is
# an older build, and its loader with the multiarch libc.so.6 hangs in pthread_create.
exec qemu-aarch64-static "$@"
