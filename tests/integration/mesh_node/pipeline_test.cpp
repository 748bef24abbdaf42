// Greedy output through 1, 2 and 3 pipeline stages on loopback equals `brigade run` on one
// machine: token for token with `--activations f32`, and within a stated tolerance with the BF16
// default. Requests enter at the head and at other nodes. Splits are forced with --memory.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "tests/integration/mesh_node/mesh_cluster.hpp"
#include "tests/integration/mesh_node/pipeline_compare.hpp"
#include "tests/support/random_model.hpp"

namespace brigade::test {
namespace {

// --memory that makes the planner split the demo model (4 layers; 0.57 MB per layer in BF16,
// 1.5 MB embedding on the head and again as the tied lm_head on the tail) over exactly 2 or 3
// nodes with --ctx 256 (the runtime reserves KV for one stream of that context). Checked with
// `brigade plan --ctx 256 --memory M --add-node mem=M,...`: one node needs 4.36 MB; two nodes
// need 2.97 MB each (an even split), so 3.5 MB gives 2 stages whatever the measured speeds, and
// 2.6 MB leaves no 2-node layout while 3 stages need at most 2.27 MB each.
const std::vector<std::string> kDemoTwoStageMemory = {"3.5MB", "3.5MB"};
const std::vector<std::string> kDemoThreeStageMemory = {"2.6MB", "2.6MB", "2.6MB"};
const std::vector<std::string> kCommonArgs = {"--ctx", "256", "--max-concurrency", "4"};

const std::vector<std::string> kUsers = {"Tell me a story about a cat.", "Where do birds live?",
                                         "What did the little boy eat?",
                                         "Once upon a time there was a king."};

std::unique_ptr<LoopbackMesh> start_mesh(const std::string& name, std::filesystem::path model,
                                         std::vector<std::string> memory, std::string activations,
                                         std::size_t stages) {
    ClusterSpec spec;
    spec.name = name;
    spec.model = std::move(model);
    spec.memory = std::move(memory);
    spec.activations = std::move(activations);
    spec.expected_stages = stages;
    spec.extra_args = kCommonArgs;
    return std::make_unique<LoopbackMesh>(spec);
}

// Every node's view of the plan: the same stages (contiguous over all layers, one per node),
// the same epoch and coordinator; each node marks itself.
void expect_one_plan_everywhere(LoopbackMesh& mesh, int n_layers) {
    const auto& views = mesh.views();
    ASSERT_FALSE(views.empty());
    const auto& plan = views[0]["plan"];
    for (std::size_t i = 0; i < views.size(); ++i) {
        const auto& v = views[i];
        // Stage timings come from capacity reports and may differ by a report; the split may not.
        EXPECT_EQ(v["plan"]["epoch"], plan["epoch"]) << "node " << i;
        ASSERT_EQ(plan_stage_count(v), plan["stages"].size()) << "node " << i << ": " << v.dump();
        for (std::size_t s = 0; s < plan["stages"].size(); ++s) {
            for (const char* key : {"node", "first_layer", "last_layer"}) {
                EXPECT_EQ(v["plan"]["stages"][s][key], plan["stages"][s][key])
                    << "node " << i << " sees another plan: " << v["plan"].dump() << " vs "
                    << plan.dump();
            }
        }
        EXPECT_EQ(v["mesh_id"], views[0]["mesh_id"]);
        EXPECT_EQ(v["coordinator"], views[0]["coordinator"]);
        EXPECT_EQ(v["epoch"], views[0]["epoch"]);
        int self_marks = 0;
        for (const auto& n : v["nodes"]) {
            if (n.value("is_self", false)) {
                ++self_marks;
                EXPECT_EQ(n["id"], v["self"]);
            }
            EXPECT_EQ(n["state"], "alive") << n.dump();
        }
        EXPECT_EQ(self_marks, 1) << v.dump();
    }
    int next = 0;
    std::set<std::string> stage_nodes;
    for (const auto& s : plan["stages"]) {
        EXPECT_EQ(s["first_layer"].get<int>(), next) << plan.dump();
        EXPECT_GT(s["last_layer"].get<int>(), next) << plan.dump();
        next = s["last_layer"].get<int>();
        stage_nodes.insert(s["node"].get<std::string>());
    }
    EXPECT_EQ(next, n_layers) << plan.dump();
    EXPECT_EQ(stage_nodes.size(), plan["stages"].size()) << "a node holds two stages";
}

class DemoThreeStagesF32 : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        mesh_ = start_mesh("d3f", demo_model_dir(), kDemoThreeStageMemory, "f32", 3);
    }
    static void TearDownTestSuite() { mesh_.reset(); }
    void SetUp() override { ASSERT_TRUE(mesh_->error().empty()) << mesh_->error(); }
    void TearDown() override {
        if (HasFailure()) std::printf("%s", mesh_->logs().c_str());
    }
    static std::unique_ptr<LoopbackMesh> mesh_;
};
std::unique_ptr<LoopbackMesh> DemoThreeStagesF32::mesh_;

