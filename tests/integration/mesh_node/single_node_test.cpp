// One `brigade serve` process (a mesh of one) against `brigade run`: the reference every split
// is held to. Also checks the harness itself: readiness, logs, SIGTERM exit.
#include <gtest/gtest.h>

#include "tests/integration/mesh_node/mesh_node_util.hpp"
#include "tests/support/random_model.hpp"

namespace brigade::test {
namespace {

// Completions on one node equal `brigade run` token for token, and the logprobs the API
// reports are log_softmax of the logits `brigade run` computed (same arithmetic: 1e-4).
void expect_matches_run(NodeProcess& node, const std::filesystem::path& model, int vocab,
                        const std::string& prompt, int n) {
    const auto ref = reference_run(model, prompt, n, vocab);
    ASSERT_TRUE(ref.error.empty()) << ref.error;
    ASSERT_FALSE(ref.ids.empty());
    auto r = node.post("/v1/completions", completion_body(prompt, n, 3));
    ASSERT_EQ(r.status, 200) << r.body << node.logs();
    EXPECT_EQ(completion_text(r), ref.text) << prompt;
    const auto lps = token_logprobs(r.json);
    ASSERT_EQ(lps.size(), ref.ids.size()) << r.body;
    for (std::size_t i = 0; i < lps.size(); ++i) {
        EXPECT_NEAR(lps[i], logprob_of(ref.logits[i], ref.ids[i]), 1e-4) << "token " << i;
    }
}

TEST(SingleNode, DemoCompletionsEqualRunWithLogprobs) {
    NodeProcess node(node_spec("solo", {"--threads", "2"}, /*mesh=*/false));
    ASSERT_TRUE(node.ready()) << node.why();
    expect_matches_run(node, demo_model_dir(), kDemoVocab,
                       demo_chat_prompt("Tell me a story about a cat."), 32);
    expect_matches_run(node, demo_model_dir(), kDemoVocab, "The cat and the dog", 12);
    EXPECT_EQ(node.terminate(), 0) << node.logs();
}

TEST(SingleNode, RandomQwenShapedModelEqualsRun) {
    TempDir dir;
    const auto model = dir.path() / "qwen-tiny";
    ASSERT_TRUE(write_random_qwen2_model(model));
    NodeProcess node(
        node_spec("solo-qwen", {"--model", model.string(), "--threads", "2"}, /*mesh=*/false));
    ASSERT_TRUE(node.ready()) << node.why();
    expect_matches_run(node, model, RandomModelShape{}.vocab, "Hello there, how are", 20);
    EXPECT_EQ(node.terminate(), 0) << node.logs();
}

TEST(SingleNode, HarnessReportsAProcessThatCannotStart) {
    auto spec = node_spec("bad", {"--model", "/nonexistent/model/dir"}, /*mesh=*/false);
    spec.ready_timeout = Seconds(20);
    NodeProcess node(spec);
    EXPECT_FALSE(node.ready());
    EXPECT_NE(node.why().find("exited before it was ready"), std::string::npos) << node.why();
    EXPECT_FALSE(node.err().empty());
}

}  // namespace
}  // namespace brigade::test
