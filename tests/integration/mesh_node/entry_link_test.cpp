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

class EntryLink : public ::testing::Test {
protected:
    static void SetUpTestSuite() { state_ = std::make_unique<State>(); }
    static void TearDownTestSuite() { state_.reset(); }
    void SetUp() override { ASSERT_TRUE(state_->error.empty()) << state_->error; }

    struct State : ProxiedPair {
        State() : ProxiedPair("entry", two_node_mesh_args("4GB"), two_node_mesh_args("1MB")) {
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
    const auto cut = state_->stream_with_a_flipped_bit(*state_->lower, prompt, 200, true);
    ASSERT_TRUE(cut.cut) << "the stream ended before the cut";
    EXPECT_TRUE(state_->proxy->corrupted()) << "nothing came downstream after the cut";
    state_->expect_whole(cut, ref.text);
    // The entry node says what it did.
    const auto entry_log = state_->lower->err().substr(entry_log_before);
    const auto at = entry_log.find("was cut; resuming");
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
    state_->expect_both_serve("Tell me about the sea.");
}

}  // namespace
}  // namespace brigade::test
