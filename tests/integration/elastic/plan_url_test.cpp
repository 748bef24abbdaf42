// `brigade plan --url` against a running mesh: with no change it predicts the plan the mesh
// committed (the same planner on the same inputs); taking out a node the model needs says that
// nothing fits; a large hypothetical node takes the whole model.
#include <gtest/gtest.h>

#include "tests/integration/elastic/elastic_mesh.hpp"

namespace brigade::test {
namespace {

TEST(ElasticPlanUrl, PredictsTheCommittedPlanAndWhatAChangeWouldDo) {
    ElasticMesh mesh(elastic_spec("planurl"));
    ASSERT_EQ(mesh.start({"2.9MB", "2.9MB"}, 2), "");
    NodeProcess* head = mesh.stage_node(0);
    ASSERT_NE(head, nullptr);
    const std::string url = head->base_url();

    const auto same = run_brigade({"plan", "--url", url}, 60);
    EXPECT_EQ(same.exit_code, 0) << same.out << same.err;
    EXPECT_NE(same.out.find("the planner now: 2 stages (the committed plan)"), std::string::npos)
        << same.out << same.err << "\n"
        << mesh_view(*head).dump(1);
    const auto as_json = run_brigade({"plan", "--url", url, "--json"}, 60);
    ASSERT_EQ(as_json.exit_code, 0) << as_json.err;
    const auto j = nlohmann::json::parse(as_json.out, nullptr, false);
    ASSERT_TRUE(j.is_object()) << as_json.out;
    EXPECT_EQ(j["same_as_committed"], true) << as_json.out;
    EXPECT_EQ(j["nodes"].size(), 2u) << as_json.out;

    const std::string tail = mesh.id_of(mesh.stage_node(1)).substr(0, 8);
    const auto without = run_brigade({"plan", "--url", url, "--remove-node", tail}, 60);
    EXPECT_EQ(without.exit_code, 1) << without.out << without.err;
    EXPECT_NE(without.out.find("with the changes: no layout fits"), std::string::npos)
        << without.out << without.err;

    const auto bigger =
        run_brigade({"plan", "--url", url, "--add-node", "mem=16MB,speed=0.00001,name=big"}, 60);
    EXPECT_EQ(bigger.exit_code, 0) << bigger.out << bigger.err;
    EXPECT_NE(bigger.out.find("with the changes: 1 stage\n"), std::string::npos) << bigger.out;
    EXPECT_NE(bigger.out.find("stage 0  big"), std::string::npos) << bigger.out;

    // Planned with the shape of another model's files: refused, not a wrong prediction.
    const auto other_model =
        run_brigade({"plan", "--url", url, "--model",
                     (source_dir() / "tests/fixtures/reference/llama_f32").string()},
                    60);
    EXPECT_EQ(other_model.exit_code, 1);
    EXPECT_NE(other_model.err.find("the mesh serves 'demo'"), std::string::npos) << other_model.err;

    const auto nobody = run_brigade({"plan", "--url", url, "--remove-node", "zzzzzzzz"}, 60);
    EXPECT_EQ(nobody.exit_code, 1);
    EXPECT_NE(nobody.err.find("matches 0"), std::string::npos) << nobody.err;
}

}  // namespace
}  // namespace brigade::test
