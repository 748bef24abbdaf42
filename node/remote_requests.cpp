#include "node/remote_requests.hpp"

#include <string>

#include "node/generation.hpp"

namespace brigade::node {
namespace {

// The head's events for a request whose origin is another node.
class RemoteOriginEvents final : public RequestEvents {
public:
    RemoteOriginEvents(FrameSender& sender, mesh::NodeId origin, std::uint64_t request_id)
        : sender_(sender), origin_(origin), request_id_(request_id) {}

    void on_accepted(std::uint32_t cached_tokens) override {
        mesh::RequestUpdate u;
        u.request_id = request_id_;
        u.accepted = true;
        u.cached_tokens = cached_tokens;
        sender_.send(origin_, std::move(u));
    }
    void on_tokens(std::vector<mesh::SampledTokenInfo> tokens) override {
        mesh::RequestUpdate u;
        u.request_id = request_id_;
        u.tokens = std::move(tokens);
        sender_.send(origin_, std::move(u));
    }
    void on_failed(api::ErrorKind kind, std::string message) override {
        sender_.send(origin_,
                     mesh::ErrorFrame{error_code_of(kind), request_id_, std::move(message)});
    }
    void on_waiting() override {
        mesh::RequestUpdate u;  // neither accepted nor tokens: "still here, still waiting"
        u.request_id = request_id_;
        sender_.send(origin_, std::move(u));
    }

private:
    FrameSender& sender_;
    mesh::NodeId origin_;
    std::uint64_t request_id_;
};

}  // namespace

void accept_remote_request(const mesh::NodeId& from, mesh::RequestFrame frame, PipelineHead* head,
                           FrameSender& sender, spdlog::logger& logger) {
    const std::uint64_t id = frame.request_id;
    auto refuse = [&](api::ErrorKind kind, const std::string& why) {
        logger.info("request {} from {} refused: {}", id, from.short_string(), why);
        sender.send(from, mesh::ErrorFrame{error_code_of(kind), id, why});
    };
    if (id == 0) return refuse(api::ErrorKind::invalid_request, "request id 0");
    if (frame.origin != from) {
        return refuse(api::ErrorKind::invalid_request, "the request names origin " +
                                                           frame.origin.short_string() +
                                                           " but came from " + from.short_string());
    }
    if (head == nullptr) {
        return refuse(api::ErrorKind::unavailable, "this node is not the pipeline head");
    }
    if (frame.epoch != head->route().epoch) {
        return refuse(api::ErrorKind::unavailable, "routed by plan " + std::to_string(frame.epoch) +
                                                       " but the head runs plan " +
                                                       std::to_string(head->route().epoch));
    }
    auto setup = decode_generation_setup(frame.setup);
    if (!setup) return refuse(api::ErrorKind::invalid_request, setup.error().message);
    if (setup->n_prompt != frame.n_prompt || frame.tokens.size() < frame.n_prompt) {
        return refuse(api::ErrorKind::invalid_request,
                      "the prompt length does not match the generation setup");
    }
    HeadRequest request;
    request.request_id = id;
    request.tokens = std::move(frame.tokens);
    request.setup = std::move(*setup);
    request.log_id = std::to_string(id) + "@" + from.short_string();
    request.origin = from;
    auto events = std::make_shared<RemoteOriginEvents>(sender, from, id);
    switch (head->submit(std::move(request), std::move(events))) {
        case PipelineHead::Submitted::queued:
            return;
        case PipelineHead::Submitted::queue_full:
            return refuse(api::ErrorKind::overloaded,
                          "the server is busy (all slots and the wait queue are full); retry "
                          "later");
        case PipelineHead::Submitted::stopping:
            return refuse(api::ErrorKind::unavailable, "the pipeline head is stopping");
        case PipelineHead::Submitted::invalid:
            return refuse(api::ErrorKind::invalid_request,
                          "tokens outside the vocabulary, past the context, or a request id "
                          "already in use");
    }
}

}  // namespace brigade::node
