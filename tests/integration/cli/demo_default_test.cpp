// With no --model, `brigade run` and `brigade perplexity` use the bundled demo model and say so
// in one log line (issue 4). `brigade run` prints the text PyTorch generated for the demo
// model's fixed prompts (model/demo/reference.json), for the BF16, 8-bit and 4-bit copies.
// The demo model is found relative to the executable (build tree and install layout) or
// through BRIGADE_DEMO_MODEL.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "tests/support/test_support.hpp"

namespace brigade::test {
namespace {

namespace fs = std::filesystem;

fs::path demo_dir() { return source_dir() / "model" / "demo"; }

const nlohmann::json& reference() {
    static const nlohmann::json j = [] {
        std::ifstream in(demo_dir() / "reference.json");
        return nlohmann::json::parse(in);
    }();
    return j;
}

constexpr const char* kDemoNote = "using the bundled demo model at ";

// Every test here relies on the default search, so BRIGADE_DEMO_MODEL must be unset while it
// runs (the spawned `brigade` inherits the environment); it is restored afterwards.
class DemoDefault : public ::testing::Test {
protected:
    void SetUp() override {
        if (const char* v = std::getenv("BRIGADE_DEMO_MODEL"); v != nullptr) saved_ = v;
        unsetenv("BRIGADE_DEMO_MODEL");
    }
    void TearDown() override {
        if (saved_) setenv("BRIGADE_DEMO_MODEL", saved_->c_str(), 1);
    }
    std::optional<std::string> saved_;
};

TEST_F(DemoDefault, RunWithoutModelUsesTheDemoAndPrintsItsText) {
    const auto& plain = reference()["greedy"]["bf16"][2];
    ASSERT_EQ(plain["kind"], "plain");
    auto r = run_brigade({"run", "--prompt", plain["prompt_text"].get<std::string>(), "-n", "48"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // Exactly one line names the demo model, and where it is.
    const auto note = r.err.find(kDemoNote);
    ASSERT_NE(note, std::string::npos) << r.err;
    EXPECT_EQ(r.err.find(kDemoNote, note + 1), std::string::npos) << r.err;
    const std::string where = fs::weakly_canonical(demo_dir()).string() + " ";
    EXPECT_EQ(r.err.compare(note + std::string(kDemoNote).size(), where.size(), where), 0) << r.err;
    // Recognisable text: what PyTorch generated greedily, word for word.
    EXPECT_FALSE(r.out.empty());
    EXPECT_EQ(r.out, plain["text_until_end"].get<std::string>() + "\n");
}

TEST_F(DemoDefault, RunChatPromptsEndByThemselves) {
    for (const auto& c : reference()["greedy"]["bf16"]) {
        if (c["kind"] != "chat") continue;
        auto r = run_brigade({"run", "--prompt", c["prompt_text"].get<std::string>(), "-n", "48"});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_NE(r.err.find(kDemoNote), std::string::npos) << r.err;
        EXPECT_EQ(r.out, c["text_until_end"].get<std::string>() + "\n");
        EXPECT_NE(r.err.find("stopped at EOS"), std::string::npos) << r.err;
    }
}

TEST_F(DemoDefault, QuantizedCopiesPrintTheirPyTorchText) {
    for (const auto& [key, sub] : {std::pair{"mlx_q8", "mlx-q8"}, std::pair{"mlx_q4", "mlx-q4"}}) {
        for (const auto& c : reference()["greedy"][key]) {
            auto r = run_brigade({"run", "--model", (demo_dir() / sub).string(), "--prompt",
                                  c["prompt_text"].get<std::string>(), "-n", "48"});
            ASSERT_EQ(r.exit_code, 0) << r.err;
            EXPECT_EQ(r.err.find(kDemoNote), std::string::npos) << "an explicit --model";
            EXPECT_EQ(r.out, c["text_until_end"].get<std::string>() + "\n")
                << key << ": " << c["prompt_text"];
        }
    }
}

TEST_F(DemoDefault, PerplexityWithoutModelUsesTheDemo) {
    TempDir tmp;
    write_file(tmp.path() / "t.txt", "The json module encodes and decodes JSON documents.");
    auto r = run_brigade({"perplexity", "--file", (tmp.path() / "t.txt").string(), "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find(kDemoNote), std::string::npos) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(fs::path(j["model"].get<std::string>()), fs::weakly_canonical(demo_dir()));
    EXPECT_GT(j["perplexity"].get<double>(), 1.0);
}

// Runs a copy of the executable placed elsewhere (so /proc/self/exe points there), capturing
// stdout and stderr through files.
CommandResult run_copy(const fs::path& exe, const std::string& args, const fs::path& scratch) {
    const std::string cmd = "'" + exe.string() + "' " + args + " >'" + (scratch / "out").string() +
                            "' 2>'" + (scratch / "err").string() + "' </dev/null";
    const int status = std::system(cmd.c_str());
    CommandResult r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = read_file(scratch / "out");
    r.err = read_file(scratch / "err");
    return r;
}

TEST_F(DemoDefault, FoundBesideAnInstalledExecutableOrReportedMissing) {
    TempDir tmp;
    // <prefix>/bin/brigade with the demo model at <prefix>/share/brigade/demo.
    const fs::path prefix = tmp.path() / "prefix";
    fs::create_directories(prefix / "bin");
    fs::create_directories(prefix / "share" / "brigade");
    fs::copy_file(brigade_binary(), prefix / "bin" / "brigade");
    fs::create_directory_symlink(demo_dir(), prefix / "share" / "brigade" / "demo");
    auto r =
        run_copy(prefix / "bin" / "brigade", "run --prompt 'A dictionary is' -n 8", tmp.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // Found only through share/brigade/demo (nothing else is near the copy); the log names the
    // directory the link resolves to.
    EXPECT_NE(r.err.find(std::string(kDemoNote) + fs::weakly_canonical(demo_dir()).string()),
              std::string::npos)
        << r.err;
    EXPECT_FALSE(r.out.empty());

    // Nothing around the executable: a clear error that says where it looked.
    fs::remove(prefix / "share" / "brigade" / "demo");
    r = run_copy(prefix / "bin" / "brigade", "run --prompt 'A dictionary is' -n 8", tmp.path());
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("bundled demo model was not found"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find((prefix / "share" / "brigade" / "demo").string()), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("BRIGADE_DEMO_MODEL"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace brigade::test
