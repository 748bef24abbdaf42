#pragma once
// Which Highway targets the CPU kernels are compiled for. Included before <hwy/highway.h> in
// every kernel file (and in tests that enumerate targets) so all agree.
//
// SSSE3 adds nothing over SSE4 for these kernels and AVX3_DL nothing over AVX3 (the f32
// kernels use no VNNI/VBMI), so both are skipped to halve compile time on small build machines.
// SVE/SVE2 and RVV are skipped because their vectors are sizeless types that cannot be struct
// members, which the kernels use for named accumulator sets; Arm runs the NEON code (Apple
// silicon has no SVE anyway).

#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS \
    (HWY_SSSE3 | HWY_AVX3_DL | HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128 | HWY_RVV)
#endif
