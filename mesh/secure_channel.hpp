#pragma once
// The encrypted record layer of a link, sans-io (PROTOCOL.md §3). After the handshake, the byte
// stream each way is a sequence of records:
//
//   u16 ciphertext_bytes (little-endian, 16..65535) | ChaCha20-Poly1305 ciphertext (tag included)
//
// each encrypted with that direction's CipherState (nonce = record counter). The plaintexts,
// concatenated, form the frame stream that `FrameDecoder` reads. A record that is altered,
// replayed, reordered or dropped fails authentication, and the channel fails for good.

#include <optional>

#include "mesh/handshake.hpp"
#include "mesh/wire.hpp"

namespace brigade::mesh {

inline constexpr std::size_t kRecordHeaderBytes = 2;
inline constexpr std::size_t kMaxRecordPlaintext = noise::kMaxMessageLen - noise::kTagLen;

class SecureChannel {
public:
    SecureChannel(noise::CipherState send, noise::CipherState recv, WireLimits limits = {});

    // Appends the records carrying `m` to `out`.
    Result<void> seal(const Message& m, Bytes& out);
    // Appends records carrying already-encoded frame bytes.
    Result<void> seal_bytes(ByteSpan plaintext, Bytes& out);

    // Feeds received ciphertext. An authentication failure is returned here and is final.
    Result<void> feed(ByteSpan ciphertext);
    // The next decrypted message, if a whole one has arrived.
    Result<std::optional<Message>> next() { return frames_.next(); }
    // Bytes of an incomplete record or frame (non-zero at EOF means the stream was truncated).
    std::size_t pending_bytes() const {
        return (pending_.size() - pending_offset_) + frames_.buffered_bytes();
    }

    std::uint64_t records_sent() const { return send_.nonce(); }
    std::uint64_t records_received() const { return recv_.nonce(); }

private:
    noise::CipherState send_;
    noise::CipherState recv_;
    FrameDecoder frames_;
    Bytes pending_;  // ciphertext of an incomplete record
    std::size_t pending_offset_ = 0;
    Bytes plain_;  // scratch
    std::optional<Error> failed_;
};

}  // namespace brigade::mesh
