#pragma once
// Explicit little-endian encoding for the wire (never memcpy of structs: layout and byte order
// would then depend on the compiler and the CPU). `ByteReader` never reads past its span and never
// allocates more than the bytes that are actually left, so a lying length cannot make it allocate.

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace brigade::mesh {

using Bytes = std::vector<std::uint8_t>;
using ByteSpan = std::span<const std::uint8_t>;

class ByteWriter {
public:
    explicit ByteWriter(Bytes& out) : out_(out) {}

    void u8(std::uint8_t v) { raw({&v, 1}); }
    void u16(std::uint16_t v) { put_le(v, 2); }
    void u32(std::uint32_t v) { put_le(v, 4); }
    void u64(std::uint64_t v) { put_le(v, 8); }
    void i32(std::int32_t v) { u32(static_cast<std::uint32_t>(v)); }
    void f32(float v) { u32(std::bit_cast<std::uint32_t>(v)); }
    void f64(double v) { u64(std::bit_cast<std::uint64_t>(v)); }
    // Grown by resize and filled by memcpy: GCC 12 warned of an overflow, falsely, where
    // push_back and insert were inlined into a writer of a fresh vector.
    void raw(ByteSpan b) {
        if (b.empty()) return;
        const std::size_t at = out_.size();
        out_.resize(at + b.size());
        std::memcpy(out_.data() + at, b.data(), b.size());
    }
    // u32 length, then the bytes.
    void blob(ByteSpan b) {
        u32(static_cast<std::uint32_t>(b.size()));
        raw(b);
    }
    void str(std::string_view s) {
        blob({reinterpret_cast<const std::uint8_t*>(s.data()), s.size()});
    }
    template <std::size_t N>
    void array(const std::array<std::uint8_t, N>& a) {
        raw(a);
    }

private:
    void put_le(std::uint64_t v, int n) {
        std::uint8_t le[8];
        for (int i = 0; i < n; ++i) le[i] = static_cast<std::uint8_t>(v >> (8 * i));
        raw({le, static_cast<std::size_t>(n)});
    }
    Bytes& out_;
};

// Reads little-endian values; the first short read sets a sticky failure flag and every later
// read returns zero values, so decoders check `ok()` once at the end.
class ByteReader {
public:
    explicit ByteReader(ByteSpan in) : in_(in) {}

    bool ok() const { return ok_; }
    std::size_t remaining() const { return ok_ ? in_.size() - pos_ : 0; }
    void fail() { ok_ = false; }

    std::uint8_t u8() { return static_cast<std::uint8_t>(get_le(1)); }
    std::uint16_t u16() { return static_cast<std::uint16_t>(get_le(2)); }
    std::uint32_t u32() { return static_cast<std::uint32_t>(get_le(4)); }
    std::uint64_t u64() { return get_le(8); }
    std::int32_t i32() { return static_cast<std::int32_t>(u32()); }
    float f32() { return std::bit_cast<float>(u32()); }
    double f64() { return std::bit_cast<double>(u64()); }

    // A view of the next n bytes (empty and failed if fewer remain).
    ByteSpan raw(std::size_t n) {
        if (!ok_ || n > in_.size() - pos_) {
            ok_ = false;
            return {};
        }
        ByteSpan s = in_.subspan(pos_, n);
        pos_ += n;
        return s;
    }
    // u32 length, checked against `max_bytes` and the bytes left before anything is allocated.
    Bytes blob(std::size_t max_bytes) {
        const std::uint32_t n = u32();
        if (n > max_bytes) {
            ok_ = false;
            return {};
        }
        ByteSpan s = raw(n);
        return Bytes(s.begin(), s.end());
    }
    std::string str(std::size_t max_bytes) {
        const std::uint32_t n = u32();
        if (n > max_bytes) {
            ok_ = false;
            return {};
        }
        ByteSpan s = raw(n);
        return std::string(reinterpret_cast<const char*>(s.data()), s.size());
    }
    template <std::size_t N>
    std::array<std::uint8_t, N> array() {
        std::array<std::uint8_t, N> a{};
        ByteSpan s = raw(N);
        if (!s.empty()) std::memcpy(a.data(), s.data(), N);
        return a;
    }
    // A count of elements that each take at least `min_element_bytes`: fails (returning 0) when
    // the bytes left cannot possibly hold that many, so callers may `reserve(count)` safely.
    std::size_t count(std::size_t max_count, std::size_t min_element_bytes) {
        const std::uint32_t n = u32();
        if (!ok_ || n > max_count ||
            (min_element_bytes > 0 && n > remaining() / min_element_bytes)) {
            ok_ = false;
            return 0;
        }
        return n;
    }

private:
    std::uint64_t get_le(int n) {
        if (!ok_ || static_cast<std::size_t>(n) > in_.size() - pos_) {
            ok_ = false;
            return 0;
        }
        std::uint64_t v = 0;
        for (int i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(in_[pos_ + i]) << (8 * i);
        pos_ += n;
        return v;
    }

    ByteSpan in_;
    std::size_t pos_ = 0;
    bool ok_ = true;
};

inline std::string to_hex(ByteSpan b) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string s;
    s.reserve(b.size() * 2);
    for (std::uint8_t v : b) {
        s.push_back(kDigits[v >> 4]);
        s.push_back(kDigits[v & 15]);
    }
    return s;
}

}  // namespace brigade::mesh
