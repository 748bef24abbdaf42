// libFuzzer target: safetensors headers and model configs from untrusted bytes. Parsing must
// return a Result (never crash, never read outside the buffer); a file that parses must
// describe tensors that lie inside it.
//
//   cmake -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DBRIGADE_FUZZ=ON
//   ninja -C build-fuzz safetensors_fuzz && ./build-fuzz/tests/safetensors_fuzz -max_len=4096
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "model/io/safetensors.hpp"
#include "model/model_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
    auto parsed = brigade::model::io::parse_safetensors(bytes, "fuzz.safetensors");
    if (parsed) {
        for (const auto& [name, t] : parsed->tensors) {
            if (t.data < bytes.data() || t.data + t.n_bytes() > bytes.data() + bytes.size()) {
                __builtin_trap();
            }
            // Touch the first and last byte, as a consumer would.
            if (t.n_bytes() > 0) {
                volatile std::byte first = t.data[0];
                volatile std::byte last = t.data[t.n_bytes() - 1];
                (void)first;
                (void)last;
            }
        }
    }
    (void)brigade::model::parse_model_config(std::string(reinterpret_cast<const char*>(data), size),
                                             "fuzz/config.json");
    return 0;
}
