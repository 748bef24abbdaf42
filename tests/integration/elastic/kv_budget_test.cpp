// The KV memory of a split: the head keeps its sequences within the positions that every
// stage's memory holds beside its weights, and a request that runs out of room there pauses
// (its KV given back on every stage) and resumes with the same text, instead of a stage
// outgrowing the memory its node offered. The demo model has 4 layers of 0.57 MB and a
// 1.57 MB embedding (tied: the tail holds it too); 2.9 MB holds 2 layers beside it with room
// for about 370 positions of f16 KV (0.5 kB a position for 2 layers), and no node holds more.
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>

#include "tests/integration/elastic/disruption.hpp"
#include "tests/integration/elastic/elastic_mesh.hpp"

namespace brigade::test {
namespace {

TEST(ElasticKvBudget, RequestsThatOutgrowASplitsKvPauseAndFinishWithTheirText) {
    ElasticMesh mesh(elastic_spec("kvb"));
    ASSERT_EQ(mesh.start({"2.9MB", "2.9MB"}, 2), "");
    NodeProcess* head = mesh.stage_node(0);
    ASSERT_NE(head, nullptr) << mesh.view().dump();

    const HttpReply before = head->get("/health");
    ASSERT_EQ(before.status, 200) << before.body;
    const auto positions = before.json["head"]["kv_positions"].get<std::uint64_t>();
    EXPECT_GT(positions, 250u) << before.body;  // a whole context of 256 fits
    EXPECT_LT(positions, 500u) << before.body;
    report_figure("kv_budget.pipeline_positions", std::to_string(positions));

    // The head's link to the tail has been timed (a heartbeat's round trip) before the
    // requests, so their log lines can name its latency.
    const std::string head_id = mesh.view()["plan"]["stages"][0]["node"].get<std::string>();
    const std::string tail_id = mesh.view()["plan"]["stages"][1]["node"].get<std::string>();
    const auto link_timed = [&] {
        const HttpReply m = head->get("/v1/mesh");
        if (m.status != 200 || !m.json.contains("links")) return false;
        for (const auto& l : m.json["links"]) {
            if (l["from"] == head_id && l["to"] == tail_id && l["rtt_ms"].is_number()) return true;
        }
        return false;
    };
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!link_timed() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_TRUE(link_timed()) << head->get("/v1/mesh").body;

    // Three requests of ~230 positions each at once: about twice what the stages hold.
    const Reference& ref = long_reference(200);
    ASSERT_TRUE(ref.error.empty()) << ref.error;
    std::vector<HttpReply> replies(3);
    std::vector<std::thread> clients;
    for (std::size_t i = 0; i < replies.size(); ++i) {
        clients.emplace_back(
            [&, i] { replies[i] = head->post("/v1/completions", long_completion_body(200)); });
    }
    for (auto& c : clients) c.join();
    for (std::size_t i = 0; i < replies.size(); ++i) {
        ASSERT_EQ(replies[i].status, 200) << i << ": " << replies[i].body << "\n" << mesh.logs();
        EXPECT_EQ(completion_text(replies[i]), ref.text) << "request " << i;
    }
    // Each request's log line names the split's two hops, head to tail and the tokens back,
    // with the latencies the mesh measured on that link.
    const std::string h = head_id.substr(0, 8), t = tail_id.substr(0, 8);
    const std::regex hops(" hops=" + h + ">" + t + R"(:[0-9]+\.[0-9]{2}ms,)" + t + ">" + h +
                          R"(:[0-9]+\.[0-9]{2}ms)");
    EXPECT_TRUE(std::regex_search(head->out() + head->err(), hops)) << head->logs();
    const HttpReply after = head->get("/health");
    report_figure("kv_budget.paused_for_kv", after.json["head"]["paused_for_kv"].dump());
    EXPECT_GE(after.json["head"]["paused_for_kv"].get<std::uint64_t>(), 1u) << after.body << "\n"
                                                                            << mesh.logs();
}

}  // namespace
}  // namespace brigade::test
