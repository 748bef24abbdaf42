#include "model/io/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace brigade::model::io {
namespace {

using nlohmann::json;

Error format_error(const std::string& source, const std::string& what) {
    return make_error(errc::bad_format, source + ": " + what);
}

std::uint64_t read_le_u64(const std::byte* p) {
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint64_t>(p[i]);
    return v;
}

}  // namespace

bool parse_dtype_name(std::string_view name, int& bits, std::optional<DType>& dtype) {
    struct Entry {
        std::string_view name;
        int bits;
        std::optional<DType> dtype;
    };
    static constexpr Entry kTable[] = {
        {"BOOL", 8, DType::kBool},
        {"U8", 8, DType::kU8},
        {"I8", 8, DType::kI8},
        {"U16", 16, DType::kU16},
        {"I16", 16, DType::kI16},
        {"F16", 16, DType::kF16},
        {"BF16", 16, DType::kBF16},
        {"U32", 32, DType::kU32},
        {"I32", 32, DType::kI32},
        {"F32", 32, DType::kF32},
        {"U64", 64, DType::kU64},
        {"I64", 64, DType::kI64},
        {"F64", 64, DType::kF64},
        {"C64", 64, std::nullopt},
        {"F8_E4M3", 8, DType::kF8E4M3},
        {"F8_E5M2", 8, DType::kF8E5M2},
        {"F8_E8M0", 8, std::nullopt},
        {"F8_E4M3FNUZ", 8, std::nullopt},
        {"F8_E5M2FNUZ", 8, std::nullopt},
        {"F6_E2M3", 6, std::nullopt},
        {"F6_E3M2", 6, std::nullopt},
        {"F4", 4, std::nullopt},
    };
    for (const auto& e : kTable) {
        if (e.name == name) {
            bits = e.bits;
            dtype = e.dtype;
            return true;
        }
    }
    return false;
}

std::int64_t TensorInfo::n_elements() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

std::string TensorInfo::shape_string() const {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i != 0) s += ", ";
        s += std::to_string(shape[i]);
    }
    return s + "]";
}

// ---- MappedFile -------------------------------------------------------------------------

Result<MappedFile> MappedFile::open(const std::filesystem::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return make_error(errc::io_error, path.string() + ": cannot open: " + std::strerror(errno));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int e = errno;
        ::close(fd);
        return make_error(errc::io_error, path.string() + ": cannot stat: " + std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        return make_error(errc::io_error, path.string() + ": not a regular file");
    }
    MappedFile m;
    m.size_ = static_cast<std::size_t>(st.st_size);
    if (m.size_ > 0) {
        void* p = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            const int e = errno;
            ::close(fd);
            return make_error(errc::io_error, path.string() + ": mmap failed: " + std::strerror(e));
        }
        m.data_ = static_cast<const std::byte*>(p);
    }
    ::close(fd);  // the mapping keeps the file alive
    return m;
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
    if (this != &o) {
        if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
        data_ = std::exchange(o.data_, nullptr);
        size_ = std::exchange(o.size_, 0);
    }
    return *this;
}

MappedFile::~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
}

// ---- header parsing ---------------------------------------------------------------------

