// The origin and the head's answers to remote origins: a request whose head stops is resumed
// on the next pipeline and the client's stream continues with exactly the uninterrupted text
// (issue 7); RequestFrames are refused with the right error codes.

#include <gtest/gtest.h>

#include <atomic>

#include "node/remote_requests.hpp"
#include "tests/unit/node/pipeline_harness.hpp"

namespace brigade::node {
namespace {

using namespace testing;

class CapturingSender final : public FrameSender {
public:
    void send(const mesh::NodeId& to, mesh::Message message) override {
        std::lock_guard lock(mutex_);
        sent.emplace_back(to, std::move(message));
    }
    std::vector<std::pair<mesh::NodeId, mesh::Message>> take() {
        std::lock_guard lock(mutex_);
        return std::move(sent);
    }
    std::vector<std::pair<mesh::NodeId, mesh::Message>> sent;

private:
    std::mutex mutex_;
};

class SwitchableDirectory final : public PipelineDirectory {
public:
    std::optional<ActivePipeline> active(std::string& why) override {
        std::lock_guard lock(mutex_);
        if (!pipeline_) why = "no plan yet";
        return pipeline_;
    }
    void set(std::optional<ActivePipeline> p) {
        std::lock_guard lock(mutex_);
        pipeline_ = std::move(p);
    }
    bool plan_expected() override { return expected_; }
    void set_expected(bool expected) { expected_ = expected; }

private:
    std::mutex mutex_;
    std::optional<ActivePipeline> pipeline_;
    std::atomic<bool> expected_{false};
};

PipelineRoute one_stage(std::uint64_t epoch) {
    PipelineRoute r;
    r.epoch = epoch;
    r.self = node_id(0);
    r.stages.push_back({node_id(0), 0, demo_frontend().config.n_layers});
    r.activations = mesh::ActivationDType::kF32;
    return r;
}

std::shared_ptr<PipelineHead> make_head(std::uint64_t epoch, FrameSender* sender,
                                        PipelineHeadOptions options = {}) {
    const auto& model = demo_frontend();
    return std::make_shared<PipelineHead>(model, load_range(model, {0, model.config.n_layers}),
                                          one_stage(epoch), sender, options, quiet_logger());
}

void expect_resume_gives_uninterrupted_text(const api::CompletionRequest& request) {
    const auto& model = demo_frontend();
    CapturingSender sender;
    SwitchableDirectory directory;
    SamplingDefaults defaults;
    MeshCompletionService service(model, node_id(0), directory, sender, defaults, quiet_logger());

    auto first = make_head(1, nullptr);
    directory.set(ActivePipeline{one_stage(1), first});
    auto whole = start(service, request);
    ASSERT_TRUE(whole.sink->wait());
    ASSERT_TRUE(whole.sink->final) << (whole.sink->error ? whole.sink->error->message : "");

    auto resumed = start(service, request);
    ASSERT_TRUE(TestMesh::wait_for([&] { return resumed.sink->deltas() >= 10; }));
    // A new plan commits: its head takes over; the old head stops at once, failing what it
    // ran with `unavailable`, and the origin resumes the request there.
    auto second = make_head(2, nullptr);
    directory.set(ActivePipeline{one_stage(2), second});
    first->stop(std::chrono::milliseconds(0));
    ASSERT_TRUE(resumed.sink->wait());
    ASSERT_TRUE(resumed.sink->final) << (resumed.sink->error ? resumed.sink->error->message : "");
    EXPECT_EQ(resumed.sink->content, whole.sink->content);
    EXPECT_EQ(resumed.sink->final->usage.completion_tokens,
              whole.sink->final->usage.completion_tokens);
    EXPECT_EQ(resumed.sink->final->usage.prompt_tokens, whole.sink->final->usage.prompt_tokens);
    // The second head ran it (it had to recompute prompt + the tokens so far).
    EXPECT_GT(second->timings().tokens, 10u);
    second->stop(std::chrono::milliseconds(0));
}

TEST(Origin, GreedyRequestResumedOnANewPipelineGivesTheUninterruptedText) {
    const auto& model = demo_frontend();
    auto request = completion("Once upon a time, a little girl", 120);
    request.sampling.logit_bias = {{model.stop_ids.front(), -100.0}};
    expect_resume_gives_uninterrupted_text(request);
}

TEST(Origin, SeededRequestWithPenaltiesResumedGivesTheUninterruptedText) {
    const auto& model = demo_frontend();
    auto request = completion("The dragon flew over the mountains and", 120);
    request.sampling.temperature = 0.9;
    request.sampling.top_p = 0.95;
    request.sampling.seed = 42;
    request.sampling.presence_penalty = 0.5;
    request.sampling.repetition_penalty = 1.1;
    request.sampling.logit_bias = {{model.stop_ids.front(), -100.0}};
    expect_resume_gives_uninterrupted_text(request);
}

// The final's timings name the hops of the pipeline the directory gave the request (for its
// log line), and after a resume those of the pipeline that finished it.
TEST(Origin, TheFinalNamesTheHopsOfThePipelineThatFinishedIt) {
    const auto& model = demo_frontend();
    CapturingSender sender;
    SwitchableDirectory directory;
    MeshCompletionService service(model, node_id(0), directory, sender, {}, quiet_logger());
    const std::vector<api::Hop> first_hops = {{"aaaaaaaa", "bbbbbbbb", 0.25},
                                              {"bbbbbbbb", "aaaaaaaa", -1.0}};
    const std::vector<api::Hop> second_hops = {{"aaaaaaaa", "cccccccc", 1.5}};
    auto first = make_head(1, nullptr);
    directory.set(ActivePipeline{one_stage(1), first, first_hops});
    auto request = completion("Once upon a time, a little girl", 60);
    request.sampling.logit_bias = {{model.stop_ids.front(), -100.0}};
    auto whole = start(service, request);
    ASSERT_TRUE(whole.sink->wait());
    ASSERT_TRUE(whole.sink->final) << (whole.sink->error ? whole.sink->error->message : "");
    EXPECT_EQ(whole.sink->final->timings.hops, first_hops);

    auto resumed = start(service, request);
    ASSERT_TRUE(TestMesh::wait_for([&] { return resumed.sink->deltas() >= 5; }));
    auto second = make_head(2, nullptr);
    directory.set(ActivePipeline{one_stage(2), second, second_hops});
    first->stop(std::chrono::milliseconds(0));
    ASSERT_TRUE(resumed.sink->wait());
    ASSERT_TRUE(resumed.sink->final) << (resumed.sink->error ? resumed.sink->error->message : "");
    EXPECT_EQ(resumed.sink->final->timings.hops, second_hops);
    second->stop(std::chrono::milliseconds(0));
}

// A service routing to a one-stage pipeline of epoch 1 whose head the test stops: the
// uninterrupted text of a 100-token request, then the same request started again and 10 pieces
// into its stream, so a test can take the pipeline away mid-generation.
class InterruptedRequest {
public:
    explicit InterruptedRequest(MeshServiceOptions options)
        : service_(demo_frontend(), node_id(0), directory, sender_, {}, quiet_logger(), options) {
        request_ = completion("Once upon a time, a little girl", 100);
        request_.sampling.logit_bias = {{demo_frontend().stop_ids.front(), -100.0}};
        first = make_head(1, nullptr);
        directory.set(ActivePipeline{one_stage(1), first});
    }
    ~InterruptedRequest() {
        if (second) second->stop(std::chrono::milliseconds(0));
    }
    // Empty on success, else what went wrong.
    std::string start_both() {
        whole = start(service_, request_);
        if (!whole.sink->wait() || !whole.sink->final) return "the uninterrupted run failed";
        running = start(service_, request_);
        if (!TestMesh::wait_for([&] { return running.sink->deltas() >= 10; })) {
            return "the second run did not stream";
        }
        return "";
    }
    // The next pipeline (epoch 2) commits.
    void commit_second() {
        second = make_head(2, nullptr);
        directory.set(ActivePipeline{one_stage(2), second});
        service_.on_pipeline_changed();
    }
    MeshCompletionService& service() { return service_; }

