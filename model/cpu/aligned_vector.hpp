#pragma once
// std::vector with its elements on 64-byte boundaries: the CPU kernels' activation buffers.
//
// Why: a kernel loads each activation vector many times (once per weight row, or per row tile;
// an AMX kernel its B tiles once per row block), and a 64-byte load that straddles two cache
// lines costs two. std::vector's storage comes from malloc, which aligns to 16 bytes only (and
// for large sizes returns a page start plus 16), so whether those loads split depended on where
// the heap happened to put a buffer. Measured (bench/RESULTS.md, session 25): here (Zen 4, one
// thread) 4 tokens on a 4-bit 8192x2048 matrix took 1270 us aligned against 1622 us 16 bytes
// past a line; on the lent Xeon, AMX batches of 4 decoded 2-17% faster in all 8 alternated pairs.

#include <cstddef>
#include <new>
#include <vector>

namespace brigade::model::cpu {

inline constexpr std::size_t kActivationAlignment = 64;

template <class T>
struct AlignedAllocator {
    using value_type = T;
    AlignedAllocator() = default;
    template <class U>
    AlignedAllocator(const AlignedAllocator<U>&) noexcept {}
    T* allocate(std::size_t n) {
        return static_cast<T*>(
            ::operator new (n * sizeof(T), std::align_val_t{kActivationAlignment}));
    }
    // The unsized form: clang (before 19) does not declare sized deallocation by default.
    void deallocate(T* p, std::size_t) noexcept {
        ::operator delete (p, std::align_val_t{kActivationAlignment});
    }
    template <class U>
    bool operator==(const AlignedAllocator<U>&) const noexcept {
        return true;
    }
};

template <class T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

}  // namespace brigade::model::cpu
