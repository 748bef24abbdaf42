#include "model/io/safetensors.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "model/io/safetensors_writer.hpp"
#include "tests/support/test_support.hpp"

namespace brigade::model::io {
namespace {

// A file made of an 8-byte length, the given header text and `data_bytes` bytes of data.
std::string raw_file(const std::string& header, std::size_t data_bytes, std::uint64_t n = 0) {
    std::string out(8, '\0');
    const std::uint64_t len = n != 0 ? n : header.size();
    for (int i = 0; i < 8; ++i)
        out[static_cast<std::size_t>(i)] = static_cast<char>(len >> (8 * i));
    return out + header + std::string(data_bytes, '\x01');
}

Result<SafetensorsFile> open_bytes(const test::TempDir& dir, const std::string& bytes) {
    const auto path = dir.path() / "model.safetensors";
    test::write_file(path, bytes);
    return SafetensorsFile::open(path);
}

void expect_error(const Result<SafetensorsFile>& r, errc code, const std::string& needle) {
    ASSERT_FALSE(r) << "expected an error mentioning " << needle;
    EXPECT_EQ(r.error().code, code) << r.error().message;
    EXPECT_NE(r.error().message.find("model.safetensors"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find(needle), std::string::npos) << r.error().message;
}

TEST(Safetensors, ReadsWhatTheWriterWrote) {
    test::TempDir dir;
    std::vector<TensorToWrite> tensors;
    const float a[6] = {1, 2, 3, 4, 5, 6};
    TensorToWrite t{"a", "F32", {2, 3}, {}};
    append_float_bytes(t.bytes, "F32", a, 6);
    tensors.push_back(t);
    TensorToWrite b{"b", "BF16", {3}, {}};
    append_float_bytes(b.bytes, "BF16", a, 3);
    tensors.push_back(b);
    tensors.push_back({"scalar", "I8", {}, std::string(1, '\x05')});
    tensors.push_back({"empty", "F16", {0, 4}, {}});
    SafetensorsWriteOptions options;
    options.metadata["format"] = "pt";
    ASSERT_TRUE(write_safetensors(dir.path() / "model.safetensors", tensors, options));
    auto f = SafetensorsFile::open(dir.path() / "model.safetensors");
    ASSERT_TRUE(f) << f.error().message;
    EXPECT_EQ(f->tensors().size(), 4u);
    EXPECT_EQ(f->metadata().at("format"), "pt");
    const TensorInfo* ta = f->find("a");
    ASSERT_NE(ta, nullptr);
    EXPECT_EQ(ta->shape_string(), "[2, 3]");
    EXPECT_EQ(ta->dtype, DType::kF32);
    float got[6];
    std::memcpy(got, ta->data, sizeof got);
    EXPECT_EQ(got[5], 6.0f);
    EXPECT_EQ(f->find("scalar")->n_elements(), 1);
    EXPECT_EQ(f->find("empty")->n_bytes(), 0u);
}

TEST(Safetensors, UnalignedDataIsFine) {
    test::TempDir dir;
    // Header padding off and a 1-byte tensor first: the F32 tensor starts at an odd address.
    std::vector<TensorToWrite> tensors = {{"pad", "U8", {1}, std::string(1, '\x07')}};
    const float v[3] = {0.5f, -1.25f, 3.0f};
    TensorToWrite t{"x", "F32", {3}, {}};
    append_float_bytes(t.bytes, "F32", v, 3);
    tensors.push_back(t);
    SafetensorsWriteOptions options;
    options.pad_header = false;
    ASSERT_TRUE(write_safetensors(dir.path() / "model.safetensors", tensors, options));
    auto f = SafetensorsFile::open(dir.path() / "model.safetensors");
    ASSERT_TRUE(f) << f.error().message;
    const TensorInfo* x = f->find("x");
    EXPECT_NE(reinterpret_cast<std::uintptr_t>(x->data) % 4, 0u);
    float got[3];
    std::memcpy(got, x->data, sizeof got);
    EXPECT_EQ(got[1], -1.25f);
}

TEST(SafetensorsBadInput, TruncatedFile) {
    test::TempDir dir;
    std::vector<TensorToWrite> tensors = {{"w", "F32", {4}, std::string(16, '\0')}};
    std::string bytes = serialize_safetensors(tensors);
    bytes.resize(bytes.size() - 5);
    expect_error(open_bytes(dir, bytes), errc::bad_format, "\"w\"");
    expect_error(open_bytes(dir, "abc"), errc::bad_format, "truncated");
    // Header length pointing past the end of the file.
    expect_error(open_bytes(dir, raw_file("{}", 0, 4096)), errc::bad_format, "truncated");
}

TEST(SafetensorsBadInput, HeaderThatLiesAboutSizes) {
    test::TempDir dir;
    // 2x2 F32 needs 16 bytes, the header claims 12.
    const std::string h = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})";
    expect_error(open_bytes(dir, raw_file(h, 12)), errc::bad_format, "\"w\"");
}

TEST(SafetensorsBadInput, OffsetsOutOfBounds) {
    test::TempDir dir;
    const std::string h = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[100,116]}})";
    expect_error(open_bytes(dir, raw_file(h, 16)), errc::bad_format, "\"w\"");
}