TEST_F(DemoThreeStagesF32, EveryNodeShowsTheSamePlan) {
    expect_one_plan_everywhere(*mesh_, kDemoLayers);
}

TEST_F(DemoThreeStagesF32, CompletionsEqualRunAtEveryNode) {
    const auto prompt = demo_chat_prompt(kUsers[0]);
    const auto& ref = cached_reference(demo_model_dir(), prompt, 40, kDemoVocab);
    ASSERT_TRUE(ref.error.empty()) << ref.error;
    for (std::size_t s = 0; s < 3; ++s) {
        auto* node = mesh_->stage_node(s);
        ASSERT_NE(node, nullptr);
        expect_exact(node->post("/v1/completions", completion_body(prompt, 40, 2)), ref,
                     "entered at stage " + std::to_string(s) + " (" + node->name() + ")");
    }
}

TEST_F(DemoThreeStagesF32, ChatStreamAtNonHeadEqualsRun) {
    const auto& ref =
        cached_reference(demo_model_dir(), demo_chat_prompt(kUsers[1]), 48, kDemoVocab);
    ASSERT_TRUE(ref.error.empty()) << ref.error;
    nlohmann::json body = {{"messages", {{{"role", "user"}, {"content", kUsers[1]}}}},
                           {"temperature", 0},
                           {"max_tokens", 48}};
    auto s = mesh_->non_head()->stream("/v1/chat/completions", body);
    ASSERT_EQ(s.status, 200) << s.error_body;
    EXPECT_TRUE(s.done);
    EXPECT_EQ(s.content, ref.text);
    auto r = mesh_->stage_node(0)->post("/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json["choices"][0]["message"]["content"], ref.text);
}

// Agent loops resend a long prefix: over three stages the second request computes only its
// own suffix on every stage (usage says how many prompt tokens were reused) and still gives the
// text of `brigade run`.
TEST_F(DemoThreeStagesF32, PrefixReuseAcrossTheStagesGivesTheUncachedText) {
    const std::string shared =
        "You are a kind storyteller for small children. Stories are short, gentle and end "
        "well. A girl, her dog and her grandmother live in a small house by the woods. ";
    const auto first = demo_chat_prompt(shared + "Tell me about the sea.");
    const auto second = demo_chat_prompt(shared + "Where do birds live?");
    const auto& ref = cached_reference(demo_model_dir(), second, 24, kDemoVocab);
    ASSERT_TRUE(ref.error.empty()) << ref.error;
    auto* head = mesh_->stage_node(0);
    auto* tail = mesh_->stage_node(2);
    ASSERT_TRUE(head && tail);
    auto a = head->post("/v1/completions", completion_body(first, 8));
    ASSERT_EQ(a.status, 200) << a.body;
    // Entered at the tail: the origin is not the head; the reuse happens at the head.
    auto b = tail->post("/v1/completions", completion_body(second, 24, 2));
    expect_exact(b, ref, "second request, cached prefix");
    ASSERT_TRUE(b.json.is_object());
    const auto cached = b.json["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
    EXPECT_GT(cached, 30) << b.json["usage"].dump();
}

TEST_F(DemoThreeStagesF32, ConcurrentRequestsFromEveryNodeAreNotMixed) {
    std::vector<const Reference*> refs;
    for (const auto& u : kUsers) {
        refs.push_back(&cached_reference(demo_model_dir(), demo_chat_prompt(u), 32, kDemoVocab));
        ASSERT_TRUE(refs.back()->error.empty()) << refs.back()->error;
    }
    std::vector<HttpReply> got(kUsers.size() * 2);
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < got.size(); ++i) {
        threads.emplace_back([&, i] {
            auto& node = mesh_->node(i % mesh_->nodes().size());
            got[i] = node.post("/v1/completions",
                               completion_body(demo_chat_prompt(kUsers[i % kUsers.size()]), 32, 1));
        });
    }
    for (auto& t : threads) t.join();
    for (std::size_t i = 0; i < got.size(); ++i) {
        expect_exact(got[i], *refs[i % kUsers.size()], "concurrent request " + std::to_string(i),
                     kF32BatchedLogprobTolerance);
    }
}

// `brigade status` on every node: the same plan, for people and as JSON.
TEST_F(DemoThreeStagesF32, StatusCommandShowsNodesPlanAndLinks) {
    const auto& plan = mesh_->views()[0]["plan"];
    for (auto& node : mesh_->nodes()) {
        auto r = run_brigade({"status", "--url", node->base_url()}, 30);
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_NE(r.out.find("3 stages"), std::string::npos) << r.out;
        EXPECT_NE(r.out.find("nodes (3)"), std::string::npos) << r.out;
        for (const auto& s : plan["stages"]) {
            const auto id = s["node"].get<std::string>().substr(0, 8);
            const auto layers = std::to_string(s["first_layer"].get<int>()) + "-" +
                                std::to_string(s["last_layer"].get<int>() - 1);
            EXPECT_NE(r.out.find(id), std::string::npos) << id << " missing:\n" << r.out;
            EXPECT_NE(r.out.find(layers), std::string::npos) << layers << " missing:\n" << r.out;
        }
        EXPECT_NE(r.out.find(" ms"), std::string::npos) << "no link RTT or timing: " << r.out;
        // Every node counts the requests that entered there; only the head has slots.
        EXPECT_NE(r.out.find("requests at this node: "), std::string::npos) << r.out;
        const bool is_head = node.get() == mesh_->stage_node(0);
        EXPECT_EQ(r.out.find("as the pipeline head: ") != std::string::npos, is_head) << r.out;
        auto j = run_brigade({"status", "--url", node->base_url(), "--json"}, 30);
        ASSERT_EQ(j.exit_code, 0) << j.err;
        const auto view = nlohmann::json::parse(j.out, nullptr, false);
        ASSERT_TRUE(view.is_object()) << j.out;
        ASSERT_EQ(plan_stage_count(view), 3u) << j.out;
        for (std::size_t i = 0; i < 3; ++i) {
            EXPECT_EQ(view["plan"]["stages"][i]["node"], plan["stages"][i]["node"]);
            EXPECT_EQ(view["plan"]["stages"][i]["first_layer"], plan["stages"][i]["first_layer"]);
        }
    }
    // The same for a browser: the status page at / on each node, as HTML.
    for (auto& node : mesh_->nodes()) {
        const auto page = node->get("/");
        ASSERT_EQ(page.status, 200) << page.body;
        EXPECT_NE(page.body.find("<pre>mesh "), std::string::npos) << page.body;
        EXPECT_NE(page.body.find("3 stages"), std::string::npos) << page.body;
        EXPECT_NE(page.body.find("requests at this node: "), std::string::npos) << page.body;
    }
    // A node that is not there: a clear error, not a hang.
    auto gone = run_brigade({"status", "--url", "http://127.0.0.1:1", "--timeout", "5"}, 30);
    EXPECT_EQ(gone.exit_code, 1);
    EXPECT_NE(gone.err.find("cannot reach"), std::string::npos) << gone.err;
}

class DemoTwoStagesBf16 : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        mesh_ = start_mesh("d2b", demo_model_dir(), kDemoTwoStageMemory, "", 2);
    }
    static void TearDownTestSuite() { mesh_.reset(); }
    void SetUp() override { ASSERT_TRUE(mesh_->error().empty()) << mesh_->error(); }
    void TearDown() override {
        if (HasFailure()) std::printf("%s", mesh_->logs().c_str());
    }
    static std::unique_ptr<LoopbackMesh> mesh_;
};
std::unique_ptr<LoopbackMesh> DemoTwoStagesBf16::mesh_;

