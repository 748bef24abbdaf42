# CMake toolchain for a 64-bit Arm Linux build on an x86-64 Debian machine (Debian's
# g++-aarch64-linux-gnu, the arm64 -dev packages through multiarch, qemu-user-static to run).
# scripts/test_arm64.sh uses it to run the CPU backend's tests under emulation; nothing here is
# needed on a real Arm machine.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
# pkg-config must see only the arm64 .pc files (and the architecture-independent ones).
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
# Test discovery and ctest start the binaries through the emulator.
set(CMAKE_CROSSCOMPILING_EMULATOR ${CMAKE_CURRENT_LIST_DIR}/qemu-aarch64.sh)