    SwitchableDirectory directory;
    std::shared_ptr<PipelineHead> first, second;
    Started whole, running;

private:
    CapturingSender sender_;
    api::CompletionRequest request_;
    MeshCompletionService service_;
};

TEST(Origin, RequestWaitsForTheNewPlanWhenItsHeadStopsFirst) {
    // The head learns of the new plan (and stops) before this node does: the request waits for
    // on_pipeline_changed instead of failing, then resumes.
    MeshServiceOptions options;
    options.resume_grace = std::chrono::seconds(30);
    InterruptedRequest t(options);
    ASSERT_EQ(t.start_both(), "");
    t.first->stop(std::chrono::milliseconds(0));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_FALSE(t.running.sink->finished()) << "failed instead of waiting for the new plan";
    t.commit_second();
    ASSERT_TRUE(t.running.sink->wait());
    ASSERT_TRUE(t.running.sink->final)
        << (t.running.sink->error ? t.running.sink->error->message : "");
    EXPECT_EQ(t.running.sink->content, t.whole.sink->content);
}

TEST(Origin, RequestWithoutANewPlanFailsAfterTheGrace) {
    const auto& model = demo_frontend();
    CapturingSender sender;
    SwitchableDirectory directory;
    MeshServiceOptions options;
    options.resume_grace = std::chrono::milliseconds(300);
    MeshCompletionService service(model, node_id(0), directory, sender, {}, quiet_logger(),
                                  options);
    auto request = completion("Once upon a time", 300);
    request.sampling.logit_bias = {{model.stop_ids.front(), -100.0}};
    auto head = make_head(1, nullptr);
    directory.set(ActivePipeline{one_stage(1), head});
    auto s = start(service, request);
    ASSERT_TRUE(TestMesh::wait_for([&] { return s.sink->deltas() >= 3; }));
    head->stop(std::chrono::milliseconds(0));
    ASSERT_TRUE(s.sink->wait(std::chrono::seconds(10)));
    ASSERT_TRUE(s.sink->error);
    EXPECT_EQ(s.sink->error->kind, api::ErrorKind::unavailable);
}

TEST(Origin, ParkedRequestOutwaitsTheGraceWhileAPlanIsBeingFormed) {
    // A slow re-plan (membership timeouts, stage loading on a busy machine) takes longer than
    // the grace for a head that heard first: while the mesh says a plan is coming, the request
    // waits for it (plan_wait), then resumes with the text of an uninterrupted run.
    MeshServiceOptions options;
    options.resume_grace = std::chrono::milliseconds(200);
    options.plan_wait = std::chrono::seconds(30);
    InterruptedRequest t(options);
    ASSERT_EQ(t.start_both(), "");
    t.directory.set_expected(true);
    t.directory.set(std::nullopt);
    t.service().on_pipeline_changed();  // re-planning: parked
    t.first->stop(std::chrono::milliseconds(0));
    // A request that arrives now is parked too.
    auto late = start(t.service(), completion("Once upon a time", 5));
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // 7× the grace
    EXPECT_FALSE(t.running.sink->finished()) << "failed while a plan was still expected";
    EXPECT_FALSE(late.sink->finished()) << "refused while a plan was still expected";
    t.directory.set_expected(false);
    t.commit_second();
    ASSERT_TRUE(t.running.sink->wait());
    ASSERT_TRUE(t.running.sink->final)
        << (t.running.sink->error ? t.running.sink->error->message : "");
    EXPECT_EQ(t.running.sink->content, t.whole.sink->content);
    ASSERT_TRUE(late.sink->wait());
    EXPECT_TRUE(late.sink->final) << (late.sink->error ? late.sink->error->message : "");
}

TEST(Origin, ParkedRequestFailsAfterPlanWait) {
    const auto& model = demo_frontend();
    CapturingSender sender;
    SwitchableDirectory directory;
    directory.set_expected(true);
    MeshServiceOptions options;
    options.resume_grace = std::chrono::milliseconds(100);
    options.plan_wait = std::chrono::milliseconds(400);
    MeshCompletionService service(model, node_id(0), directory, sender, {}, quiet_logger(),
                                  options);
    const auto started = std::chrono::steady_clock::now();
    auto s = start(service, completion("Hi", 3));
    ASSERT_TRUE(s.sink->wait(std::chrono::seconds(10)));
    ASSERT_TRUE(s.sink->error);
    EXPECT_EQ(s.sink->error->kind, api::ErrorKind::unavailable);
    EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(400));
}

TEST(Origin, NoPipelineIsA503WithTheReason) {
    const auto& model = demo_frontend();
    CapturingSender sender;
    SwitchableDirectory directory;
    MeshCompletionService service(model, node_id(0), directory, sender, {}, quiet_logger());
    auto s = start(service, completion("Hi", 3));
    ASSERT_TRUE(s.sink->wait());
    ASSERT_TRUE(s.sink->error);
    EXPECT_EQ(s.sink->error->kind, api::ErrorKind::unavailable);
    EXPECT_NE(s.sink->error->message.find("no plan yet"), std::string::npos);
    EXPECT_EQ(service.health().state, api::HealthState::unavailable);
}

// GET /health's load: requests that entered here, and the slots and queue of this node's
// head. One slot: the first request runs, the second waits; both cancelled, all counts return
// to zero. A head elsewhere leaves the head's counts out (-1).
TEST(Origin, HealthCountsRequestsInFlightAndTheHeadsSlots) {
    const auto& model = demo_frontend();
    CapturingSender sender;
    SwitchableDirectory directory;
    MeshCompletionService service(model, node_id(0), directory, sender, {}, quiet_logger());
    PipelineHeadOptions options;
    options.max_active = 1;
    auto head = make_head(1, nullptr, options);
    directory.set(ActivePipeline{one_stage(1), head});
    auto load_is = [&](std::int64_t in_flight, std::int64_t running, std::int64_t queued) {
        const api::Health h = service.health();
        return h.state == api::HealthState::ok && h.load && h.load->in_flight == in_flight &&
               h.load->head_running == running && h.load->head_queued == queued;
    };
    EXPECT_TRUE(load_is(0, 0, 0));
    // Long enough to be seen running: the end-of-text tokens are banned.
    auto request = completion("Once upon a time", 400);
    for (auto id : model.stop_ids) request.sampling.logit_bias.emplace_back(id, -100.0);
    auto first = start(service, request);
    auto second = start(service, request);
    EXPECT_TRUE(TestMesh::wait_for([&] { return load_is(2, 1, 1); }));
    second.cancel->cancel();
    first.cancel->cancel();
    EXPECT_TRUE(TestMesh::wait_for([&] { return load_is(0, 0, 0); }))
        << service.health().load->in_flight << " " << service.health().load->head_running << " "
        << service.health().load->head_queued;
    head->stop(std::chrono::milliseconds(0));

    auto route = one_stage(2);
    route.stages[0].node = node_id(5);
    directory.set(ActivePipeline{route, nullptr});
    EXPECT_TRUE(load_is(0, -1, -1));
}

TEST(Origin, RemoteHeadThatNeverAnswersTimesOut) {
    const auto& model = demo_frontend();
    CapturingSender sender;
    SwitchableDirectory directory;
    auto route = one_stage(3);
    route.stages[0].node = node_id(5);  // a head elsewhere that receives nothing
    directory.set(ActivePipeline{route, nullptr});
    MeshServiceOptions options;
    options.remote_stall_timeout = std::chrono::milliseconds(300);
    MeshCompletionService service(model, node_id(0), directory, sender, {}, quiet_logger(),
                                  options);
    auto s = start(service, completion("Hi", 3));
    ASSERT_TRUE(s.sink->wait(std::chrono::seconds(10)));
    ASSERT_TRUE(s.sink->error);
    EXPECT_EQ(s.sink->error->kind, api::ErrorKind::unavailable);
    bool request_sent = false, cancel_sent = false;
    for (auto& [to, m] : sender.take()) {
        EXPECT_EQ(to, node_id(5));
        request_sent |= std::holds_alternative<mesh::RequestFrame>(m);
        cancel_sent |= std::holds_alternative<mesh::Cancel>(m);
    }
    EXPECT_TRUE(request_sent);
    EXPECT_TRUE(cancel_sent);
}

// A request that entered at another node and waits in the head's queue longer than that node's
// stall timeout is not taken for lost: the head says it is waiting. Here the head's one slot is
// held by a request whose tokens never come back (dropped on their way), until the head's token
// timeout (2 s) fails it; the queued request, 4 stall timeouts later, then runs.
TEST(Origin, ARequestQueuedAtARemoteHeadLongerThanTheStallTimeoutIsServed) {
    const auto& model = demo_frontend();
    PipelineHeadOptions head_options;
    head_options.max_active = 1;
    head_options.token_timeout = std::chrono::milliseconds(2000);
    head_options.waiting_update_interval = std::chrono::milliseconds(100);
    MeshServiceOptions service_options = TestMesh::no_resume_grace();
    service_options.remote_stall_timeout = std::chrono::milliseconds(500);
    TestMesh mesh(model, {{0, 2}, {2, 4}}, mesh::ActivationDType::kF32, head_options,
                  /*n_origins=*/1, 7, 1, service_options);
    constexpr std::uint64_t kStuck = 77;
    mesh.set_filter([&](const mesh::NodeId&, const mesh::NodeId&, mesh::Message& m) {
        if (const auto* t = std::get_if<mesh::TokenFrame>(&m)) {
            for (const auto& token : t->tokens) {
                if (token.request_id == kStuck) return false;
            }
        }
        return true;
    });
    HeadRequest stuck;
    stuck.request_id = kStuck;
    stuck.tokens = model.tokenizer.encode("Tell me about the sea.", true).value();
    stuck.setup.n_prompt = static_cast<std::int64_t>(stuck.tokens.size());
    stuck.setup.max_new_tokens = 8;
    stuck.setup.context = model.context;
    auto stuck_events = std::make_shared<RecordingEvents>();
    ASSERT_EQ(mesh.head().submit(stuck, stuck_events), PipelineHead::Submitted::queued);
    ASSERT_TRUE(mesh.wait_until([&] { return stuck_events->accepted; }));

    const auto queued = start(mesh.service(2), completion("Hi", 4));
    ASSERT_TRUE(queued.sink->wait(std::chrono::seconds(20)));
    EXPECT_FALSE(queued.sink->error) << queued.sink->error->message;
    ASSERT_TRUE(queued.sink->final);
    EXPECT_EQ(queued.sink->final->usage.completion_tokens, 4);
    ASSERT_TRUE(stuck_events->wait(std::chrono::seconds(1)));
    EXPECT_TRUE(stuck_events->failed);  // the token timeout: what held the slot so long
}

// A token of request `id` that does not end it.
mesh::SampledTokenInfo token_of(std::uint64_t id, std::int32_t t) {
    return mesh::SampledTokenInfo{id, t, -0.5f, {}, mesh::TokenFinish::kContinue};
}

// An origin (node 0) whose pipeline is headed by node 5, with one 8-token request sent there.
struct OriginOfARemoteHead {
    CapturingSender sender;
    SwitchableDirectory directory;
    MeshCompletionService service;
    Started started;
    mesh::RequestFrame sent;  // the RequestFrame that went to node 5

