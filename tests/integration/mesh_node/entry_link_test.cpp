// A request that enters at a node holding no stage gets its tokens from the pipeline head in
// RequestUpdate frames. When the link between the two drops and comes back (a blip far shorter
// than --suspect-after, so membership sees nothing), the frames that were on it are lost: the
// text had a hole in it and the generation went on, with no error. The entry node now resumes
// its requests at that head from the tokens it received, and the client's text is whole.
//
// The lower node (it dials, through the proxy) holds no stage (--memory 1MB); the upper one
// holds the whole model and heads the pipeline.
#include <gtest/gtest.h>

#include <chrono>

#include "tests/integration/mesh_node/mesh_cluster.hpp"
#include "tests/integration/mesh_node/pipeline_compare.hpp"
#include "tests/integration/mesh_node/proxied_pair.hpp"

namespace brigade::test {
namespace {

std::vector<std::string> node_args(const std::string& memory) {
    return {"--model",
            demo_model_dir().string(),
            "--threads",
            "1",
            "--mesh-host",
            "127.0.0.1",
            "--no-discovery",
            "--ctx",
            "256",
            "--max-concurrency",
            "4",
            "--memory",
            memory,
            "--expect-nodes",
            "2"};
}

class EntryLink : public ::testing::Test {
protected:
    static void SetUpTestSuite() { state_ = std::make_unique<State>(); }
    static void TearDownTestSuite() { state_.reset(); }
    void SetUp() override { ASSERT_TRUE(state_->error.empty()) << state_->error; }

    struct State : ProxiedPair {
        State() : ProxiedPair("entry", node_args("4GB"), node_args("1MB")) {
            if (!error.empty()) return;
            std::string why;
            const auto views =
                wait_for_common_plan({upper.get(), lower.get()}, 2, 1, Millis(60'000), why);
            if (views.empty()) {
                error = "no 1-stage plan: " + why + "\n" + logs();
                return;
            }
            const auto stages = views[0]["plan"]["stages"];
            if (stages.size() != 1 || stages[0]["node"] != mesh_view(*upper)["self"]) {
                error = "expected the upper node to hold the model: " + views[0].dump();
            }
        }
    };
    static std::unique_ptr<State> state_;
};
std::unique_ptr<EntryLink::State> EntryLink::state_;

// The bit flipped on its way from the head to the entry node fails that record's
// authentication: the entry node closes the link, losing the tokens in that record and any
// behind it, and the nodes link again at once.
TEST_F(EntryLink, AStreamThatEnteredElsewhereIsWholeAfterItsLinkToTheHeadResets) {
    const auto prompt = demo_chat_prompt("Tell me a story about a cat.");
    const auto& ref = cached_reference(demo_model_dir(), prompt, 200, kDemoVocab);
    ASSERT_TRUE(ref.error.empty()) << ref.error;
    const auto entry_log_before = state_->lower->err().size();
    bool cut = false;
    std::chrono::steady_clock::time_point cut_at;
    const auto r = http_stream(state_->lower->url(), "/v1/completions",
                               completion_body(prompt, 200), Millis(120'000), [&](std::size_t n) {
                                   if (n != 12 || cut) return;
                                   state_->proxy->corrupt_next_downstream_byte();
                                   cut = true;
                                   cut_at = std::chrono::steady_clock::now();
                               });
    ASSERT_TRUE(cut) << "the stream ended before the cut";
    EXPECT_TRUE(state_->proxy->corrupted()) << "nothing came downstream after the cut";
    const double after_s = std::chrono::duration<double>(r.ended - cut_at).count();
    std::printf("[ figure   ] link reset -> end of the 200-token stream: %.2f s\n", after_s);
    EXPECT_EQ(r.status, 200) << r.error_body;
    EXPECT_TRUE(r.errors.empty()) << (r.errors.empty() ? "" : r.errors.front()) << "\n"
                                  << state_->logs();
    EXPECT_TRUE(r.done);
    EXPECT_EQ(r.content, ref.text) << state_->logs();
    EXPECT_LT(after_s, 15.0) << state_->logs();
    // The entry node says what it did.
    const auto entry_log = state_->lower->err().substr(entry_log_before);
    const auto at = entry_log.find("was reset; resuming");
    EXPECT_NE(at, std::string::npos) << entry_log;
    if (at != std::string::npos) {
        const auto line_start = entry_log.rfind('\n', at);
        const auto from = line_start == std::string::npos ? 0 : line_start + 1;
        std::printf("[ log      ] %s\n",
                    entry_log.substr(from, entry_log.find('\n', at) - from).c_str());
    }
    // Nothing of either attempt stays behind: no request in flight at the entry node, no slot
    // or queue place held at the head.
    std::string last_health;
    EXPECT_TRUE(wait_until(
        [&] {
            const auto h = state_->upper->get("/health");
            const auto e = state_->lower->get("/health");
            last_health = h.body + "\n" + e.body;
            return h.status == 200 && e.status == 200 && h.json.contains("head") &&
                   h.json["head"]["running"] == 0 && h.json["head"]["queued"] == 0 &&
                   e.json["requests"]["in_flight"] == 0;
        },
        Millis(30'000)))
        << last_health;
    // Both nodes serve the next request's reference text.
    const auto next = demo_chat_prompt("Tell me about the sea.");
    const auto& next_ref = cached_reference(demo_model_dir(), next, 24, kDemoVocab);
    for (auto* n : {state_->upper.get(), state_->lower.get()}) {
        const auto reply = n->post("/v1/completions", completion_body(next, 24));
        EXPECT_EQ(completion_text(reply), next_ref.text) << n->name() << ": " << reply.body;
    }
}

}  // namespace
}  // namespace brigade::test
