#pragma once
// safetensors reading (formats.md §1): memory-mapped, header validated as strictly as the Rust
// reference reader (size limit, JSON, known dtypes, size == shape × dtype, offsets tile the data
// buffer with no hole or overlap, exact file length). Tensor data is never read here: a stage
// that does not need a tensor never touches its pages.
//
// Tensor data may start at any byte address (MLX writes unpadded headers, formats.md §1.2), so
// consumers must read it with memcpy or unaligned loads.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/errors.hpp"
#include "model/types.hpp"

namespace brigade::model::io {

// The Rust reader's limit on the JSON header (`MAX_HEADER_SIZE`).
inline constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

// Parses a safetensors dtype string. `bits` is set for every dtype of the spec; `dtype` only
// for those `DType` can name (others, e.g. F4 or F8_E8M0, are valid in a file but cannot be
// computed with). Returns false for a string that is not a safetensors dtype.
bool parse_dtype_name(std::string_view name, int& bits, std::optional<DType>& dtype);

struct TensorInfo {
    std::string name;
    std::string dtype_name;      // as written in the header, e.g. "BF16"
    std::optional<DType> dtype;  // nullopt for spec dtypes that `DType` cannot name
    std::vector<std::int64_t> shape;
    std::uint64_t begin = 0;  // offsets relative to the data buffer (byte 8 + N)
    std::uint64_t end = 0;
    const std::byte* data = nullptr;  // begin of this tensor's bytes in the mapping; any alignment

    std::int64_t n_elements() const;
    std::uint64_t n_bytes() const { return end - begin; }
    std::string shape_string() const;  // "[4, 8]"
};

// A read-only mapping of a whole file. Move-only; unmaps itself.
class MappedFile {
public:
    static Result<MappedFile> open(const std::filesystem::path& path);
    MappedFile() = default;
    MappedFile(MappedFile&& o) noexcept;
    MappedFile& operator=(MappedFile&& o) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    ~MappedFile();

    std::span<const std::byte> bytes() const { return {data_, size_}; }

private:
    const std::byte* data_ = nullptr;
    std::size_t size_ = 0;
};

// The tensors described by one safetensors header, validated against the file's length.
// `source` names the file in messages; `data` points at byte 8 + N of the file.
struct ParsedHeader {
    std::map<std::string, TensorInfo> tensors;
    std::map<std::string, std::string> metadata;  // `__metadata__`
    std::uint64_t data_offset = 0;                // 8 + N
};
Result<ParsedHeader> parse_safetensors(std::span<const std::byte> file, const std::string& source);

// One opened safetensors file.
class SafetensorsFile {
public:
    static Result<SafetensorsFile> open(const std::filesystem::path& path);

    const std::filesystem::path& path() const { return path_; }
    const std::map<std::string, TensorInfo>& tensors() const { return header_.tensors; }
    const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
    const TensorInfo* find(const std::string& name) const;

private:
    std::filesystem::path path_;
    std::unique_ptr<MappedFile> file_;  // stable address: TensorInfo::data points into it
    ParsedHeader header_;
};

// A model directory's weights: `model.safetensors.index.json` when present (shards are opened
// only when one of their tensors is first asked for, so a stage never maps shards it does not
// need), else every `model*.safetensors` file in the directory (mlx-lm's rule).
//
// Not thread-safe: the lazy shard cache is filled by `find`/`tensor`.
class Checkpoint {
public:
    static Result<Checkpoint> open(const std::filesystem::path& dir);

    Checkpoint() = default;
    Checkpoint(Checkpoint&&) noexcept = default;
    Checkpoint& operator=(Checkpoint&&) noexcept = default;

    const std::filesystem::path& dir() const { return dir_; }
    // Whether the checkpoint declares a tensor of that name (no file is opened for this when
    // an index exists).
    bool contains(const std::string& name) const;
    // The tensor, or `missing_tensor` naming the tensor and directory, or the error of opening
    // the shard that holds it.
    Result<const TensorInfo*> tensor(const std::string& name);
    // The file a tensor lives in (for messages); empty when unknown.
    std::filesystem::path file_of(const std::string& name) const;
    // All tensor names the checkpoint declares.
    std::vector<std::string> tensor_names() const;
    // Number of shard files opened (mapped and validated) so far.
    std::size_t n_files_opened() const { return files_.size(); }

private:
    std::filesystem::path dir_;
    std::map<std::string, std::string> weight_map_;  // tensor name -> file name (relative)
    std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;  // opened, by file name
};

}  // namespace brigade::model::io
