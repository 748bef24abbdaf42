// `brigade plan` on the demo model: one stage when this node holds it, a contiguous split over
// added nodes when it does not, a clear error when nothing fits, and parseable --json.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/test_support.hpp"

namespace brigade {
namespace {

using test::run_brigade;

std::string describe(const test::CommandResult& r) {
    return "exit " + std::to_string(r.exit_code) + "\nstdout: " + r.out + "\nstderr: " + r.err;
}

constexpr int kDemoLayers = 4;  // model/demo/config.json num_hidden_layers

// Checks that the stages cover [0, n_layers) in order, without gaps or overlaps.
void expect_contiguous(const nlohmann::json& stages, int n_layers) {
    int next = 0;
    for (const auto& s : stages) {
        EXPECT_EQ(s["first_layer"].get<int>(), next) << stages.dump();
        EXPECT_GT(s["last_layer"].get<int>(), s["first_layer"].get<int>()) << stages.dump();
        EXPECT_GT(s["tok_s"].get<double>(), 0) << stages.dump();
        EXPECT_GT(s["memory_bytes"].get<std::uint64_t>(), 0u) << stages.dump();
        next = s["last_layer"].get<int>();
    }
    EXPECT_EQ(next, n_layers) << stages.dump();
}

nlohmann::json plan_json(const std::vector<std::string>& extra, int expected_exit = 0) {
    std::vector<std::string> args{"plan", "--json", "--ctx", "64"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_brigade(args);
    EXPECT_EQ(r.exit_code, expected_exit) << describe(r);
    const auto j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(j.is_discarded()) << r.out;
    return j;
}

TEST(PlanCli, LargeMemoryGivesOneStageWithMeasuredSpeed) {
    // No --speed: this node's speed is measured on the demo model.
    const auto j = plan_json({"--memory", "64GB"});
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j["n_layers"].get<int>(), kDemoLayers);
    EXPECT_TRUE(j["fits"].get<bool>());
    EXPECT_GT(j["nodes"][0]["seconds_per_layer"].get<double>(), 0);
    EXPECT_EQ(j["nodes"][0]["memory_bytes"].get<std::uint64_t>(), 64'000'000'000ull);
    const auto& stages = j["plan"]["stages"];
    ASSERT_EQ(stages.size(), 1u) << j.dump();
    EXPECT_EQ(stages[0]["node"].get<std::string>(), "this");
    expect_contiguous(stages, kDemoLayers);
    EXPECT_TRUE(j["single_node"]["fits"].get<bool>());
    EXPECT_NEAR(j["single_node"]["tok_s"].get<double>(),
                j["plan"]["single_stream_tok_s"].get<double>(), 1e-9);
}

TEST(PlanCli, TinyMemorySplitsOverAddedNodes) {
    // What the whole model needs on one node, to size two nodes that each hold almost all of it.
    const auto whole = plan_json({"--memory", "64GB", "--speed", "0.001"});
    ASSERT_TRUE(whole.is_object());
    const auto needs = whole["single_node"]["needs_bytes"].get<std::uint64_t>();
    ASSERT_GT(needs, 1'000'000u);
    const std::string mem = std::to_string(needs - 1);
    const auto j = plan_json({"--memory", "1MB", "--speed", "0.001", "--add-node",
                              "mem=" + mem + ",speed=0.001,name=alpha", "--add-node",
                              "mem=" + mem + ",speed=0.001,name=beta,rtt=2"});
    ASSERT_TRUE(j.is_object());
    EXPECT_FALSE(j["single_node"]["fits"].get<bool>());
    ASSERT_TRUE(j["fits"].get<bool>()) << j.dump();
    const auto& stages = j["plan"]["stages"];
    ASSERT_GE(stages.size(), 2u) << j.dump();
    expect_contiguous(stages, kDemoLayers);
    for (const auto& s : stages) {
        EXPECT_NE(s["node"].get<std::string>(), "this") << j.dump();
        EXPECT_LE(s["memory_bytes"].get<std::uint64_t>(), needs - 1) << j.dump();
    }
    EXPECT_NE(stages[0]["node"], stages[1]["node"]);
    EXPECT_GT(j["plan"]["single_stream_tok_s"].get<double>(), 0);
}

TEST(PlanCli, RttAndConcurrencyChangeThePrediction) {
    const auto whole = plan_json({"--memory", "64GB", "--speed", "0.001"});
    ASSERT_TRUE(whole.is_object());
    const std::string mem =
        std::to_string(whole["single_node"]["needs_bytes"].get<std::uint64_t>() - 1);
    const auto split = [&mem](const std::string& rtt, const std::string& concurrency) {
        return plan_json({"--memory", "1MB", "--speed", "0.001", "--concurrency", concurrency,
                          "--add-node", "mem=" + mem + ",speed=0.001,rtt=" + rtt, "--add-node",
                          "mem=" + mem + ",speed=0.001,rtt=" + rtt});
    };
    const auto near = split("0.1", "1");
    const auto far = split("50", "1");
    ASSERT_TRUE(near["fits"].get<bool>() && far["fits"].get<bool>()) << near.dump() << far.dump();
    // 50 ms round trips dominate a few ms of compute: the prediction must drop accordingly.
    EXPECT_GT(far["plan"]["hop_s"].get<double>(), near["plan"]["hop_s"].get<double>());
    EXPECT_LT(far["plan"]["single_stream_tok_s"].get<double>() * 5,
              near["plan"]["single_stream_tok_s"].get<double>());
    // Two stages, four streams: the pipeline overlaps micro-batches, so the aggregate exceeds
    // what each stream gets.
    const auto busy = split("0.1", "4");
    ASSERT_TRUE(busy["fits"].get<bool>()) << busy.dump();
    EXPECT_GT(busy["plan"]["aggregate_tok_s"].get<double>(),
              busy["plan"]["stream_tok_s"].get<double>());
}

TEST(PlanCli, NothingFitsIsAClearError) {
    const auto r = run_brigade({"plan", "--memory", "1MB", "--speed", "0.001", "--add-node",
                                "mem=2MB,speed=0.001,name=laptop"});
    EXPECT_EQ(r.exit_code, 1) << describe(r);
    EXPECT_NE(r.err.find("no layout fits"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("laptop"), std::string::npos) << r.err;  // names, not synthetic ids
    EXPECT_NE(r.out.find("does not fit"), std::string::npos) << r.out;

    const auto j = plan_json({"--memory", "1MB", "--speed", "0.001"}, 1);
    ASSERT_TRUE(j.is_object());
    EXPECT_FALSE(j["fits"].get<bool>());
    EXPECT_FALSE(j["error"].get<std::string>().empty());
}

// The KV cache is f16 by default; --kv-f32 plans for nodes that keep it in f32: the whole
// model's memory grows by exactly the KV bytes again (64 tokens x 1 stream here).
TEST(PlanCli, KvF32DoublesTheKvBytesPlanned) {
    const auto f16 = plan_json({"--memory", "64GB", "--speed", "0.001"});
    const auto f32 = plan_json({"--memory", "64GB", "--speed", "0.001", "--kv-f32"});
    ASSERT_TRUE(f16["fits"].get<bool>() && f32["fits"].get<bool>()) << f16.dump() << f32.dump();
    const auto needs16 = f16["single_node"]["needs_bytes"].get<std::uint64_t>();
    const auto needs32 = f32["single_node"]["needs_bytes"].get<std::uint64_t>();
    // The demo model: 4 layers, 2 KV heads x 32 dims; K and V of 64 tokens, 2 bytes each.
    const std::uint64_t kv16 = 4 * 64 * 2 * (2 * 32) * 2;
    EXPECT_EQ(needs32 - needs16, kv16) << needs16 << " " << needs32;
}

TEST(PlanCli, HumanOutputListsStagesAndThroughput) {
    const auto r = run_brigade({"plan", "--memory", "64GB", "--speed", "0.001"});
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_NE(r.out.find("plan: 1 stage"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("layers [0, 4)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("tok/s"), std::string::npos) << r.out;
}

TEST(PlanCli, BadArgumentsAreClearErrors) {
    struct Case {
        std::vector<std::string> args;
        std::string message;
    };
    const std::vector<Case> cases{
        {{"plan", "--memory", "lots", "--speed", "0.001"}, "--memory"},
        {{"plan", "--memory", "1GB", "--speed", "0.001", "--add-node", "mem=1GB"},
         "mem= and speed= are required"},
        {{"plan", "--memory", "1GB", "--speed", "0.001", "--add-node", "mem=1GB,speed=x"},
         "speed must be"},
        {{"plan", "--memory", "1GB", "--speed", "0.001", "--add-node", "mem=1GB,speed=1,cpu=2"},
         "unknown key 'cpu'"},
        {{"plan", "--memory", "1GB", "--speed", "0.001", "--model", "/nonexistent/model"},
         "/nonexistent/model"},
    };
    for (const auto& c : cases) {
        const auto r = run_brigade(c.args);
        EXPECT_EQ(r.exit_code, 1) << describe(r);
        EXPECT_NE(r.err.find(c.message), std::string::npos) << c.message << "\n" << r.err;
    }
}

TEST(PlanCli, HelpDescribesTheOptions) {
    const auto r = run_brigade({"plan", "--help"});
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    for (const char* option :
         {"--model", "--memory", "--add-node", "--concurrency", "--ctx", "--json", "--speed"}) {
        EXPECT_NE(r.out.find(option), std::string::npos) << option << "\n" << r.out;
    }
}

}  // namespace
}  // namespace brigade
