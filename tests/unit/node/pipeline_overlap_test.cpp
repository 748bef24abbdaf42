// Issue 6, "many requests in flight at once": with k stages the head keeps up to k micro-batches
// in the pipeline. It must not wait for one request's token before sending another request's
// micro-batch, or a 2-stage pipeline with 2 streams would leave one stage idle at every step.
// The tail is played by the test (it answers when the test says so), so what the head sends
// while a micro-batch is out is observed exactly, without timing.

#include <gtest/gtest.h>

#include <set>

#include "tests/unit/node/pipeline_harness.hpp"

namespace brigade::node {
namespace {

using namespace testing;

class FrameLog final : public FrameSender {
public:
    void send(const mesh::NodeId&, mesh::Message message) override {
        std::lock_guard lock(mutex_);
        if (auto* a = std::get_if<mesh::ActivationFrame>(&message)) frames_.push_back(*a);
    }
    std::vector<mesh::ActivationFrame> frames() {
        std::lock_guard lock(mutex_);
        return frames_;
    }

private:
    std::mutex mutex_;
    std::vector<mesh::ActivationFrame> frames_;
};

class NullEvents final : public RequestEvents {
public:
    void on_accepted(std::uint32_t) override {}
    void on_tokens(std::vector<mesh::SampledTokenInfo>) override {}
    void on_failed(api::ErrorKind, std::string) override {}
};

HeadRequest request(std::uint64_t id) {
    HeadRequest r;
    r.request_id = id;
    r.tokens = {5, 6, 7};
    r.setup.n_prompt = 3;
    r.setup.max_new_tokens = 8;
    r.setup.context = demo_frontend().context;
    return r;
}

mesh::TokenFrame token_for(const mesh::ActivationFrame& frame) {
    mesh::TokenFrame t;
    t.epoch = frame.epoch;
    t.batch_id = frame.batch_id;
    for (const auto& e : frame.entries) {
        mesh::SampledTokenInfo s;
        s.request_id = e.request_id;
        s.token = 9;
        t.tokens.push_back(s);
    }
    return t;
}

TEST(PipelineOverlap, TwoStreamsOnTwoStagesKeepTwoMicroBatchesInFlight) {
    const auto& model = demo_frontend();
    const std::int32_t split = model.config.n_layers / 2;
    PipelineRoute route;
    route.epoch = 3;
    route.self = node_id(0);
    route.stages = {{node_id(0), 0, split}, {node_id(1), split, model.config.n_layers}};
    route.activations = mesh::ActivationDType::kF32;
    FrameLog sender;
    PipelineHead head(model, load_range(model, {0, split}), route, &sender, {}, quiet_logger());

    auto events = std::make_shared<NullEvents>();
    ASSERT_EQ(head.submit(request(1), events), PipelineHead::Submitted::queued);
    ASSERT_EQ(head.submit(request(2), events), PipelineHead::Submitted::queued);
    // Both prompts go out with no token back yet, one request per micro-batch.
    ASSERT_TRUE(TestMesh::wait_for([&] { return sender.frames().size() >= 2; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // nothing more may follow
    auto frames = sender.frames();
    ASSERT_EQ(frames.size(), 2u) << "a request's step was sent before its token came back";
    std::set<std::uint64_t> ids;
    for (const auto& f : frames) {
        ASSERT_EQ(f.entries.size(), 1u) << "two streams on two stages: one request per batch";
        ids.insert(f.entries[0].request_id);
    }
    EXPECT_EQ(ids, (std::set<std::uint64_t>{1, 2}));

    // The tail answers the first micro-batch only: its request's next step goes out at once,
    // while the other request is still in the pipeline — the two stages are both busy.
    head.on_token_frame(token_for(frames[0]));
    ASSERT_TRUE(TestMesh::wait_for([&] { return sender.frames().size() >= 3; }));
    frames = sender.frames();
    ASSERT_EQ(frames[2].entries.size(), 1u);
    EXPECT_EQ(frames[2].entries[0].request_id, frames[0].entries[0].request_id);
    EXPECT_EQ(frames[2].entries[0].n_tokens, 1u);  // a decode step
    EXPECT_EQ(frames[2].entries[0].pos0, 3);
    // And the other one follows as soon as its token returns.
    head.on_token_frame(token_for(frames[1]));
    ASSERT_TRUE(TestMesh::wait_for([&] { return sender.frames().size() >= 4; }));
    EXPECT_EQ(sender.frames()[3].entries[0].request_id, frames[1].entries[0].request_id);
    head.stop(std::chrono::milliseconds(0));
}

}  // namespace
}  // namespace brigade::node
