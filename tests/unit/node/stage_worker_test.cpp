// StageWorker on its own: frames that cannot run are answered with an ErrorFrame to the head
// naming the request (or dropped, for another plan); a Release is forwarded down the pipeline
// behind the frames queued before it.

#include "node/stage_worker.hpp"

#include <gtest/gtest.h>

#include "node/activations.hpp"
#include "tests/unit/node/pipeline_harness.hpp"

namespace brigade::node {
namespace {

using namespace testing;

class Outbox final : public FrameSender {
public:
    void send(const mesh::NodeId& to, mesh::Message m) override {
        std::lock_guard lock(mutex_);
        sent_.emplace_back(to, std::move(m));
    }
    std::vector<std::pair<mesh::NodeId, mesh::Message>> wait_for(std::size_t n) {
        std::vector<std::pair<mesh::NodeId, mesh::Message>> out;
        TestMesh::wait_for([&] {
            std::lock_guard lock(mutex_);
            return sent_.size() >= n;
        });
        std::lock_guard lock(mutex_);
        out.swap(sent_);
        return out;
    }

private:
    std::mutex mutex_;
    std::vector<std::pair<mesh::NodeId, mesh::Message>> sent_;
};

PipelineRoute three_stages(int self) {
    PipelineRoute r;
    r.epoch = 9;
    r.self = node_id(self);
    r.stages = {{node_id(0), 0, 1}, {node_id(1), 1, 3}, {node_id(2), 3, 4}};
    r.activations = mesh::ActivationDType::kF32;
    return r;
}

// A first chunk of `n` rows for request `id` entering the middle stage (layers 1-2).
mesh::ActivationFrame chunk(std::uint64_t id, std::uint32_t n, std::int32_t pos0 = 0) {
    const auto& model = demo_frontend();
    mesh::ActivationFrame f;
    f.epoch = 9;
    f.batch_id = 1;
    f.first_layer = 1;
    f.dtype = mesh::ActivationDType::kF32;
    f.hidden = static_cast<std::uint32_t>(model.config.hidden_size);
    mesh::ActivationEntry e;
    e.request_id = id;
    e.pos0 = pos0;
    e.n_tokens = n;
    e.wants_token = true;
    e.tokens.assign(n, 7);
    GenerationSetup setup;
    setup.n_prompt = n;
    setup.max_new_tokens = 4;
    setup.context = model.context;
    e.setup = encode_generation_setup(setup);
    f.entries.push_back(e);
    std::vector<float> hidden(n * f.hidden, 0.01f);
    encode_activations(hidden, f.dtype, f.payload);
    return f;
}

const mesh::ErrorFrame& error_to_head(const std::pair<mesh::NodeId, mesh::Message>& sent) {
    EXPECT_EQ(sent.first, node_id(0));
    static const mesh::ErrorFrame kNone;
    auto* e = std::get_if<mesh::ErrorFrame>(&sent.second);
    EXPECT_NE(e, nullptr);
    return e ? *e : kNone;
}

TEST(StageWorker, BadFramesFailTheirRequestsAtTheHead) {
    const auto& model = demo_frontend();
    Outbox out;
    StageWorker middle(model, load_range(model, {1, 3}), three_stages(1), out, quiet_logger());

    auto wrong_layer = chunk(21, 3);
    wrong_layer.first_layer = 2;
    middle.on_activation(wrong_layer);
    auto sent = out.wait_for(1);
    ASSERT_EQ(sent.size(), 1u);
    auto e = error_to_head(sent[0]);
    EXPECT_EQ(e.request_id, 21u);
    EXPECT_EQ(error_kind_of(e.code), api::ErrorKind::internal);
    EXPECT_NE(e.message.find("request 21"), std::string::npos) << e.message;
    EXPECT_NE(e.message.find("layer 2"), std::string::npos) << e.message;

    auto short_payload = chunk(22, 3);
    short_payload.payload.resize(short_payload.payload.size() - 4);
    middle.on_activation(short_payload);
    sent = out.wait_for(1);
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(error_to_head(sent[0]).request_id, 22u);

    // Rows that do not continue the stage's KV.
    middle.on_activation(chunk(23, 3, /*pos0=*/2));
    sent = out.wait_for(1);
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_NE(error_to_head(sent[0]).message.find("holds 0 positions"), std::string::npos);

    // Another plan's frame is dropped silently; a good one is forwarded to the tail.
    auto stale = chunk(24, 3);
    stale.epoch = 8;
    middle.on_activation(stale);
    middle.on_activation(chunk(25, 3));
    sent = out.wait_for(1);
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(sent[0].first, node_id(2));
    auto* fwd = std::get_if<mesh::ActivationFrame>(&sent[0].second);
    ASSERT_NE(fwd, nullptr);
    EXPECT_EQ(fwd->first_layer, 3);
    EXPECT_EQ(fwd->entries.at(0).request_id, 25u);
    EXPECT_FALSE(fwd->entries[0].setup.empty()) << "the tail needs the setup";
    EXPECT_EQ(fwd->payload.size(), 3u * fwd->hidden * 4);
    EXPECT_TRUE(TestMesh::wait_for([&] { return middle.n_kv_sequences() == 1; }));

    // Release frees the KV and is forwarded to the tail.
    middle.release(25);
    sent = out.wait_for(1);
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(sent[0].first, node_id(2));
    auto* cancel = std::get_if<mesh::Cancel>(&sent[0].second);
    ASSERT_NE(cancel, nullptr);
    EXPECT_EQ(cancel->request_id, 25u);
    EXPECT_TRUE(TestMesh::wait_for([&] { return middle.n_kv_sequences() == 0; }));
}

TEST(StageWorker, TailSamplesOrRefusesARequestWithoutSetup) {
    const auto& model = demo_frontend();
    Outbox out;
    StageWorker tail(model, load_range(model, {3, 4}), three_stages(2), out, quiet_logger());
    auto f = chunk(31, 2);
    f.first_layer = 3;
    f.entries[0].setup.clear();
    tail.on_activation(f);
    auto sent = out.wait_for(1);
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_NE(error_to_head(sent[0]).message.find("setup"), std::string::npos);

    auto good = chunk(32, 2);
    good.first_layer = 3;
    good.batch_id = 77;
    tail.on_activation(good);
    sent = out.wait_for(1);
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(sent[0].first, node_id(0));
    auto* tokens = std::get_if<mesh::TokenFrame>(&sent[0].second);
    ASSERT_NE(tokens, nullptr);
    EXPECT_EQ(tokens->epoch, 9u);
    EXPECT_EQ(tokens->batch_id, 77u);
    ASSERT_EQ(tokens->tokens.size(), 1u);
    EXPECT_EQ(tokens->tokens[0].request_id, 32u);
    EXPECT_GE(tokens->tokens[0].token, 0);
    EXPECT_LT(tokens->tokens[0].token, model.vocab_size);
    const auto t = tail.timings();
    EXPECT_EQ(t.steps, 1u);
    EXPECT_EQ(t.tokens, 2u);
}

}  // namespace
}  // namespace brigade::node
