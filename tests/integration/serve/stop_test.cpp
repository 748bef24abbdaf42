// `brigade stop`: finds the `brigade serve` of a Brigade home by its record, stops it as SIGTERM
// does and returns once it has exited; with nothing running, or a record left by a process
// that died, it says so and exits 1.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "tests/support/node_process.hpp"
#include "tests/support/test_support.hpp"

namespace brigade::test {
namespace {

TEST(StopCommand, StopsTheServeOfItsHomeAndReturnsOnceItHasExited) {
    NodeSpec spec;
    spec.name = "stop";
    spec.serve_args = {"--threads", "1", "--no-discovery"};  // the demo model
    NodeProcess node(spec);
    ASSERT_TRUE(node.ready()) << node.why();
    const auto record = node.home() / "serve.json";
    ASSERT_TRUE(std::filesystem::exists(record));
    const auto run = nlohmann::json::parse(read_file(record), nullptr, false);
    ASSERT_TRUE(run.is_object()) << read_file(record);
    EXPECT_EQ(run["pid"], node.pid());
    EXPECT_EQ(run["url"], node.base_url());

    const std::vector<std::pair<std::string, std::string>> env = {
        {"BRIGADE_HOME", node.home().string()}};
    const auto stop = run_brigade_env({"stop"}, env, 60);
    EXPECT_EQ(stop.exit_code, 0) << stop.out << stop.err << "\n" << node.logs();
    EXPECT_NE(stop.out.find("stopped after"), std::string::npos) << stop.out;
    EXPECT_FALSE(node.running()) << "brigade stop returned while the node still ran";
    EXPECT_NE(node.err().find("SIGTERM: stopping"), std::string::npos) << node.logs();
    EXPECT_FALSE(std::filesystem::exists(record)) << "the record outlived its node";

    const auto again = run_brigade_env({"stop"}, env, 60);
    EXPECT_EQ(again.exit_code, 1);
    EXPECT_NE(again.err.find("no brigade serve runs"), std::string::npos) << again.err;
}

// A record of a process that is gone (a crash, kill -9): not stopped, not kept.
TEST(StopCommand, ARecordOfADeadProcessIsReportedAndRemoved) {
    TempDir home;
    const pid_t gone = 0x3ffffff0;  // above the largest pid_max Linux allows (4194304)
    std::ofstream(home.path() / "serve.json")
        << R"({"pid": )" << gone << R"(, "url": "http://127.0.0.1:1", "started_unix": 1})";
    const auto stop = run_brigade_env({"stop"}, {{"BRIGADE_HOME", home.path().string()}}, 60);
    EXPECT_EQ(stop.exit_code, 1);
    EXPECT_NE(stop.err.find("is not running"), std::string::npos) << stop.err;
    EXPECT_FALSE(std::filesystem::exists(home.path() / "serve.json"));

    // The pid went to another program (here this test itself): nothing is signalled.
    std::ofstream(home.path() / "serve.json")
        << R"({"pid": )" << ::getpid() << R"(, "url": "http://127.0.0.1:1", "started_unix": 1})";
    const auto other = run_brigade_env({"stop"}, {{"BRIGADE_HOME", home.path().string()}}, 60);
    EXPECT_EQ(other.exit_code, 1);
    EXPECT_NE(other.err.find("runs another program now"), std::string::npos) << other.err;
    EXPECT_FALSE(std::filesystem::exists(home.path() / "serve.json"));

    std::ofstream(home.path() / "serve.json") << "{\"pid\": \"x\"}";
    const auto garbled = run_brigade_env({"stop"}, {{"BRIGADE_HOME", home.path().string()}}, 60);
    EXPECT_EQ(garbled.exit_code, 1);
    EXPECT_NE(garbled.err.find("serve.json"), std::string::npos) << garbled.err;
}

}  // namespace
}  // namespace brigade::test