TEST_F(DemoTwoStagesBf16, EveryNodeShowsTheSamePlan) {
    expect_one_plan_everywhere(*mesh_, kDemoLayers);
}

TEST_F(DemoTwoStagesBf16, LogprobsWithinToleranceAtHeadAndTail) {
    std::size_t compared = 0;
    for (const auto& user : {kUsers[0], kUsers[2]}) {
        const auto prompt = demo_chat_prompt(user);
        const auto& ref = cached_reference(demo_model_dir(), prompt, 40, kDemoVocab);
        ASSERT_TRUE(ref.error.empty()) << ref.error;
        for (std::size_t s = 0; s < 2; ++s) {
            auto* node = mesh_->stage_node(s);
            ASSERT_NE(node, nullptr);
            compared += expect_within_bf16_tolerance(
                node->post("/v1/completions", completion_body(prompt, 40, 5)), ref,
                user + " at stage " + std::to_string(s), 5);
        }
    }
    EXPECT_GE(compared, 40u) << "too few tokens compared to say anything";
}

TEST(DemoThreeStagesBf16Mesh, LogprobsWithinToleranceAtAMiddleNode) {
    auto mesh = start_mesh("d3b", demo_model_dir(), kDemoThreeStageMemory, "", 3);
    ASSERT_TRUE(mesh->error().empty()) << mesh->error();
    const auto prompt = demo_chat_prompt(kUsers[3]);
    const auto& ref = cached_reference(demo_model_dir(), prompt, 40, kDemoVocab);
    ASSERT_TRUE(ref.error.empty()) << ref.error;
    auto* middle = mesh->stage_node(1);
    ASSERT_NE(middle, nullptr);
    EXPECT_GE(expect_within_bf16_tolerance(
                  middle->post("/v1/completions", completion_body(prompt, 40, 5)), ref,
                  "3 stages, entered at the middle", 5),
              10u);
}

