#pragma once
// Internals of the int8-activation decode GEMV shared by matmul_int8.cpp (portable parts,
// selection), matmul_int8_x86.cpp (AVX2 / AVX-VNNI / AVX-512 VNNI) and matmul_int8_neon.cpp.
// The public entry points are in kernels.hpp.
//
// Activation layout (one row of xq per token, `cols` bytes): 8-bit weights take x in element
// order. 4-bit rows are read in chunks of kInt8ChunkBytes bytes from the row start (the last
// chunk of a row may be shorter: 16 bytes when a row holds an odd number of 16-byte groups);
// a chunk of k bytes holds 2k elements, the low nibbles (even elements) and the high nibbles
// (odd elements). xq stores a chunk's even elements first, then its odd ones, so that the
// nibbles split in registers meet their activations with plain loads:
//     slot(2j)   = 2 * chunk_start + (j - chunk_start)
//     slot(2j+1) = 2 * chunk_start + k + (j - chunk_start)      (j = byte index in the row)
// Every variant (scalar included) reads this one layout.

#include <algorithm>
#include <cstdint>

#include "model/cpu/kernels.hpp"

#if defined(__x86_64__) || defined(_M_X64)
#define BRIGADE_INT8_X86 1
#else
#define BRIGADE_INT8_X86 0
#endif
// NEON dot products are compiled only where the compiler targets them already (e.g. Apple
// silicon, -march=armv8.2-a+dotprod); elsewhere Arm runs the scalar variant.
#if defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)
#define BRIGADE_INT8_NEON_DOT 1
#else
#define BRIGADE_INT8_NEON_DOT 0
#endif

namespace brigade::model::cpu::int8_detail {

inline constexpr std::int64_t kInt8ChunkBytes = 32;

// Bytes of the 4-bit chunk that starts at byte `chunk_start` of a row of `row_bytes` bytes.
inline std::int64_t chunk_bytes(std::int64_t chunk_start, std::int64_t row_bytes) {
    return std::min(kInt8ChunkBytes, row_bytes - chunk_start);
}

// The row kernels' view of one matmul.
struct Int8Rows {
    const WeightMatrix& w;
    const Int8Activations& xa;
};

// Scalar quantizer and kernel (matmul_int8.cpp): the definition of the numbers.
void quantize_scalar(const WeightMatrix& w, const float* x, std::int64_t begin, std::int64_t end,
                     std::int8_t* xq, float* step, float* sum, std::int32_t* qsum);
void gemv_rows_scalar(const Int8Rows& m, std::int64_t n, std::int64_t row_begin,
                      std::int64_t row_end, const WeightVector* bias, float* y, std::int64_t ldy);

#if BRIGADE_INT8_X86
// CPUID and XCR0 read directly (matmul_int8_x86.cpp): compilers' __builtin_cpu_supports differ
// in the feature names they know (clang 14 has no "f16c" or "avxvnni").
struct Regs {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
};
Regs cpuid(unsigned leaf, unsigned subleaf);
bool bit(unsigned v, int i);
// Whether the OS saves the register state of `mask` (XCR0 bits) across context switches.
bool os_saves(unsigned mask);
// What this CPU (and OS) can run.
bool cpu_has_avx2();
bool cpu_has_avx_vnni();
bool cpu_has_avx512_vnni();
// AVX2 quantizer: the same xq, step and qsum as quantize_scalar (same f32 operations), sums
// in another order.
void quantize_avx2(const WeightMatrix& w, const float* x, std::int64_t begin, std::int64_t end,
                   std::int8_t* xq, float* step, float* sum, std::int32_t* qsum);
void gemv_rows_avx2(const Int8Rows& m, std::int64_t n, std::int64_t row_begin, std::int64_t row_end,
                    const WeightVector* bias, float* y, std::int64_t ldy);
// The VNNI variants' kernel with vpdpbusd emulated by AVX2 (needs AVX2): for tests only.
void gemv_rows_vnni_emulated(const Int8Rows& m, std::int64_t n, std::int64_t row_begin,
                             std::int64_t row_end, const WeightVector* bias, float* y,
                             std::int64_t ldy);
void gemv_rows_avx_vnni(const Int8Rows& m, std::int64_t n, std::int64_t row_begin,
                        std::int64_t row_end, const WeightVector* bias, float* y, std::int64_t ldy);
void gemv_rows_avx512_vnni(const Int8Rows& m, std::int64_t n, std::int64_t row_begin,
                           std::int64_t row_end, const WeightVector* bias, float* y,
                           std::int64_t ldy);
#endif

#if BRIGADE_INT8_NEON_DOT
void gemv_rows_neon_dot(const Int8Rows& m, std::int64_t n, std::int64_t row_begin,
                        std::int64_t row_end, const WeightVector* bias, float* y, std::int64_t ldy);
#endif

}  // namespace brigade::model::cpu::int8_detail
