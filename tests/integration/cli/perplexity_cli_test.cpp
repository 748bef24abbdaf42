// `brigade perplexity` end to end (issue 4), against what PyTorch computed at training time
// (model/demo/reference.json): the tokenizer reproduces the held-out token ids (count, first
// ids, sha256), the whole held-out file's perplexity of the BF16, MLX 8-bit and 4-bit copies is
// within 1% of PyTorch's and the quantized copies stay within stated bounds of BF16, the first
// 8 windows match on the scalar reference backend too; bad input gives clear errors; and
// `--model` resolution (Hugging Face cache layout, BRIGADE_DEMO_MODEL).
//
// The whole held-out file takes about 15-17 s per copy with the cpu backend on a loaded 2-core
// machine (Release), so all three copies are scored in full (in optimized builds; see
// kOptimizedBuild).
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "model/cpu/kernels.hpp"
#include "model/text/tokenizer.hpp"
#include "tests/support/test_support.hpp"

namespace brigade::test {
namespace {

namespace fs = std::filesystem;

fs::path demo_dir() { return source_dir() / "model" / "demo"; }
fs::path heldout() { return demo_dir() / "heldout.txt"; }

const nlohmann::json& reference() {
    static const nlohmann::json j = [] {
        std::ifstream in(demo_dir() / "reference.json");
        return nlohmann::json::parse(in);
    }();
    return j;
}

// ---- SHA-256 (FIPS 180-4), only to check the token ids against reference.json -------------

std::string sha256_hex(const std::string& bytes) {
    static constexpr std::array<std::uint32_t, 64> k = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2};
    std::array<std::uint32_t, 8> h = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                      0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    std::string m = bytes;
    const std::uint64_t bit_len = static_cast<std::uint64_t>(bytes.size()) * 8;
    m.push_back(static_cast<char>(0x80));
    while (m.size() % 64 != 56) m.push_back('\0');
    for (int i = 7; i >= 0; --i) m.push_back(static_cast<char>((bit_len >> (8 * i)) & 0xff));
    const auto rotr = [](std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
    for (std::size_t block = 0; block < m.size(); block += 64) {
        std::array<std::uint32_t, 64> w{};
        for (int i = 0; i < 16; ++i) {
            for (int b = 0; b < 4; ++b) {
                w[i] = (w[i] << 8) | static_cast<unsigned char>(m[block + 4 * i + b]);
            }
        }
        for (int i = 16; i < 64; ++i) {
            const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
            const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        auto v = h;
        for (int i = 0; i < 64; ++i) {
            const std::uint32_t s1 = rotr(v[4], 6) ^ rotr(v[4], 11) ^ rotr(v[4], 25);
            const std::uint32_t ch = (v[4] & v[5]) ^ (~v[4] & v[6]);
            const std::uint32_t t1 = v[7] + s1 + ch + k[i] + w[i];
            const std::uint32_t s0 = rotr(v[0], 2) ^ rotr(v[0], 13) ^ rotr(v[0], 22);
            const std::uint32_t maj = (v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]);
            const std::uint32_t t2 = s0 + maj;
            v = {t1 + t2, v[0], v[1], v[2], v[3] + t1, v[4], v[5], v[6]};
        }
        for (int i = 0; i < 8; ++i) h[i] += v[i];
    }
    std::string hex;
    for (std::uint32_t x : h) {
        char buf[9];
        std::snprintf(buf, sizeof buf, "%08x", x);
        hex += buf;
    }
    return hex;
}

TEST(Sha256, KnownVectors) {
    EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(sha256_hex("abc"),
              "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(DemoTokenizer, ReproducesTheHeldoutTokenIds) {
    const auto& want = reference()["heldout"];
    const std::string text = read_file(heldout());
    ASSERT_EQ(text.size(), want["bytes"].get<std::size_t>());
    ASSERT_EQ(sha256_hex(text), want["sha256"].get<std::string>()) << "heldout.txt changed";

    auto tokenizer = model::text::Tokenizer::load_from_dir(demo_dir());
    ASSERT_TRUE(tokenizer) << tokenizer.error().message;
    auto ids = tokenizer->encode(text, /*add_special_tokens=*/false);
    ASSERT_TRUE(ids) << ids.error().message;
    EXPECT_EQ(ids->size(), want["tokens"].get<std::size_t>());
    const auto first = want["first_32_token_ids"].get<std::vector<std::int32_t>>();
    ASSERT_GE(ids->size(), first.size());
    EXPECT_EQ(std::vector<std::int32_t>(ids->begin(), ids->begin() + 32), first);
    std::string le;  // uint32 little-endian, as reference.json hashed them
    for (std::int32_t id : *ids) {
        const auto u = static_cast<std::uint32_t>(id);
        for (int b = 0; b < 4; ++b) le.push_back(static_cast<char>((u >> (8 * b)) & 0xff));
    }
    EXPECT_EQ(sha256_hex(le), want["token_ids_sha256"].get<std::string>());
    // The decoded ids give back the text (byte-level BPE is lossless).
    EXPECT_EQ(tokenizer->decode(*ids, false), text);
}

// ---- Perplexity through the CLI -------------------------------------------------------------

struct Measured {
    nlohmann::json j;
    std::string err;
};

std::optional<Measured> perplexity_json(const std::vector<std::string>& extra, int timeout_s) {
    std::vector<std::string> args = {"perplexity", "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = run_brigade(args, timeout_s);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    if (r.exit_code != 0) return std::nullopt;
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.out;
    if (j.is_discarded()) return std::nullopt;
    return Measured{j, r.err};
}

double relative_diff(double a, double b) { return std::abs(a - b) / std::abs(b); }

constexpr double kTolerance = 0.01;  // issue 4: within 1% of PyTorch
// Stated bounds of the quantized copies relative to BF16 (both measured by the engine).
constexpr double kMaxQ8OverBf16 = 1.01;
constexpr double kMaxQ4OverBf16 = 1.15;

// Unoptimized or sanitizer builds (CI's ASan job) run the engine many times slower: there the
// whole-file check would pass the ctest timeout, so such builds score the first 8 windows of
// each copy (reference.json has those values too) and say so.
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
constexpr bool kOptimizedBuild = true;
#else
constexpr bool kOptimizedBuild = false;
#endif

TEST(PerplexityCli, WholeHeldoutFileMatchesPyTorchForAllThreeCopies) {
    const auto& ref = reference()["perplexity"];
    const std::vector<std::pair<std::string, fs::path>> copies = {
        {"bf16", demo_dir()}, {"mlx_q8", demo_dir() / "mlx-q8"}, {"mlx_q4", demo_dir() / "mlx-q4"}};
    const std::string suffix = kOptimizedBuild ? "" : "_first_8_windows";
    if (!kOptimizedBuild) {
        std::printf("note: unoptimized build: scoring the first 8 windows, not the whole file\n");
    }
    std::map<std::string, double> measured;
    for (const auto& [copy, dir] : copies) {
        const std::string key = copy + suffix;
        std::vector<std::string> args = {"--model",          dir.string(), "--file",
                                         heldout().string(), "--ctx",      "256"};
        if (!kOptimizedBuild) args.insert(args.end(), {"--max-windows", "8"});
        auto m = perplexity_json(args, 500);
        ASSERT_TRUE(m) << key;
        const auto& want = ref[key];
        EXPECT_EQ(m->j["tokens"].get<std::int64_t>(), reference()["heldout"]["tokens"]);
        EXPECT_EQ(m->j["ctx"].get<int>(), ref["ctx"].get<int>());
        EXPECT_EQ(m->j["windows"].get<std::int64_t>(), want["windows"].get<std::int64_t>());
        EXPECT_EQ(m->j["scored_tokens"].get<std::int64_t>(),
                  want["scored_tokens"].get<std::int64_t>());
        const double ppl = m->j["perplexity"].get<double>();
        EXPECT_LE(relative_diff(ppl, want["perplexity"].get<double>()), kTolerance)
            << key << ": engine " << ppl << " vs PyTorch " << want["perplexity"];
        EXPECT_LE(relative_diff(m->j["first_window_nll"].get<double>(),
                                want["first_window_nll"].get<double>()),
                  kTolerance)
            << key;
        EXPECT_GT(m->j["tokens_per_second"].get<double>(), 0.0);
        measured[copy] = ppl;
    }
    ASSERT_EQ(measured.size(), 3u);
    EXPECT_LE(measured["mlx_q8"], kMaxQ8OverBf16 * measured["bf16"]);
    EXPECT_LE(measured["mlx_q4"], kMaxQ4OverBf16 * measured["bf16"]);
    // 4-bit loses something measurable: a copy that silently ran unquantized would not.
    EXPECT_GT(measured["mlx_q4"], measured["mlx_q8"]);
}

TEST(PerplexityCli, FirstEightWindowsMatchOnTheReferenceBackend) {
    const auto& ref = reference()["perplexity"];
    std::vector<std::pair<std::string, fs::path>> copies = {
        {"bf16_first_8_windows", demo_dir()},
        {"mlx_q8_first_8_windows", demo_dir() / "mlx-q8"},
        {"mlx_q4_first_8_windows", demo_dir() / "mlx-q4"}};
    if (!kOptimizedBuild) copies.resize(1);  // the scalar backend is slow enough already
    for (const auto& [key, dir] : copies) {
        auto m = perplexity_json({"--model", dir.string(), "--file", heldout().string(), "--ctx",
                                  "256", "--max-windows", "8", "--backend", "reference"},
                                 300);
        ASSERT_TRUE(m) << key;
        const auto& want = ref[key];
        EXPECT_EQ(m->j["backend"], "reference");
        EXPECT_EQ(m->j["windows"].get<std::int64_t>(), 8);
        EXPECT_EQ(m->j["scored_tokens"].get<std::int64_t>(),
                  want["scored_tokens"].get<std::int64_t>());
        EXPECT_LE(relative_diff(m->j["perplexity"].get<double>(), want["perplexity"].get<double>()),
                  kTolerance)
            << key << ": engine " << m->j["perplexity"] << " vs PyTorch " << want["perplexity"];
    }
}

TEST(PerplexityCli, TextOutputNamesEveryQuantity) {
    auto r =
        run_brigade({"perplexity", "--model", demo_dir().string(), "--file", heldout().string(),
                     "--ctx", "64", "--max-windows", "2", "--threads", "1"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const char* word : {"perplexity", "scored      126 tokens", "windows     2 of up to 64",
                             "tok/s", "1 thread)", "mean NLL"}) {
        EXPECT_NE(r.out.find(word), std::string::npos) << word << " in:\n" << r.out;
    }
    // A plain directory needs no notice; only the demo default and the HF cache log one.
    EXPECT_EQ(r.err, "");
}

TEST(PerplexityCli, StrideGivesMoreContextAndScoresEveryToken) {
    auto m = perplexity_json({"--model", demo_dir().string(), "--file", heldout().string(), "--ctx",
                              "64", "--stride", "32", "--max-windows", "4"},
                             120);
    ASSERT_TRUE(m);
    EXPECT_EQ(m->j["stride"].get<int>(), 32);
    EXPECT_EQ(m->j["windows"].get<int>(), 4);
    EXPECT_EQ(m->j["scored_tokens"].get<int>(), 63 + 3 * 32);
}

// --step-tokens runs windows decode-shaped (same scores up to rounding); --int8-activations
// then rounds the decode matmuls' activations to int8: the perplexity moves, by little.
TEST(PerplexityCli, StepTokensAndInt8ActivationsScoreTheDecodePath) {
    const std::vector<std::string> base = {"--model",       (demo_dir() / "mlx-q4").string(),
                                           "--file",        heldout().string(),
                                           "--ctx",         "64",
                                           "--max-windows", "4"};
    auto with = [&](std::vector<std::string> extra) {
        extra.insert(extra.begin(), base.begin(), base.end());
        return perplexity_json(extra, 120);
    };
    auto whole = with({});
    auto stepped = with({"--step-tokens", "1"});
    auto int8 = with({"--step-tokens", "4", "--int8-activations"});
    ASSERT_TRUE(whole && stepped && int8);
    EXPECT_EQ(stepped->j["step_tokens"].get<int>(), 1);
    EXPECT_EQ(int8->j["int8_activations"].get<bool>(), true);
    EXPECT_EQ(whole->j["int8_activations"].get<bool>(), false);
    const double p = whole->j["perplexity"].get<double>();
    EXPECT_LE(relative_diff(stepped->j["perplexity"].get<double>(), p), 1e-4);
    const double p8 = int8->j["perplexity"].get<double>();
    EXPECT_NE(p8, stepped->j["perplexity"].get<double>()) << "int8 rounding had no effect";
    EXPECT_LE(relative_diff(p8, p), 0.02);  // measured +0.6% over the whole file
    EXPECT_EQ(int8->j["scored_tokens"], whole->j["scored_tokens"]);
    // int16 activations: rounding a hundred times finer moves the score far less than int8.
    auto int16 = with({"--step-tokens", "1", "--int16-activations"});
    ASSERT_TRUE(int16);
    EXPECT_EQ(int16->j["int16_activations"].get<bool>(), true);
    EXPECT_EQ(whole->j["int16_activations"].get<bool>(), false);
    const double p16 = int16->j["perplexity"].get<double>();
    EXPECT_NE(p16, stepped->j["perplexity"].get<double>()) << "int16 rounding had no effect";
    EXPECT_LE(relative_diff(p16, stepped->j["perplexity"].get<double>()), 1e-4);  // measured 4e-6
    // --f32-activations: the f32 kernels where one-token decode would split activations into
    // two int8 digits (on AVX-512 VNNI / AVX-VNNI / Arm sdot; elsewhere both runs take the f32
    // kernels), within 3.1e-5 of each group's largest activation: over these windows the two
    // differed by 3.4e-5 (with four digits, before session 27, by 4.6e-9). Both with an f32 KV
    // cache, so that only the activations differ.
    auto f32 = with({"--step-tokens", "1", "--f32-activations", "--kv-f32"});
    auto split = with({"--step-tokens", "1", "--kv-f32"});
    ASSERT_TRUE(f32 && split);
    EXPECT_EQ(f32->j["f32_activations"].get<bool>(), true);
    EXPECT_EQ(split->j["f32_activations"].get<bool>(), false);
    EXPECT_EQ(split->j["kv_f32"].get<bool>(), true);
    EXPECT_EQ(stepped->j["kv_f32"].get<bool>(), false);
    const double p_f32 = f32->j["perplexity"].get<double>();
    const double p_split = split->j["perplexity"].get<double>();
    EXPECT_LE(relative_diff(p_f32, p_split), 1e-4);
    if (!model::cpu::split_int8_variants_available().empty()) {
        EXPECT_NE(p_f32, p_split) << "--f32-activations did not change the decode kernels";
    }
    // The f16 KV cache (the default) against the f32 one, through the same kernels.
    EXPECT_NE(p_split, stepped->j["perplexity"].get<double>()) << "--kv-f32 had no effect";
    EXPECT_LE(relative_diff(p_split, stepped->j["perplexity"].get<double>()), 1e-4);
    // --no-amx: the 64-token windows take dequantize + sgemm instead of the AMX tiles (on CPUs
    // with AMX; elsewhere both runs take the same kernels). Both are f32-class.
    auto tiles = with({"--kv-f32"});
    auto no_tiles = with({"--kv-f32", "--no-amx"});
    ASSERT_TRUE(tiles && no_tiles);
    EXPECT_EQ(tiles->j["amx"].get<bool>(), true);
    EXPECT_EQ(no_tiles->j["amx"].get<bool>(), false);
    const double p_tiles = tiles->j["perplexity"].get<double>();
    const double p_no_tiles = no_tiles->j["perplexity"].get<double>();
    EXPECT_LE(relative_diff(p_tiles, p_no_tiles), 1e-6);
    if (model::cpu::amx_available()) {
        EXPECT_NE(p_tiles, p_no_tiles) << "--no-amx did not change the prompt kernels";
    }
}

// ---- Bad input ------------------------------------------------------------------------------

// Runs a command expected to fail cleanly: exit code 1 (CLI11 usage errors: non-zero) and an
// error message containing `needle`.
void expect_error(const std::vector<std::string>& args, const std::string& needle) {
    auto r = run_brigade(args, 60);
    EXPECT_NE(r.exit_code, 0) << "expected failure for " << args.back();
    EXPECT_LT(r.exit_code, 128) << "crashed (signal) for " << args.back() << ": " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << "wanted '" << needle << "' in stderr:\n"
                                                     << r.err;
}

TEST(PerplexityCli, BadInputGivesClearErrors) {
    TempDir tmp;
    const std::string model = demo_dir().string();
    const std::string ok_file = heldout().string();
    const auto p = [&](std::vector<std::string> rest) {
        std::vector<std::string> args = {"perplexity"};
        args.insert(args.end(), rest.begin(), rest.end());
        return args;
    };

    expect_error(p({"--model", model, "--file", (tmp.path() / "absent.txt").string()}),
                 "cannot open");
    expect_error(p({"--model", model, "--file", tmp.path().string()}), "is a directory");
    write_file(tmp.path() / "latin1.txt", "caf\xe9 au lait, and more words after it");
    expect_error(p({"--model", model, "--file", (tmp.path() / "latin1.txt").string()}),
                 "not valid UTF-8 (first bad byte at offset 3)");
    write_file(tmp.path() / "empty.txt", "");
    expect_error(p({"--model", model, "--file", (tmp.path() / "empty.txt").string()}),
                 "at least 2");
    write_file(tmp.path() / "one.txt", "The");
    expect_error(p({"--model", model, "--file", (tmp.path() / "one.txt").string()}), "at least 2");
    expect_error(p({"--model", model, "--file", ok_file, "--ctx", "1"}), "at least 2");
    expect_error(p({"--model", model, "--file", ok_file, "--ctx", "0"}), "at least 2");
    expect_error(p({"--model", model, "--file", ok_file, "--ctx", "513"}),
                 "exceeds the model's context limit of 512");
    expect_error(p({"--model", model, "--file", ok_file, "--ctx", "64", "--stride", "0"}),
                 "--stride must be at least 1");
    expect_error(p({"--model", model, "--file", ok_file, "--ctx", "64", "--stride", "65"}),
                 "stride must be between 1 and ctx");
    expect_error(p({"--model", model, "--file", ok_file, "--backend", "gpu"}), "backend");
    expect_error(p({"--model", model}), "--file");
    expect_error(p({"--model", (tmp.path() / "nope").string(), "--file", ok_file}), "not found");
    expect_error(p({"--model", tmp.path().string(), "--file", ok_file}), "no config.json");
    expect_error(p({"--model", ok_file, "--file", ok_file}), "is a file");
}

// ---- Model reference resolution -------------------------------------------------------------

// Sets environment variables for one test (nullopt = unset) and restores them afterwards; the
// spawned `brigade` inherits them.
class EnvGuard {
public:
    EnvGuard(std::initializer_list<std::pair<const char*, std::optional<std::string>>> vars) {
        for (const auto& [name, value] : vars) {
            const char* old = std::getenv(name);
            saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
            set(name, value);
        }
    }
    ~EnvGuard() {
        for (const auto& [name, value] : saved_) set(name.c_str(), value);
    }
    EnvGuard(const EnvGuard&) = delete;
    EnvGuard& operator=(const EnvGuard&) = delete;

private:
    static void set(const char* name, const std::optional<std::string>& value) {
        if (value) {
            setenv(name, value->c_str(), 1);
        } else {
            unsetenv(name);
        }
    }
    std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// Lays out `hub/models--org--name/{refs/main, snapshots/<commit>/...}` as huggingface_hub does,
// the snapshot's files being links to the demo model's.
void make_hub_snapshot(const fs::path& hub, const std::string& org, const std::string& name,
                       const std::string& commit, bool with_ref) {
    const fs::path repo = hub / ("models--" + org + "--" + name);
    const fs::path snap = repo / "snapshots" / commit;
    fs::create_directories(snap);
    for (const char* f : {"config.json", "generation_config.json", "model.safetensors",
                          "tokenizer.json", "tokenizer_config.json"}) {
        fs::create_symlink(demo_dir() / f, snap / f);
    }
    if (with_ref) {
        fs::create_directories(repo / "refs");
        write_file(repo / "refs" / "main", commit);
    }
}

std::vector<std::string> quick_args(const std::string& model, const fs::path& text) {
    std::vector<std::string> args = {"perplexity", "--file",        text.string(), "--ctx",
                                     "16",         "--max-windows", "1",           "--json"};
    if (!model.empty()) {
        args.push_back("--model");
        args.push_back(model);
    }
    return args;
}

TEST(ModelRef, FindsHubRepositoriesInTheHuggingFaceCache) {
    TempDir tmp;
    const fs::path text = tmp.path() / "t.txt";
    write_file(text, read_file(heldout()).substr(0, 400));
    const std::string commit = "0123456789abcdef0123456789abcdef01234567";
    make_hub_snapshot(tmp.path() / "home" / "hub", "brigade-test", "demo-llama", commit, true);
    make_hub_snapshot(tmp.path() / "other", "brigade-test", "demo-llama", "feedface", false);

    {
        EnvGuard env({{"HF_HOME", (tmp.path() / "home").string()},
                      {"HF_HUB_CACHE", std::nullopt},
                      {"HUGGINGFACE_HUB_CACHE", std::nullopt}});
        auto r = run_brigade(quick_args("brigade-test/demo-llama", text));
        ASSERT_EQ(r.exit_code, 0) << r.err;
        const auto j = nlohmann::json::parse(r.out);
        EXPECT_NE(j["model"].get<std::string>().find("snapshots/" + commit), std::string::npos);
        EXPECT_NE(r.err.find("from the Hugging Face cache"), std::string::npos) << r.err;
        // A commit named directly.
        r = run_brigade(quick_args("brigade-test/demo-llama@" + commit, text));
        EXPECT_EQ(r.exit_code, 0) << r.err;
        expect_error(quick_args("brigade-test/demo-llama@v9", text), "revision 'v9'");
        expect_error(quick_args("brigade-test/absent", text), "models--brigade-test--absent");
        expect_error(quick_args("not a/repo name", text), "not found");
    }
    {
        // HF_HUB_CACHE wins over HF_HOME; without refs/main a single snapshot is taken.
        EnvGuard env({{"HF_HOME", (tmp.path() / "home").string()},
                      {"HF_HUB_CACHE", (tmp.path() / "other").string()}});
        auto r = run_brigade(quick_args("brigade-test/demo-llama", text));
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_NE(nlohmann::json::parse(r.out)["model"].get<std::string>().find("feedface"),
                  std::string::npos);
    }
    {
        // The default location under $HOME.
        fs::create_directories(tmp.path() / "user" / ".cache" / "huggingface");
        fs::create_directory_symlink(tmp.path() / "home" / "hub",
                                     tmp.path() / "user" / ".cache" / "huggingface" / "hub");
        EnvGuard env({{"HOME", (tmp.path() / "user").string()},
                      {"HF_HOME", std::nullopt},
                      {"HF_HUB_CACHE", std::nullopt},
                      {"HUGGINGFACE_HUB_CACHE", std::nullopt},
                      {"XDG_CACHE_HOME", std::nullopt}});
        auto r = run_brigade(quick_args("brigade-test/demo-llama", text));
        EXPECT_EQ(r.exit_code, 0) << r.err;
    }
}

TEST(ModelRef, BrigadeDemoModelOverridesTheBundledLocation) {
    TempDir tmp;
    const fs::path text = tmp.path() / "t.txt";
    write_file(text, read_file(heldout()).substr(0, 400));
    {
        EnvGuard env({{"BRIGADE_DEMO_MODEL", (demo_dir() / "mlx-q8").string()}});
        auto r = run_brigade(quick_args("", text));
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_NE(r.err.find("bundled demo model at " + (demo_dir() / "mlx-q8").string()),
                  std::string::npos)
            << r.err;
    }
    {
        EnvGuard env({{"BRIGADE_DEMO_MODEL", tmp.path().string()}});
        expect_error(quick_args("", text), "BRIGADE_DEMO_MODEL=");
    }
}

}  // namespace
}  // namespace brigade::test
