// libFuzzer target for everything in mesh/ that parses bytes from the network or from people:
// the frame decoder (fed in the chunk sizes the input chooses), every body decoder, the
// encrypted record layer, invite tokens and discovery beacons. Anything but a clean error is a
// bug: a crash, a sanitizer report, or an allocation beyond the configured limits.
//
//   cmake -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DBRIGADE_FUZZ=ON
//   ninja -C build-fuzz wire_fuzz && ./build-fuzz/tests/wire_fuzz -max_len=70000 -rss_limit_mb=512

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "mesh/discovery.hpp"
#include "mesh/identity.hpp"
#include "mesh/secure_channel.hpp"
#include "mesh/wire.hpp"

namespace {

using namespace brigade::mesh;

// Small limits so the fuzzer explores "too large" paths without huge inputs.
constexpr WireLimits kLimits{4096, 4096, 65536};

void fuzz_frames(ByteSpan data) {
    if (data.empty()) return;
    // The first byte picks the chunk size the bytes arrive in (1..256).
    const std::size_t chunk = static_cast<std::size_t>(data[0]) + 1;
    data = data.subspan(1);
    FrameDecoder decoder(kLimits);
    for (std::size_t pos = 0; pos < data.size(); pos += chunk) {
        decoder.feed(data.subspan(pos, std::min(chunk, data.size() - pos)));
        for (;;) {
            auto next = decoder.next();
            if (!next || !*next) break;
            // Whatever decodes must re-encode to bytes that decode and re-encode identically
            // (compared as bytes: a NaN field is not equal to itself as a double).
            const Bytes again = encode_frame(**next);
            FrameDecoder check(kLimits);
            check.feed(again);
            auto round = check.next();
            if (!round || !*round || encode_frame(**round) != again) __builtin_trap();
        }
        if (decoder.failed()) return;
    }
}

void fuzz_bodies(ByteSpan data) {
    if (data.empty()) return;
    const auto type = static_cast<MsgType>(data[0] % (kMaxMsgType + 2));
    (void)decode_body(type, data.subspan(1), kLimits);
}

void fuzz_records(ByteSpan data) {
    noise::CipherState send;
    noise::CipherState recv;
    noise::Key k{};
    send.initialize_key(k);
    recv.initialize_key(k);
    SecureChannel channel(send, recv, kLimits);
    if (channel.feed(data)) (void)channel.next();
}

void fuzz_text(ByteSpan data) {
    const std::string_view text(reinterpret_cast<const char*>(data.data()), data.size());
    (void)decode_invite_token(text);
    (void)decode_invite_token(std::string("brigade1-") + std::string(text));
    (void)parse_peer_address(text, 8178);
    (void)NodeId::parse(text);
    MeshSecret secret{};
    (void)decode_beacon(beacon_key(secret), data, 0, std::chrono::milliseconds(1) * 0x7fffffff);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const ByteSpan in(data, size);
    fuzz_frames(in);
    fuzz_bodies(in);
    fuzz_records(in);
    fuzz_text(in);
    return 0;
}
