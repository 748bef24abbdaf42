#include "mesh/secure_channel.hpp"

#include <algorithm>

namespace brigade::mesh {

SecureChannel::SecureChannel(noise::CipherState send, noise::CipherState recv, WireLimits limits)
    : send_(std::move(send)), recv_(std::move(recv)), frames_(limits) {}

Result<void> SecureChannel::seal(const Message& m, Bytes& out) {
    Bytes plain;
    append_frame(plain, m);
    return seal_bytes(plain, out);
}

Result<void> SecureChannel::seal_bytes(ByteSpan plaintext, Bytes& out) {
    const std::size_t n_records =
        (plaintext.size() + kMaxRecordPlaintext - 1) / kMaxRecordPlaintext;
    const std::size_t needed =
        out.size() + plaintext.size() + n_records * (kRecordHeaderBytes + noise::kTagLen);
    // Grow geometrically: an outbox that queues many frames must not be reallocated (and
    // copied) once per frame, which made a 512 MiB burst quadratic.
    if (out.capacity() < needed) out.reserve(std::max(needed, 2 * out.capacity()));
    std::size_t pos = 0;
    while (pos < plaintext.size()) {
        const std::size_t n = std::min(kMaxRecordPlaintext, plaintext.size() - pos);
        const std::size_t ct = n + noise::kTagLen;
        out.push_back(static_cast<std::uint8_t>(ct));
        out.push_back(static_cast<std::uint8_t>(ct >> 8));
        if (auto r = send_.encrypt_with_ad({}, plaintext.subspan(pos, n), out); !r) return r;
        pos += n;
    }
    return {};
}

Result<void> SecureChannel::feed(ByteSpan ciphertext) {
    if (failed_) return *failed_;
    if (pending_offset_ > 0 && pending_offset_ >= pending_.size() / 2) {
        pending_.erase(pending_.begin(),
                       pending_.begin() + static_cast<std::ptrdiff_t>(pending_offset_));
        pending_offset_ = 0;
    }
    pending_.insert(pending_.end(), ciphertext.begin(), ciphertext.end());
    while (pending_.size() - pending_offset_ >= kRecordHeaderBytes) {
        const std::uint8_t* p = pending_.data() + pending_offset_;
        const std::size_t ct =
            static_cast<std::size_t>(p[0]) | (static_cast<std::size_t>(p[1]) << 8);
        if (ct < noise::kTagLen + 1) {
            failed_ = make_error(errc::decrypt_failed, "record shorter than its tag");
            return *failed_;
        }
        if (pending_.size() - pending_offset_ < kRecordHeaderBytes + ct) break;
        plain_.clear();
        if (auto r = recv_.decrypt_with_ad({}, ByteSpan(p + kRecordHeaderBytes, ct), plain_); !r) {
            failed_ = make_error(errc::decrypt_failed, "record " + std::to_string(recv_.nonce()) +
                                                           ": " + r.error().message);
            return *failed_;
        }
        pending_offset_ += kRecordHeaderBytes + ct;
        frames_.feed(plain_);
    }
    if (pending_offset_ == pending_.size()) {
        pending_.clear();
        pending_offset_ = 0;
    }
    return {};
}

}  // namespace brigade::mesh