// The Qwen2.5-shaped random model (6 layers, q/k/v biases, tied embeddings) over 3 stages.
TEST(QwenShapedThreeStagesF32, CompletionsEqualRunAtHeadAndTail) {
    TempDir dir;
    const auto model = dir.path() / "qwen-tiny";
    ASSERT_TRUE(write_random_qwen2_model(model));
    // Per layer 0.37 MB of weights and up to 0.13 MB of f16 KV, embedding 1 MB (head, and tail
    // again for the tied lm_head): two nodes would need 2.15-2.25 MiB each (context 256-512),
    // three need at most 1.96 MiB (`brigade plan`), so 2.05 MiB each takes three.
    auto mesh = start_mesh("q3f", model, {"2.15MB", "2.15MB", "2.15MB"}, "f32", 3);
    ASSERT_TRUE(mesh->error().empty()) << mesh->error();
    expect_one_plan_everywhere(*mesh, RandomModelShape{}.layers);
    const std::string prompt = "Hello there, how are";
    const auto& ref = cached_reference(model, prompt, 24, RandomModelShape{}.vocab);
    ASSERT_TRUE(ref.error.empty()) << ref.error;
    expect_exact(mesh->stage_node(0)->post("/v1/completions", completion_body(prompt, 24, 1)), ref,
                 "qwen-shaped, at the head");
    expect_exact(mesh->stage_node(2)->post("/v1/completions", completion_body(prompt, 24, 1)), ref,
                 "qwen-shaped, at the tail");
}

// A node alone is a mesh of one: one stage holding every layer, on itself.
TEST(OneStageMesh, SingleNodeServesAndShowsItsPlan) {
    auto mesh = start_mesh("d1", demo_model_dir(), {""}, "f32", 1);
    ASSERT_TRUE(mesh->error().empty()) << mesh->error();
    expect_one_plan_everywhere(*mesh, kDemoLayers);
    EXPECT_EQ(mesh->views()[0]["plan"]["stages"][0]["node"], mesh->views()[0]["self"]);
    const auto prompt = demo_chat_prompt(kUsers[2]);
    const auto& ref = cached_reference(demo_model_dir(), prompt, 32, kDemoVocab);
    ASSERT_TRUE(ref.error.empty()) << ref.error;
    expect_exact(mesh->node(0).post("/v1/completions", completion_body(prompt, 32, 1)), ref,
                 "one stage");
}

}  // namespace
}  // namespace brigade::test
