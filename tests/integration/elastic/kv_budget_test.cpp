// The KV memory of a split: the head keeps its sequences within the positions that every
// stage's memory holds beside its weights, and a request that runs out of room there pauses
// (its KV given back on every stage) and resumes with the same text, instead of a stage
// outgrowing the memory its node offered. The demo model has 4 layers of 0.57 MB and a
// 1.57 MB embedding (tied: the tail holds it too); 2.9 MB holds 2 layers beside it with room
// for about 370 positions of f16 KV (0.5 kB a position for 2 layers), and no node holds more.
#include <gtest/gtest.h>

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
    const HttpReply after = head->get("/health");
    report_figure("kv_budget.paused_for_kv", after.json["head"]["paused_for_kv"].dump());
    EXPECT_GE(after.json["head"]["paused_for_kv"].get<std::uint64_t>(), 1u) << after.body << "\n"
                                                                            << mesh.logs();
}

}  // namespace
}  // namespace brigade::test