TEST(SafetensorsBadInput, OverlappingTensors) {
    test::TempDir dir;
    const std::string h = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
    expect_error(open_bytes(dir, raw_file(h, 16)), errc::bad_format, "overlaps");
}

TEST(SafetensorsBadInput, HoleAndTrailingBytes) {
    test::TempDir dir;
    const std::string hole = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
    expect_error(open_bytes(dir, raw_file(hole, 16)), errc::bad_format, "hole");
    const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    expect_error(open_bytes(dir, raw_file(ok, 9)), errc::bad_format, "trailing");
    EXPECT_TRUE(open_bytes(dir, raw_file(ok, 8)));
}

TEST(SafetensorsBadInput, HugeHeaderLength) {
    test::TempDir dir;
    expect_error(open_bytes(dir, raw_file("{}", 0, 200'000'000)), errc::bad_format, "limit");
    expect_error(open_bytes(dir, raw_file("{}", 0, ~0ull)), errc::bad_format, "limit");
}

TEST(SafetensorsBadInput, NotJson) {
    test::TempDir dir;
    expect_error(open_bytes(dir, raw_file("{\"a\": [1, 2", 0)), errc::bad_format, "JSON");
    expect_error(open_bytes(dir, raw_file("[1, 2, 3]", 0)), errc::bad_format, "'{'");
    // Invalid UTF-8 inside a string.
    expect_error(open_bytes(dir, raw_file("{\"\xff\xfe\": 1}", 0)), errc::bad_format, "JSON");
    const std::string dup = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                            R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})";
    expect_error(open_bytes(dir, raw_file(dup, 2)), errc::bad_format, "repeats");
    expect_error(open_bytes(dir, raw_file(R"({"a": 5})", 0)), errc::bad_format, "\"a\"");
}

TEST(SafetensorsBadInput, UnknownDtype) {
    test::TempDir dir;
    const std::string h = R"({"w":{"dtype":"Q4_K","shape":[4],"data_offsets":[0,4]}})";
    expect_error(open_bytes(dir, raw_file(h, 4)), errc::unsupported_dtype, "Q4_K");
}

TEST(SafetensorsBadInput, ShapeOverflow) {
    test::TempDir dir;
    const std::string h =
        R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}})";
    expect_error(open_bytes(dir, raw_file(h, 4)), errc::bad_format, "\"w\"");
    const std::string neg = R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})";
    expect_error(open_bytes(dir, raw_file(neg, 4)), errc::bad_format, "\"w\"");
}

TEST(Checkpoint, ShardedIndexOpensOnlyNeededShards) {
    test::TempDir dir;
    std::vector<TensorToWrite> a = {{"x", "U8", {2}, "ab"}};
    std::vector<TensorToWrite> b = {{"y", "U8", {1}, "c"}};
    ASSERT_TRUE(write_safetensors(dir.path() / "model-00001-of-00002.safetensors", a));
    // The second shard is garbage: it must not matter unless one of its tensors is asked for.
    test::write_file(dir.path() / "model-00002-of-00002.safetensors", "garbage");
    test::write_file(dir.path() / "model.safetensors.index.json",
                     R"({"metadata":{},"weight_map":{"x":"model-00001-of-00002.safetensors",)"
                     R"("y":"model-00002-of-00002.safetensors"}})");
    auto c = Checkpoint::open(dir.path());
    ASSERT_TRUE(c) << c.error().message;
    EXPECT_TRUE(c->contains("y"));
    auto x = c->tensor("x");
    ASSERT_TRUE(x) << x.error().message;
    EXPECT_EQ((*x)->n_bytes(), 2u);
    EXPECT_EQ(c->n_files_opened(), 1u);
    auto y = c->tensor("y");
    ASSERT_FALSE(y);
    EXPECT_NE(y.error().message.find("model-00002-of-00002.safetensors"), std::string::npos);
    auto missing = c->tensor("z");
    ASSERT_FALSE(missing);
    EXPECT_EQ(missing.error().code, errc::missing_tensor);
    EXPECT_NE(missing.error().message.find("\"z\""), std::string::npos);
}

TEST(Checkpoint, GlobsShardsWithoutIndexAndRejectsEscapes) {
    test::TempDir dir;
    ASSERT_TRUE(write_safetensors(dir.path() / "model-a.safetensors", {{"x", "U8", {1}, "a"}}));
    ASSERT_TRUE(write_safetensors(dir.path() / "model-b.safetensors", {{"y", "U8", {1}, "b"}}));
    auto c = Checkpoint::open(dir.path());
    ASSERT_TRUE(c) << c.error().message;
    EXPECT_TRUE(c->tensor("x"));
    EXPECT_TRUE(c->tensor("y"));

    test::TempDir bad;
    test::write_file(bad.path() / "model.safetensors.index.json",
                     R"({"weight_map":{"x":"../../etc/passwd"}})");
    auto e = Checkpoint::open(bad.path());
    ASSERT_FALSE(e);
    EXPECT_EQ(e.error().code, errc::bad_format);

    test::TempDir empty;
    EXPECT_FALSE(Checkpoint::open(empty.path()));
}

}  // namespace
}  // namespace brigade::model::io
