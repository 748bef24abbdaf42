#include "model/io/safetensors_writer.hpp"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/cpu/weight_decode.hpp"

namespace brigade::model::io {

std::string serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                  const SafetensorsWriteOptions& options) {
    // nlohmann's ordered_json keeps the insertion order, so the header lists tensors in the
    // order they are laid out (readers must not rely on it, but it makes files reproducible).
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!options.metadata.empty()) {
        nlohmann::ordered_json meta = nlohmann::ordered_json::object();
        for (const auto& [k, v] : options.metadata) meta[k] = v;
        header["__metadata__"] = meta;
    }
    std::uint64_t offset = 0;
    for (const auto& t : tensors) {
        header[t.name] = {{"dtype", t.dtype},
                          {"shape", t.shape},
                          {"data_offsets", {offset, offset + t.bytes.size()}}};
        offset += t.bytes.size();
    }
    std::string text = header.dump();
    if (options.pad_header) {
        while ((8 + text.size()) % 8 != 0) text.push_back(' ');
    }
    std::string out;
    out.reserve(8 + text.size() + offset);
    std::uint64_t n = text.size();
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
    out += text;
    for (const auto& t : tensors) out += t.bytes;
    return out;
}

Result<void> write_safetensors(const std::filesystem::path& path,
                               const std::vector<TensorToWrite>& tensors,
                               const SafetensorsWriteOptions& options) {
    const std::string bytes = serialize_safetensors(tensors, options);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) return make_error(errc::io_error, path.string() + ": cannot create");
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) return make_error(errc::io_error, path.string() + ": write failed");
    return {};
}

void append_float_bytes(std::string& out, const std::string& dtype, const float* values,
                        std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
        if (dtype == "F32") {
            char b[4];
            std::memcpy(b, &values[i], 4);
            out.append(b, 4);
        } else {
            const std::uint16_t h =
                dtype == "F16" ? cpu::f32_to_f16(values[i]) : cpu::f32_to_bf16(values[i]);
            out.push_back(static_cast<char>(h & 0xFF));
            out.push_back(static_cast<char>(h >> 8));
        }
    }
}

}  // namespace brigade::model::io