Result<ParsedHeader> parse_safetensors(std::span<const std::byte> file, const std::string& source) {
    if (file.size() < 8) {
        return format_error(source, "truncated: " + std::to_string(file.size()) +
                                        " bytes, too short for the 8-byte header length");
    }
    const std::uint64_t n = read_le_u64(file.data());
    if (n > kMaxHeaderBytes) {
        return format_error(source, "header length " + std::to_string(n) +
                                        " exceeds the limit of " + std::to_string(kMaxHeaderBytes) +
                                        " bytes");
    }
    if (n < 2) return format_error(source, "header length " + std::to_string(n) + " is too small");
    if (n > file.size() - 8) {
        return format_error(source, "truncated: header length " + std::to_string(n) +
                                        " runs past the end of the " + std::to_string(file.size()) +
                                        "-byte file");
    }
    const auto* header_begin = reinterpret_cast<const char*>(file.data() + 8);
    const std::string_view header_text(header_begin, n);
    if (header_text.front() != '{') return format_error(source, "header does not start with '{'");

    // Duplicate top-level keys are forbidden by the spec but silently merged by most JSON
    // parsers; catch them with the parser callback.
    std::set<std::string> seen;
    bool duplicate = false;
    std::string duplicate_name;
    json::parser_callback_t on_event = [&](int depth, json::parse_event_t event, json& parsed) {
        if (depth == 1 && event == json::parse_event_t::key) {
            auto name = parsed.get<std::string>();
            if (!seen.insert(name).second && !duplicate) {
                duplicate = true;
                duplicate_name = name;
            }
        }
        return true;
    };
    const json j = json::parse(header_text.begin(), header_text.end(), on_event,
                               /*allow_exceptions=*/false);
    if (j.is_discarded()) return format_error(source, "header is not valid UTF-8 JSON");
    if (!j.is_object()) return format_error(source, "header is not a JSON object");
    if (duplicate) return format_error(source, "header repeats tensor \"" + duplicate_name + "\"");

    ParsedHeader out;
    out.data_offset = 8 + n;
    const std::uint64_t data_bytes = file.size() - out.data_offset;
    const std::byte* data = file.data() + out.data_offset;

    for (const auto& [name, entry] : j.items()) {
        if (name == "__metadata__") {
            if (!entry.is_object()) return format_error(source, "__metadata__ is not an object");
            for (const auto& [k, v] : entry.items()) {
                if (!v.is_string()) {
                    return format_error(source,
                                        "__metadata__ value of \"" + k + "\" is not a string");
                }
                out.metadata[k] = v.get<std::string>();
            }
            continue;
        }
        const std::string where = "tensor \"" + name + "\"";
        if (!entry.is_object()) return format_error(source, where + ": entry is not an object");
        auto dt = entry.find("dtype");
        auto sh = entry.find("shape");
        auto off = entry.find("data_offsets");
        if (dt == entry.end() || !dt->is_string()) {
            return format_error(source, where + ": missing \"dtype\"");
        }
        if (sh == entry.end() || !sh->is_array()) {
            return format_error(source, where + ": missing \"shape\"");
        }
        if (off == entry.end() || !off->is_array() || off->size() != 2) {
            return format_error(source, where + ": \"data_offsets\" must be [begin, end]");
        }
        TensorInfo t;
        t.name = name;
        t.dtype_name = dt->get<std::string>();
        int bits = 0;
        if (!parse_dtype_name(t.dtype_name, bits, t.dtype)) {
            return make_error(errc::unsupported_dtype,
                              source + ": " + where + ": unknown dtype \"" + t.dtype_name + "\"");
        }
        // Element count with overflow checks: every product stays below 2^62.
        unsigned __int128 n_elements = 1;
        for (const auto& d : *sh) {
            if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<std::int64_t>() >= 0)) {
                return format_error(source,
                                    where + ": shape entries must be non-negative integers");
            }
            const auto dim = d.get<std::uint64_t>();
            t.shape.push_back(static_cast<std::int64_t>(dim));
            n_elements *= dim;
            if (n_elements > (static_cast<unsigned __int128>(1) << 62)) {
                return format_error(source, where + ": shape " + sh->dump() + " is too large");
            }
        }
        for (const auto& o : *off) {
            if (!o.is_number_unsigned() && !(o.is_number_integer() && o.get<std::int64_t>() >= 0)) {
                return format_error(source, where + ": data_offsets must be non-negative integers");
            }
        }
        t.begin = (*off)[0].get<std::uint64_t>();
        t.end = (*off)[1].get<std::uint64_t>();
        if (t.end < t.begin) {
            return format_error(source, where + ": data_offsets end " + std::to_string(t.end) +
                                            " < begin " + std::to_string(t.begin));
        }
        const unsigned __int128 n_bits = n_elements * static_cast<unsigned>(bits);
        if (n_bits % 8 != 0) {
            return format_error(source, where + ": " + t.dtype_name + " shape " + sh->dump() +
                                            " is not a whole number of bytes");
        }
        if (n_bits / 8 != t.end - t.begin) {
            return format_error(source, where + ": header says " + std::to_string(t.end - t.begin) +
                                            " bytes but " + t.dtype_name + " " + t.shape_string() +
                                            " needs " +
                                            std::to_string(static_cast<std::uint64_t>(n_bits / 8)));
        }
        if (t.end > data_bytes) {
            return format_error(source,
                                where + ": data_offsets [" + std::to_string(t.begin) + ", " +
                                    std::to_string(t.end) + "] run past the end of the data (" +
                                    std::to_string(data_bytes) + " bytes; file truncated?)");
        }
        t.data = data + t.begin;
        out.tensors.emplace(name, std::move(t));
    }

    // The tensors must tile the data buffer: no hole, no overlap, nothing after the last one.
    std::vector<const TensorInfo*> order;
    order.reserve(out.tensors.size());
    for (const auto& [name, t] : out.tensors) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](const TensorInfo* a, const TensorInfo* b) {
        return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
    });
    std::uint64_t expected = 0;
    const TensorInfo* previous = nullptr;
    for (const TensorInfo* t : order) {
        if (t->begin != expected) {
            const std::string what = t->begin < expected ? "overlaps" : "leaves a hole after";
            return format_error(source, "tensor \"" + t->name + "\" at offset " +
                                            std::to_string(t->begin) + " " + what + " " +
                                            (previous ? "tensor \"" + previous->name + "\""
                                                      : std::string("the start of the data")));
        }
        expected = t->end;
        previous = t;
    }
    if (expected != data_bytes) {
        return format_error(source, "file is " + std::to_string(file.size()) +
                                        " bytes but its header accounts for " +
                                        std::to_string(out.data_offset + expected) +
                                        " (trailing bytes)");
    }
    return out;
}

