// `brigade serve --memory` bounds the KV cache by what the weights leave of the offered memory:
// a request that would need more KV than that gets a 400 naming the KV memory, and the server
// keeps serving requests that fit.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "tests/integration/serve/serve_process.hpp"

namespace brigade::test {
namespace {

TEST(ServeMemory, RequestPastTheKvMemoryGets400AndTheServerKeepsServing) {
    // The demo weights (at most the file's size) plus 2 KiB a position for 200 positions.
    const auto weights = std::filesystem::file_size(source_dir() / "model/demo/model.safetensors");
    const auto memory = std::to_string(weights + 200 * 2048);
    ServeProcess server({"--no-mesh", "--memory", memory, "--temp", "0"});
    ASSERT_TRUE(server.ready()) << server.log();
    EXPECT_NE(server.log().find("positions in all"), std::string::npos) << server.log();

    nlohmann::json too_long = {
        {"prompt", "Once upon a time"}, {"max_tokens", 450}, {"logit_bias", {{"1", -100}}}};
    auto r = server.post("/v1/completions", too_long);
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_NE(r.body.find("KV"), std::string::npos) << r.body;

    nlohmann::json fits = {
        {"prompt", "Once upon a time"}, {"max_tokens", 100}, {"logit_bias", {{"1", -100}}}};
    r = server.post("/v1/completions", fits);
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json["usage"]["completion_tokens"], 100) << r.body;
    EXPECT_EQ(server.terminate(), 0) << server.log();
}

// Two streams that together need more KV than the node has: one pauses while the other
// finishes, and both end with the text each gives alone.
TEST(ServeMemory, ConcurrentRequestsPastTheKvMemoryBothFinish) {
    const auto weights = std::filesystem::file_size(source_dir() / "model/demo/model.safetensors");
    const auto memory = std::to_string(weights + 300 * 2048);
    ServeProcess server({"--no-mesh", "--memory", memory, "--temp", "0", "--max-concurrency", "2"});
    ASSERT_TRUE(server.ready()) << server.log();
    const std::vector<std::string> prompts = {"Once upon a time", "The little boy"};
    auto body = [](const std::string& prompt) {
        return nlohmann::json{
            {"prompt", prompt}, {"max_tokens", 200}, {"logit_bias", {{"1", -100}}}};
    };
    std::vector<std::string> alone;
    for (const auto& p : prompts) {
        auto r = server.post("/v1/completions", body(p));
        ASSERT_EQ(r.status, 200) << r.body;
        alone.push_back(r.json["choices"][0]["text"]);
    }
    std::vector<ServeProcess::Reply> replies(prompts.size());
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        threads.emplace_back(
            [&, i] { replies[i] = server.post("/v1/completions", body(prompts[i])); });
    }
    for (auto& t : threads) t.join();
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        ASSERT_EQ(replies[i].status, 200) << replies[i].body;
        EXPECT_EQ(replies[i].json["choices"][0]["text"], alone[i]) << i;
    }
    EXPECT_EQ(server.terminate(), 0) << server.log();
}

}  // namespace
}  // namespace brigade::test