    OriginOfARemoteHead()
        : service(demo_frontend(), node_id(0), directory, sender, {}, quiet_logger()) {
        auto route = one_stage(3);
        route.stages[0].node = node_id(5);
        directory.set(ActivePipeline{route, nullptr});
        started = start(service, completion("Hi", 8));
    }
    // Waits for the request to reach the sender; false if it never does.
    bool request_sent() {
        std::optional<mesh::RequestFrame> request;
        const bool ok = TestMesh::wait_for([&] {
            for (auto& [to, m] : sender.take()) {
                if (auto* f = std::get_if<mesh::RequestFrame>(&m)) request = *f;
            }
            return request.has_value();
        });
        if (request) sent = *request;
        return ok;
    }
};

// The link to a remote head went down: the tokens on it may be lost, so the origin ignores the
// rest of that attempt and, when a link to the head is up again, resumes the request there from
// what it received (a new attempt, the old one cancelled). Another node's link changes nothing.
TEST(Origin, RequestResumesAtItsHeadWhenTheLinkToItComesBack) {
    const auto& model = demo_frontend();
    OriginOfARemoteHead origin;
    ASSERT_TRUE(origin.request_sent());
    const std::uint64_t first_id = origin.sent.request_id;
    origin.service.on_request_update(node_id(5), {first_id, true, 0, {token_of(first_id, 300)}});
    origin.service.on_request_update(node_id(5), {first_id, false, 0, {token_of(first_id, 301)}});
    ASSERT_TRUE(TestMesh::wait_for([&] { return origin.started.sink->deltas() >= 2; }));

    origin.service.on_link_down(node_id(7));
    origin.service.on_link_up(node_id(7));
    EXPECT_TRUE(origin.sender.take().empty());

    origin.service.on_link_down(node_id(5));
    // A token of the cut attempt (held by the head while the link was down) is not streamed.
    origin.service.on_request_update(node_id(5), {first_id, false, 0, {token_of(first_id, 302)}});
    EXPECT_TRUE(origin.sender.take().empty());
    origin.service.on_link_up(node_id(5));
    auto sent = origin.sender.take();
    ASSERT_EQ(sent.size(), 2u);
    EXPECT_EQ(sent[0].first, node_id(5));
    const auto* cancel = std::get_if<mesh::Cancel>(&sent[0].second);
    ASSERT_NE(cancel, nullptr);
    EXPECT_EQ(cancel->request_id, first_id);
    EXPECT_EQ(sent[1].first, node_id(5));
    const auto* again = std::get_if<mesh::RequestFrame>(&sent[1].second);
    ASSERT_NE(again, nullptr);
    EXPECT_NE(again->request_id, first_id);
    EXPECT_EQ(again->epoch, origin.sent.epoch);
    EXPECT_EQ(again->n_prompt, origin.sent.n_prompt);
    auto expected = origin.sent.tokens;
    expected.push_back(300);
    expected.push_back(301);
    EXPECT_EQ(again->tokens, expected);
    EXPECT_EQ(again->setup, origin.sent.setup);

    // The old attempt's frames stay ignored; the new one's are streamed.
    origin.service.on_request_update(node_id(5), {first_id, false, 0, {token_of(first_id, 302)}});
    origin.service.on_request_update(node_id(5), {again->request_id, true, 0, {}});
    auto last = token_of(again->request_id, 303);
    last.finish = mesh::TokenFinish::kLength;
    origin.service.on_request_update(node_id(5), {again->request_id, false, 0, {last}});
    ASSERT_TRUE(origin.started.sink->wait());
    ASSERT_TRUE(origin.started.sink->final)
        << (origin.started.sink->error ? origin.started.sink->error->message : "");
    EXPECT_EQ(origin.started.sink->final->usage.completion_tokens, 3);
    const std::vector<std::int32_t> streamed = {300, 301, 303};
    EXPECT_EQ(origin.started.sink->content, model.tokenizer.decode(streamed, true));
}

// Found by the soak: the link to the head went down, and the head was declared dead before it
// linked again, so the request was parked for the next plan. The head's frames held during the
// outage then arrived and finished the request with a token missing. A cut attempt's frames
// are ignored parked or not, and the request resumes on the next plan from what it had.
TEST(Origin, ParkedRequestIgnoresTheAttemptCutWithItsLink) {
    const auto& model = demo_frontend();
    OriginOfARemoteHead origin;
    ASSERT_TRUE(origin.request_sent());
    const std::uint64_t first_id = origin.sent.request_id;
    origin.service.on_request_update(node_id(5), {first_id, true, 0, {token_of(first_id, 300)}});
    origin.service.on_link_down(node_id(5));
    origin.directory.set_expected(true);
    origin.directory.set(std::nullopt);
    origin.service.on_pipeline_changed();  // parked: re-planning
    origin.service.on_link_up(node_id(5));
    auto last = token_of(first_id, 302);
    last.finish = mesh::TokenFinish::kLength;
    origin.service.on_request_update(node_id(5), {first_id, false, 0, {last}});
    EXPECT_FALSE(origin.started.sink->final) << origin.started.sink->content;
    origin.sender.take();
    auto route = one_stage(4);
    route.stages[0].node = node_id(6);
    origin.directory.set(ActivePipeline{route, nullptr});
    origin.service.on_pipeline_changed();
    std::optional<mesh::RequestFrame> resumed;
    for (auto& [to, m] : origin.sender.take()) {
        if (auto* f = std::get_if<mesh::RequestFrame>(&m)) {
            EXPECT_EQ(to, node_id(6));
            resumed = *f;
        }
    }
    ASSERT_TRUE(resumed);
    auto expected = origin.sent.tokens;
    expected.push_back(300);
    EXPECT_EQ(resumed->tokens, expected);
    auto end = token_of(resumed->request_id, 301);
    end.finish = mesh::TokenFinish::kLength;
    origin.service.on_request_update(node_id(6), {resumed->request_id, true, 0, {end}});
    ASSERT_TRUE(origin.started.sink->wait());
    const std::vector<std::int32_t> streamed = {300, 301};
    EXPECT_EQ(origin.started.sink->content, model.tokenizer.decode(streamed, true));
}

// A Cancel sent to a remote head (the client left) may have been lost with a link that then
// came back: the head would run the request for nobody. The origin sends it again when a link
// to that head comes up, and only to that head.
TEST(Origin, CancelGoesAgainWhenTheLinkToItsHeadComesBack) {
    OriginOfARemoteHead origin;
    ASSERT_TRUE(origin.request_sent());
    origin.started.cancel->cancel();
    const auto cancels_of = [](std::vector<std::pair<mesh::NodeId, mesh::Message>> sent) {
        std::vector<std::pair<mesh::NodeId, std::uint64_t>> out;
        for (auto& [to, m] : sent) {
            if (auto* c = std::get_if<mesh::Cancel>(&m)) out.emplace_back(to, c->request_id);
        }
        return out;
    };
    const std::vector<std::pair<mesh::NodeId, std::uint64_t>> expected = {
        {node_id(5), origin.sent.request_id}};
    EXPECT_EQ(cancels_of(origin.sender.take()), expected);
    origin.service.on_link_down(node_id(7));
    origin.service.on_link_up(node_id(7));
    EXPECT_TRUE(origin.sender.take().empty());
    origin.service.on_link_down(node_id(5));
    origin.service.on_link_up(node_id(5));
    EXPECT_EQ(cancels_of(origin.sender.take()), expected);
    EXPECT_EQ(origin.service.n_in_flight(), 0u);
}

mesh::RequestFrame request_frame(std::uint64_t id, std::uint64_t epoch, int max_new = 4) {
    GenerationSetup setup;
    setup.n_prompt = 3;
    setup.max_new_tokens = max_new;
    setup.context = demo_frontend().context;
    for (auto stop : demo_frontend().stop_ids) setup.logit_bias.emplace_back(stop, -100.0f);
    mesh::RequestFrame f;
    f.request_id = id;
    f.epoch = epoch;
    f.origin = node_id(3);
    f.tokens = {5, 6, 7};
    f.n_prompt = 3;
    f.setup = encode_generation_setup(setup);
    return f;
}

std::optional<mesh::ErrorFrame> error_in(std::vector<std::pair<mesh::NodeId, mesh::Message>> sent) {
    for (auto& [to, m] : sent) {
        EXPECT_EQ(to, node_id(3));
        if (auto* e = std::get_if<mesh::ErrorFrame>(&m)) return *e;
    }
    return std::nullopt;
}

// Tokens a long request asks for: the demo model's whole context after a 3-token prompt.
constexpr int kLong = 509;

TEST(RemoteRequests, RefusalsCarryTheRightCodes) {
    CapturingSender sender;
    PipelineHeadOptions options;
    options.max_active = 1;
    options.max_queue = 0;
    auto head = make_head(4, &sender, options);
    auto& log = *quiet_logger();
    auto code_of = [&](mesh::RequestFrame f, PipelineHead* h) -> std::optional<api::ErrorKind> {
        accept_remote_request(node_id(3), std::move(f), h, sender, log);
        auto e = error_in(sender.take());
        if (!e) return std::nullopt;
        return error_kind_of(e->code);
    };
    EXPECT_EQ(code_of(request_frame(1, 4), nullptr), api::ErrorKind::unavailable);     // not head
    EXPECT_EQ(code_of(request_frame(1, 3), head.get()), api::ErrorKind::unavailable);  // epoch
    auto bad_setup = request_frame(1, 4);
    bad_setup.setup.pop_back();
    EXPECT_EQ(code_of(bad_setup, head.get()), api::ErrorKind::invalid_request);
    auto bad_token = request_frame(1, 4);
    bad_token.tokens[1] = 999999;
    EXPECT_EQ(code_of(bad_token, head.get()), api::ErrorKind::invalid_request);
    auto wrong_origin = request_frame(1, 4);
    wrong_origin.origin = node_id(4);
    EXPECT_EQ(code_of(wrong_origin, head.get()), api::ErrorKind::invalid_request);

    // One slot, no queue: a long request holds it (queued or running: either way the slot is
    // taken), so the next one, sent right after it, gets 429. Not waiting in between keeps this
    // independent of how fast the head generates on a busy machine.
    accept_remote_request(node_id(3), request_frame(10, 4, kLong), head.get(), sender, log);
    EXPECT_EQ(code_of(request_frame(11, 4), head.get()), api::ErrorKind::overloaded);
    head->cancel(10);
    ASSERT_TRUE(TestMesh::wait_for([&] { return head->n_active() == 0; }));

    // Accepted: RequestUpdate{accepted}, then tokens, the last one finishing.
    sender.take();
    accept_remote_request(node_id(3), request_frame(12, 4, 4), head.get(), sender, log);
    std::vector<mesh::SampledTokenInfo> tokens;
    bool accepted = false;
    ASSERT_TRUE(TestMesh::wait_for([&] {
        for (auto& [to, m] : sender.take()) {
            EXPECT_EQ(to, node_id(3));
            auto* u = std::get_if<mesh::RequestUpdate>(&m);
            if (u == nullptr) {
                ADD_FAILURE() << "not a RequestUpdate";
                continue;
            }
            EXPECT_EQ(u->request_id, 12u);
            accepted |= u->accepted;
            for (auto& t : u->tokens) tokens.push_back(t);
        }
        return !tokens.empty() && tokens.back().finish != mesh::TokenFinish::kContinue;
    }));
    EXPECT_TRUE(accepted);
    EXPECT_EQ(tokens.size(), 4u);
    EXPECT_EQ(tokens.back().finish, mesh::TokenFinish::kLength);
    // The origin leaves: its requests are cancelled, another origin's are not. A request that
    // is not cancelled runs to its length (kLong tokens); a cancelled one stops short of it.
    auto tokens_of = [&](std::uint64_t id) {
        std::size_t n = 0;
        bool finished = false;
        for (auto& [to, m] : sender.take()) {
            if (auto* u = std::get_if<mesh::RequestUpdate>(&m); u && u->request_id == id) {
                n += u->tokens.size();
                if (!u->tokens.empty() && u->tokens.back().finish != mesh::TokenFinish::kContinue)
                    finished = true;
            }
        }
        return std::pair{n, finished};
    };
    sender.take();
    accept_remote_request(node_id(3), request_frame(14, 4, kLong), head.get(), sender, log);
    head->cancel_origin(node_id(4));
    ASSERT_TRUE(
        TestMesh::wait_for([&] { return head->n_active() == 0 && head->n_waiting() == 0; }));
    EXPECT_EQ(tokens_of(14), (std::pair<std::size_t, bool>{kLong, true}))
        << "another origin's request runs to its end";
    accept_remote_request(node_id(3), request_frame(15, 4, kLong), head.get(), sender, log);
    head->cancel_origin(node_id(3));
    EXPECT_TRUE(
        TestMesh::wait_for([&] { return head->n_active() == 0 && head->n_waiting() == 0; }));
    EXPECT_LT(tokens_of(15).first, static_cast<std::size_t>(kLong))
        << "its own origin's request stops";

    head->stop(std::chrono::milliseconds(0));
    EXPECT_EQ(code_of(request_frame(13, 4), head.get()), api::ErrorKind::unavailable);
}

}  // namespace
}  // namespace brigade::node
