// `brigade run` end to end: the real binary against the HF reference fixtures, layer splits
// through files, seeded sampling, and one clear error (non-zero exit, message on stderr naming
// the file and tensor) for each kind of bad checkpoint.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/cpu/cpu_count.hpp"
#include "model/io/safetensors.hpp"
#include "tests/support/test_support.hpp"
#include "tests/unit/model/tiny_model.hpp"

namespace brigade {
namespace {

using test::run_brigade;

std::filesystem::path fixture(const std::string& name) {
    return test::source_dir() / "tests/fixtures/reference" / name;
}

nlohmann::json expected(const std::string& name) {
    std::ifstream in(fixture(name) / "expected.json");
    return nlohmann::json::parse(in);
}

std::string join_ids(const std::vector<int>& ids, const char* sep) {
    std::ostringstream s;
    for (std::size_t i = 0; i < ids.size(); ++i) s << (i ? sep : "") << ids[i];
    return s.str();
}

std::string describe(const test::CommandResult& r) {
    return "exit " + std::to_string(r.exit_code) + "\nstdout: " + r.out + "\nstderr: " + r.err;
}

// With --kv-f32 the logits are Hugging Face's within the f32 tolerance; with the default f16 KV
// cache within its bound (3e-3 of the largest logit, as HfParity.F16KvCacheStaysWithinItsBound);
// the greedy tokens are HF's either way.
TEST(RunCli, GreedyIdsAndLogitsMatchHuggingFace) {
    for (const std::string name : {"qwen3_f32", "llama_q4g64"}) {
        for (const bool kv_f32 : {true, false}) {
            const auto exp = expected(name);
            const auto prompt = exp["prompts"][0].get<std::vector<int>>();
            const auto greedy = exp["greedy"][0].get<std::vector<int>>();
            test::TempDir tmp;
            const auto logits_path = tmp.path() / "logits.bin";
            std::vector<std::string> args = {
                "run", "--model", fixture(name).string(), "--prompt-ids", join_ids(prompt, ","),
                "-n",  "32",      "--print-ids",          "--logits-out", logits_path.string()};
            if (kv_f32) args.push_back("--kv-f32");
            auto r = run_brigade(args);
            ASSERT_EQ(r.exit_code, 0) << describe(r);
            EXPECT_EQ(r.out, join_ids(greedy, " ") + "\n") << name << " kv_f32=" << kv_f32;
            const auto logits = test::read_f32_file(logits_path);
            const auto vocab = exp["shape"]["vocab_size"].get<std::size_t>();
            ASSERT_EQ(logits.size(), 32 * vocab);
            // Row 0 = logits after the prompt = HF's logits at the last prompt position.
            const auto hf =
                test::read_f32_file(fixture(name) / exp["logits"][0].get<std::string>());
            const float* hf_last = hf.data() + (prompt.size() - 1) * vocab;
            const double max_logit = exp["tolerance"].value("max_abs_logit", 1.0);
            const double tolerance = kv_f32 ? exp["tolerance"]["max_abs"].get<double>()
                                            : 3e-3 * std::max(1.0, max_logit);
            EXPECT_LE(test::max_abs_diff(logits.data(), hf_last, vocab), tolerance)
                << name << " kv_f32=" << kv_f32;
        }
    }
}

TEST(RunCli, LayerSplitThroughHiddenStateFiles) {
    const std::string name = "sharded_llama_f32";
    const auto exp = expected(name);
    const auto prompt = join_ids(exp["prompts"][1].get<std::vector<int>>(), ",");
    const std::string model = fixture(name).string();
    test::TempDir tmp;
    const auto full = tmp.path() / "full.bin";
    auto r = run_brigade({"run", "--model", model, "--prompt-ids", prompt, "-n", "1",
                          "--logits-out", full.string()});
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    const auto h1 = (tmp.path() / "h1.bin").string();
    const auto h3 = (tmp.path() / "h3.bin").string();
    const auto split = (tmp.path() / "split.bin").string();
    r = run_brigade(
        {"run", "--model", model, "--prompt-ids", prompt, "--layers", "0:1", "--hidden-out", h1});
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    r = run_brigade({"run", "--model", model, "--prompt-ids", prompt, "--layers", "1:3",
                     "--hidden-in", h1, "--hidden-out", h3});
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    r = run_brigade({"run", "--model", model, "--prompt-ids", prompt, "--layers", "3:4",
                     "--hidden-in", h3, "--logits-out", split});
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_EQ(r.out, std::to_string(exp["greedy"][1][0].get<int>()) + "\n");
    const auto a = test::read_f32_file(full);
    const auto b = test::read_f32_file(split);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_LE(test::max_abs_diff(a.data(), b.data(), a.size()), 1e-5f);

    // Hidden state of the wrong size, and a middle range without --hidden-out.
    r = run_brigade({"run", "--model", model, "--prompt-ids", "1,2", "--layers", "1:3",
                     "--hidden-in", h1, "--hidden-out", h3});
    EXPECT_EQ(r.exit_code, 1) << describe(r);
    EXPECT_NE(r.err.find("h1.bin"), std::string::npos) << r.err;
    r = run_brigade(
        {"run", "--model", model, "--prompt-ids", prompt, "--layers", "1:3", "--hidden-in", h1});
    EXPECT_EQ(r.exit_code, 1) << describe(r);
    r = run_brigade({"run", "--model", model, "--prompt-ids", prompt, "--layers", "3:9"});
    EXPECT_EQ(r.exit_code, 1) << describe(r);
}

TEST(RunCli, SeededSamplingIsReproducible) {
    const std::vector<std::string> base = {
        "run",          "--model",     fixture("qwen2_bf16").string(),
        "--prompt-ids", "5,6,7",       "-n",
        "24",           "--print-ids", "--temp",
        "1.5",          "--top-p",     "0.95",
        "--top-k",      "50"};
    auto with_seed = [&](const std::string& seed) {
        auto args = base;
        args.insert(args.end(), {"--seed", seed});
        return run_brigade(args);
    };
    const auto a = with_seed("42");
    const auto b = with_seed("42");
    const auto c = with_seed("43");
    ASSERT_EQ(a.exit_code, 0) << describe(a);
    EXPECT_EQ(a.out, b.out);
    EXPECT_NE(a.out, c.out);
    // The reference backend picks the same tokens as the optimized one.
    auto args = base;
    args.insert(args.end(), {"--seed", "42", "--backend", "reference"});
    const auto d = run_brigade(args);
    ASSERT_EQ(d.exit_code, 0) << describe(d);
    EXPECT_EQ(a.out, d.out);
}

TEST(RunCli, TextWithTheBundledDemoModel) {
    if (!std::filesystem::exists(test::source_dir() / "model/demo/config.json")) {
        GTEST_SKIP() << "model/demo is not present";
    }
    auto r = run_brigade({"run", "--model", (test::source_dir() / "model/demo").string(),
                          "--prompt", "The meaning of", "-n", "16"});
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_GT(r.out.size(), 1u);
    auto ids = run_brigade({"run", "--model", (test::source_dir() / "model/demo").string(),
                            "--prompt", "The meaning of", "-n", "16", "--print-ids"});
    ASSERT_EQ(ids.exit_code, 0) << describe(ids);
    EXPECT_NE(ids.out, r.out);
}

// ---- bad input: each gives exit 1 and one message naming what is wrong --------------------

class RunCliBadInput : public ::testing::Test {
protected:
    void SetUp() override {
        test::TinyModelSpec spec;
        spec.layers = 2;
        test::write_tiny_model(dir_.path(), spec);
    }
    std::filesystem::path weights() const { return dir_.path() / "model.safetensors"; }