// ---- SafetensorsFile --------------------------------------------------------------------

Result<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
    auto mapped = MappedFile::open(path);
    if (!mapped) return mapped.error();
    SafetensorsFile f;
    f.path_ = path;
    f.file_ = std::make_unique<MappedFile>(std::move(*mapped));
    auto header = parse_safetensors(f.file_->bytes(), path.string());
    if (!header) return header.error();
    f.header_ = std::move(*header);
    return f;
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
    auto it = header_.tensors.find(name);
    return it == header_.tensors.end() ? nullptr : &it->second;
}

// ---- Checkpoint -------------------------------------------------------------------------

Result<Checkpoint> Checkpoint::open(const std::filesystem::path& dir) {
    Checkpoint c;
    c.dir_ = dir;
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) {
        return make_error(errc::io_error, dir.string() + ": not a directory");
    }
    const auto index_path = dir / "model.safetensors.index.json";
    if (std::filesystem::exists(index_path, ec)) {
        std::ifstream in(index_path, std::ios::binary);
        if (!in) return make_error(errc::io_error, index_path.string() + ": cannot open");
        std::stringstream ss;
        ss << in.rdbuf();
        const json j = json::parse(ss.str(), nullptr, false);
        if (j.is_discarded() || !j.is_object()) {
            return format_error(index_path.string(), "not a valid JSON object");
        }
        auto wm = j.find("weight_map");
        if (wm == j.end() || !wm->is_object()) {
            return format_error(index_path.string(), "missing \"weight_map\" object");
        }
        for (const auto& [name, file] : wm->items()) {
            if (!file.is_string()) {
                return format_error(index_path.string(),
                                    "weight_map entry of \"" + name + "\" is not a file name");
            }
            const auto file_name = file.get<std::string>();
            // A shard must sit in the model directory itself: no path separators, no "..".
            if (file_name.empty() || file_name.find('/') != std::string::npos ||
                file_name.find('\\') != std::string::npos || file_name == "." ||
                file_name == "..") {
                return format_error(index_path.string(), "weight_map entry of \"" + name +
                                                             "\" names an invalid file \"" +
                                                             file_name + "\"");
            }
            c.weight_map_[name] = file_name;
        }
        return c;
    }
    // No index: every model*.safetensors in the directory, merged (mlx-lm's loader).
    std::vector<std::string> files;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
        const auto name = entry.path().filename().string();
        if (name.rfind("model", 0) == 0 && entry.path().extension() == ".safetensors") {
            files.push_back(name);
        }
    }
    if (ec) return make_error(errc::io_error, dir.string() + ": cannot list: " + ec.message());
    if (files.empty()) {
        return make_error(errc::io_error, dir.string() +
                                              ": no model.safetensors, "
                                              "model.safetensors.index.json or "
                                              "model*.safetensors files");
    }
    std::sort(files.begin(), files.end());
    for (const auto& file_name : files) {
        auto f = SafetensorsFile::open(dir / file_name);
        if (!f) return f.error();
        for (const auto& [name, t] : f->tensors()) {
            if (auto it = c.weight_map_.find(name); it != c.weight_map_.end()) {
                return format_error(dir.string(), "tensor \"" + name + "\" is in both " +
                                                      it->second + " and " + file_name);
            }
            c.weight_map_[name] = file_name;
        }
        c.files_[file_name] = std::make_unique<SafetensorsFile>(std::move(*f));
    }
    return c;
}

bool Checkpoint::contains(const std::string& name) const { return weight_map_.count(name) != 0; }

std::filesystem::path Checkpoint::file_of(const std::string& name) const {
    auto it = weight_map_.find(name);
    return it == weight_map_.end() ? std::filesystem::path{} : dir_ / it->second;
}

std::vector<std::string> Checkpoint::tensor_names() const {
    std::vector<std::string> names;
    names.reserve(weight_map_.size());
    for (const auto& [name, file] : weight_map_) names.push_back(name);
    return names;
}

Result<const TensorInfo*> Checkpoint::tensor(const std::string& name) {
    auto it = weight_map_.find(name);
    if (it == weight_map_.end()) {
        return make_error(errc::missing_tensor,
                          dir_.string() + ": missing tensor \"" + name + "\"");
    }
    auto fit = files_.find(it->second);
    if (fit == files_.end()) {
        auto f = SafetensorsFile::open(dir_ / it->second);
        if (!f) return f.error();
        fit = files_.emplace(it->second, std::make_unique<SafetensorsFile>(std::move(*f))).first;
    }
    const TensorInfo* t = fit->second->find(name);
    if (t == nullptr) {
        return make_error(errc::missing_tensor, (dir_ / it->second).string() +
                                                    ": missing tensor \"" + name +
                                                    "\" (the index says it is in this file)");
    }
    return t;
}

}  // namespace brigade::model::io
