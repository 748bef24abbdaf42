#pragma once
// Frame codec, sans-io. A frame is an 8-byte header followed by a body:
//
//   u32 body_bytes | u16 type | u16 flags (must be 0 in protocol 1.x) | body
//
// all little-endian. `FrameDecoder` takes bytes as they arrive and yields whole messages or a
// precise error; it checks the type and the per-type size limit from the header before it
// reserves any memory for the body. Bodies are decoded field by field; a newer minor version may
// append fields to a body, so bytes after the fields this version knows are ignored.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "mesh/bytes.hpp"
#include "mesh/errors.hpp"
#include "mesh/messages.hpp"

namespace brigade::mesh {

inline constexpr std::size_t kFrameHeaderBytes = 8;

struct WireLimits {
    std::uint32_t max_control_bytes = 1u << 20;       // Hello, gossip, plans, acks, errors
    std::uint32_t max_token_bytes = 1u << 20;         // Request/Token frames (sampler state)
    std::uint32_t max_activation_bytes = 256u << 20;  // hidden states of a prefill micro-batch

    std::uint32_t limit_for(MsgType t) const;
};

// Appends header + body of `m` to `out`.
void append_frame(Bytes& out, const Message& m);
Bytes encode_frame(const Message& m);
// Decodes one body of the given type (no header).
Result<Message> decode_body(MsgType type, ByteSpan body, const WireLimits& limits = {});

class FrameDecoder {
public:
    explicit FrameDecoder(WireLimits limits = {}) : limits_(limits) {}

    // Appends received bytes. Memory grows only with bytes actually received plus, once a valid
    // header is seen, a reservation of at most that frame's (limit-checked) length.
    void feed(ByteSpan bytes);
    // The next whole message, nullopt when more bytes are needed, or an error. Errors are sticky:
    // after one, the stream is unusable and the link must close.
    Result<std::optional<Message>> next();
    // Bytes held that do not yet form a whole frame (non-zero at EOF means truncation).
    std::size_t buffered_bytes() const { return buffer_.size() - offset_; }
    bool failed() const { return failed_.has_value(); }

private:
    WireLimits limits_;
    Bytes buffer_;
    std::size_t offset_ = 0;
    std::optional<Error> failed_;
};

// BF16 is the top half of an IEEE f32. Round to nearest, ties to even; NaN stays NaN (quiet).
std::uint16_t f32_to_bf16(float f);
float bf16_to_f32(std::uint16_t b);
// Bulk conversions into little-endian byte payloads ([n] elements).
void f32_to_bf16_bytes(std::span<const float> in, std::uint8_t* out);
void bf16_bytes_to_f32(const std::uint8_t* in, std::span<float> out);
// Builds an activation payload from f32 hidden states in the chosen dtype, and back.
std::vector<std::uint8_t> encode_activations(std::span<const float> hidden, ActivationDType dtype);
Result<std::vector<float>> decode_activations(const ActivationFrame& frame);

}  // namespace brigade::mesh