    void expect_failure(const std::vector<std::string>& needles) {
        auto r = run_brigade(
            {"run", "--model", dir_.path().string(), "--prompt-ids", "1,2,3", "-n", "2"});
        EXPECT_EQ(r.exit_code, 1) << describe(r);
        EXPECT_TRUE(r.out.empty() || r.out == "\n") << r.out;
        EXPECT_NE(r.err.find("brigade run: error:"), std::string::npos) << r.err;
        for (const auto& n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << r.err;
    }
    // Replaces the header of model.safetensors, keeping the data bytes.
    void patch_header(const std::function<void(nlohmann::json&)>& change,
                      std::uint64_t forced_length = 0) {
        std::string bytes = test::read_file(weights());
        std::uint64_t n = 0;
        for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
        auto header = nlohmann::json::parse(bytes.substr(8, n));
        change(header);
        const std::string text = header.dump();
        const std::uint64_t len = forced_length ? forced_length : text.size();
        std::string out(8, '\0');
        for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(len >> (8 * i));
        test::write_file(weights(), out + text + bytes.substr(8 + n));
    }
    void patch_config(const nlohmann::json& patch) {
        std::ifstream in(dir_.path() / "config.json");
        auto c = nlohmann::json::parse(in);
        c.merge_patch(patch);
        std::ofstream(dir_.path() / "config.json") << c.dump();
    }

    test::TempDir dir_;
};

TEST_F(RunCliBadInput, TruncatedFile) {
    std::filesystem::resize_file(weights(), std::filesystem::file_size(weights()) - 7);
    expect_failure({"model.safetensors", "lm_head.weight"});
}

TEST_F(RunCliBadInput, HeaderLiesAboutSizes) {
    patch_header([](nlohmann::json& h) { h["model.norm.weight"]["shape"] = {32}; });
    expect_failure({"model.safetensors", "model.norm.weight", "bytes"});
}

TEST_F(RunCliBadInput, OffsetsOutOfBounds) {
    patch_header([](nlohmann::json& h) {
        auto& o = h["lm_head.weight"]["data_offsets"];
        o = {o[0].get<std::uint64_t>() + 1'000'000, o[1].get<std::uint64_t>() + 1'000'000};
    });
    expect_failure({"model.safetensors", "lm_head.weight"});
}

TEST_F(RunCliBadInput, OverlappingOffsets) {
    patch_header([](nlohmann::json& h) {
        // Point the final norm at the bytes of the layer-0 input norm (same size).
        h["model.norm.weight"]["data_offsets"] =
            h["model.layers.0.input_layernorm.weight"]["data_offsets"];
    });
    expect_failure({"model.safetensors", "overlaps"});
}

TEST_F(RunCliBadInput, HugeHeaderLength) {
    patch_header([](nlohmann::json&) {}, 1ull << 40);
    expect_failure({"model.safetensors", "header length"});
}

TEST_F(RunCliBadInput, NonJsonHeader) {
    std::string bytes = test::read_file(weights());
    bytes[9] = '!';  // first key's opening quote
    test::write_file(weights(), bytes);
    expect_failure({"model.safetensors", "JSON"});
}

TEST_F(RunCliBadInput, MissingTensor) {
    patch_header([](nlohmann::json& h) {
        // Rename so that the file stays valid but the tensor the model needs is gone.
        h["model.layers.1.mlp.gate_proj.weight_renamed"] = h["model.layers.1.mlp.gate_proj.weight"];
        h.erase("model.layers.1.mlp.gate_proj.weight");
    });
    expect_failure({"model.layers.1.mlp.gate_proj.weight", "missing"});
}

TEST_F(RunCliBadInput, UnsupportedDtype) {
    patch_header(
        [](nlohmann::json& h) { h["model.layers.0.self_attn.q_proj.weight"]["dtype"] = "I32"; });
    expect_failure({"model.safetensors", "model.layers.0.self_attn.q_proj.weight", "I32"});
}

TEST_F(RunCliBadInput, UnsupportedArchitecture) {
    patch_config({{"model_type", "deepseek_v3"}});
    expect_failure({"config.json", "deepseek_v3"});
}

TEST_F(RunCliBadInput, ShapeMismatch) {
    patch_config({{"intermediate_size", 96}});
    expect_failure({"model.safetensors", "model.layers.0.mlp.gate_proj.weight", "shape"});
}

TEST_F(RunCliBadInput, BadRopeScalingType) {
    patch_config({{"rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2.0}}}});
    expect_failure({"config.json", "dynamic"});
}

TEST_F(RunCliBadInput, MissingConfigKey) {
    patch_config({{"vocab_size", nullptr}});
    expect_failure({"config.json", "vocab_size"});
}

TEST_F(RunCliBadInput, BadArguments) {
    const auto m = dir_.path().string();
    auto r = run_brigade({"run", "--model", m, "--prompt", "hello"});
    EXPECT_EQ(r.exit_code, 1) << describe(r);  // no tokenizer in this directory
    EXPECT_NE(r.err.find("--prompt-ids"), std::string::npos) << r.err;
    r = run_brigade({"run", "--model", m, "--prompt-ids", "1,x,3"});
    EXPECT_EQ(r.exit_code, 1) << describe(r);
    r = run_brigade({"run", "--model", m, "--prompt-ids", "1,5000"});
    EXPECT_EQ(r.exit_code, 1) << describe(r);
    EXPECT_NE(r.err.find("5000"), std::string::npos) << r.err;
    r = run_brigade({"run", "--model", m, "--prompt-ids", "1", "--temp", "-1"});
    EXPECT_EQ(r.exit_code, 1) << describe(r);
    r = run_brigade({"run", "--model", m, "--prompt-ids", "1", "--backend", "tpu"});
    EXPECT_EQ(r.exit_code, 1) << describe(r);
    r = run_brigade({"run", "--model", (dir_.path() / "nope").string(), "--prompt-ids", "1"});
    EXPECT_EQ(r.exit_code, 1) << describe(r);
    r = run_brigade({"run", "--model", m, "--prompt-ids", "1,2,3", "--ctx", "2"});
    EXPECT_EQ(r.exit_code, 1) << describe(r);
    EXPECT_NE(r.err.find("context"), std::string::npos) << r.err;
}

// More threads than the process's CPUs (a container's quota or cpuset) still run, with a
// warning that says why it will be slow; as many as the CPUs, none.
TEST(RunCli, WarnsOfMoreThreadsThanUsableCpus) {
    const int usable = model::cpu::usable_cpus();
    auto r = run_brigade(
        {"run", "--prompt", "Hello", "-n", "2", "--threads", std::to_string(usable + 1)});
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_NE(r.err.find("brigade run: warning: " + std::to_string(usable + 1) +
                         " compute threads on " + std::to_string(usable) + " usable CPUs"),
              std::string::npos)
        << describe(r);
    r = run_brigade({"run", "--prompt", "Hello", "-n", "2", "--threads", std::to_string(usable)});
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_EQ(r.err.find("warning"), std::string::npos) << describe(r);
}

}  // namespace
}  // namespace brigade
