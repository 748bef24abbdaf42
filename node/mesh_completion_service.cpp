#include "node/mesh_completion_service.hpp"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <variant>

#include "node/output_stream.hpp"
#include "node/prompt_builder.hpp"

namespace brigade::node {
namespace {

using Clock = std::chrono::steady_clock;

struct StartJob {
    api::CompletionRequest request;
    std::shared_ptr<api::CompletionSink> sink;
    std::shared_ptr<api::Cancellation> cancel;
};

// One request that entered at this node, from templating to its last event.
struct OriginRequest {
    std::mutex mutex;
    std::string api_id;
    std::shared_ptr<api::Cancellation> cancel;
    std::optional<OutputStream> stream;
    std::vector<std::int32_t> tokens;  // prompt, then the tokens generated so far
    GenerationSetup setup;
    // The current attempt (a resumed request gets a new id on its new pipeline).
    std::uint64_t request_id = 0;
    std::uint64_t epoch = 0;
    mesh::NodeId head;
    std::weak_ptr<PipelineHead> local_head;  // set when the head is this node's
    Clock::time_point last_heard;
    int attempts = 0;
    bool done = false;
    // The link to the head of the current attempt went down (MeshCompletionService::
    // on_link_down): its frames may have been lost with it, so the rest of them are ignored, and
    // the request resumes from what it has when a link to that head is up again, or on the next
    // plan.
    bool attempt_cut = false;
    // Failed by its head with `unavailable`, or arrived while re-planning: waiting
    // (resume_grace, or plan_wait while a plan is expected) for a newer pipeline.
    std::optional<std::string> parked;
};

constexpr const char* kBusy =
    "the server is busy (all slots and the wait queue are full); retry later";

}  // namespace

struct MeshCompletionService::Impl : std::enable_shared_from_this<Impl> {
    Impl(const ModelFrontend& model, mesh::NodeId self, PipelineDirectory& directory,
         FrameSender& sender, SamplingDefaults defaults, std::shared_ptr<spdlog::logger> logger,
         MeshServiceOptions options)
        : model(model),
          self(self),
          directory(directory),
          sender(sender),
          defaults(defaults),
          logger(std::move(logger)),
          options(options),
          texts(model.tokenizer),
          rng(std::random_device{}()) {}

    const ModelFrontend& model;
    const mesh::NodeId self;
    PipelineDirectory& directory;
    FrameSender& sender;
    const SamplingDefaults defaults;
    std::shared_ptr<spdlog::logger> logger;
    const MeshServiceOptions options;
    TokenTexts texts;

    std::mutex mutex;  // guards everything below
    std::condition_variable wake;
    std::deque<StartJob> jobs;
    bool stopping = false;
    std::unordered_map<std::uint64_t, std::shared_ptr<OriginRequest>> requests;
    std::mt19937_64 rng;
    std::thread thread;
    // Cancels sent to remote heads lately: a link reset may have lost them, and the head would
    // then run the request to its end for nobody (on_link_up sends them again).
    struct SentCancel {
        mesh::NodeId head;
        std::uint64_t request_id = 0;
        std::string reason;
        Clock::time_point at;
    };
    std::deque<SentCancel> recent_cancels;
    static constexpr std::size_t kMaxRecentCancels = 1024;
    static constexpr std::chrono::minutes kRecentCancelAge{10};

    using Request = std::shared_ptr<OriginRequest>;

    void run();
    void prepare(StartJob job);
    std::uint64_t new_request_id();
    // With req->mutex held: sends the request to the active pipeline (or fails it).
    void route(const Request& req);
    void cancel_at_head(const Request& req, const std::string& reason);
    void finish(const Request& req);  // req->mutex held; forgets it
    // With req->mutex held: the client gets the error; the request is forgotten.
    void stream_fail_locked(const Request& req, api::ErrorKind kind, std::string message);
    bool try_resume(const Request& req);  // req->mutex held

    void on_accepted(const Request& req, std::uint64_t attempt, std::uint32_t cached);
    void on_waiting(const Request& req, std::uint64_t attempt);
    void on_tokens(const Request& req, std::uint64_t attempt,
                   const std::vector<mesh::SampledTokenInfo>& tokens);
    void on_failed(const Request& req, std::uint64_t attempt, api::ErrorKind kind,
                   std::string message);
    void on_client_cancel(const Request& req);
    void check_stalled();
    Request find(std::uint64_t request_id);
    // Every request in flight, taken under `mutex` (each is then handled under its own).
    std::vector<Request> all_requests();

    class LocalEvents;
};

// Events from this node's PipelineHead, for one attempt of one request.
class MeshCompletionService::Impl::LocalEvents final : public RequestEvents {
public:
    LocalEvents(std::weak_ptr<MeshCompletionService::Impl> service,
                std::shared_ptr<OriginRequest> request, std::uint64_t attempt)
        : service_(std::move(service)), request_(std::move(request)), attempt_(attempt) {}

    void on_accepted(std::uint32_t cached_tokens) override {
        if (auto s = service_.lock()) s->on_accepted(request_, attempt_, cached_tokens);
    }
    void on_tokens(std::vector<mesh::SampledTokenInfo> tokens) override {
        if (auto s = service_.lock()) s->on_tokens(request_, attempt_, tokens);
    }
    void on_failed(api::ErrorKind kind, std::string message) override {
        if (auto s = service_.lock()) s->on_failed(request_, attempt_, kind, std::move(message));
    }

private:
    std::weak_ptr<MeshCompletionService::Impl> service_;
    std::shared_ptr<OriginRequest> request_;
    std::uint64_t attempt_;
};

// ---------------------------------------------------------------------------------------------
// Impl
// ---------------------------------------------------------------------------------------------

void MeshCompletionService::Impl::run() {
    auto next_check = Clock::now() + std::chrono::seconds(1);
    for (;;) {
        std::deque<StartJob> batch;
        {
            std::unique_lock lock(mutex);
            wake.wait_until(lock, next_check, [&] { return stopping || !jobs.empty(); });
            batch.swap(jobs);
            if (stopping) {
                lock.unlock();
                for (auto& job : batch) {
                    job.sink->on_error(
                        {api::ErrorKind::unavailable, "the server is shutting down", ""});
                }
                return;
            }
        }
        for (auto& job : batch) prepare(std::move(job));
        if (Clock::now() >= next_check) {
            check_stalled();
            next_check = Clock::now() + std::chrono::seconds(1);
        }
    }
}

std::uint64_t MeshCompletionService::Impl::new_request_id() {
    std::lock_guard lock(mutex);
    for (;;) {
        const std::uint64_t id = rng() & ~kPrefixEntryBit;
        if (id != 0 && requests.count(id) == 0) return id;
    }
}

std::vector<MeshCompletionService::Impl::Request> MeshCompletionService::Impl::all_requests() {
    std::lock_guard lock(mutex);
    std::vector<Request> all;
    all.reserve(requests.size());
    for (auto& [id, r] : requests) all.push_back(r);
    return all;
}

MeshCompletionService::Impl::Request MeshCompletionService::Impl::find(std::uint64_t id) {
    std::lock_guard lock(mutex);
    auto it = requests.find(id);
    return it == requests.end() ? nullptr : it->second;
}

void MeshCompletionService::Impl::prepare(StartJob job) {
    if (job.cancel && job.cancel->cancelled()) {
        job.sink->on_error({api::ErrorKind::internal, "cancelled before it started", ""});
        return;
    }
    auto prepared = prepare_prompt(model, job.request);
    if (auto* error = std::get_if<api::ServiceError>(&prepared)) {
        job.sink->on_error(std::move(*error));
        return;
    }
    auto& prompt = std::get<PreparedPrompt>(prepared);
    const auto sampling = resolve_sampling(job.request, defaults);
    if (auto v = model::validate_sampling_params(sampling); !v) {
        job.sink->on_error({api::ErrorKind::invalid_request, v.error().message, ""});
        return;
    }
    auto req = std::make_shared<OriginRequest>();
    req->api_id = job.request.id;
    req->cancel = job.cancel;
    auto& setup = req->setup;
    setup.sampling = sampling;
    for (const auto& [id, bias] : job.request.sampling.logit_bias) {
        setup.logit_bias.emplace_back(id, static_cast<float>(bias));
    }
    setup.json_object = job.request.response_format == api::ResponseFormat::json_object;
    setup.logprobs = job.request.logprobs;
    setup.top_logprobs = job.request.logprobs ? job.request.top_logprobs : 0;
    setup.n_prompt = static_cast<std::int64_t>(prompt.tokens.size());
    setup.max_new_tokens = prompt.max_new_tokens;
    setup.context = model.context;
    OutputSetup out;
    out.n_prompt = setup.n_prompt;
    out.logprobs = setup.logprobs;
    out.top_logprobs = setup.top_logprobs;
    out.output = std::move(prompt.output);
    req->stream.emplace(model, texts, std::move(job.sink), std::move(out));
    req->tokens = std::move(prompt.tokens);
    {
        std::lock_guard lock(req->mutex);
        route(req);
    }
    if (req->cancel) {
        // Runs at once when the client is already gone.
        std::weak_ptr<Impl> weak_self = weak_from_this();
        std::weak_ptr<OriginRequest> weak_req = req;
        req->cancel->on_cancel([weak_self, weak_req] {
            auto self = weak_self.lock();
            auto r = weak_req.lock();
            if (self && r) self->on_client_cancel(r);
        });
    }
}

void MeshCompletionService::Impl::route(const Request& req) {
    std::string why;
    auto active = directory.active(why);
    if (!active && options.resume_grace.count() > 0 && directory.plan_expected()) {
        // Parked: on_pipeline_changed routes it when the plan commits; check_stalled fails it
        // with `why` after plan_wait.
        if (req->request_id == 0) {
            const std::uint64_t id = new_request_id();
            req->request_id = id;
            std::lock_guard lock(mutex);
            requests[id] = req;
        }
        if (!req->parked) {
            logger->info("{}: {}; waiting up to {} ms for the next plan", req->api_id, why,
                         std::max(options.plan_wait, options.resume_grace).count());
        }
        req->parked = why;
        req->last_heard = Clock::now();
        return;
    }
    if (!active) {
        stream_fail_locked(req, api::ErrorKind::unavailable,
                           why.empty() ? "no pipeline is serving the model" : why);
        return;
    }
    if (!active->local_head && active->route.head() == self) {
        stream_fail_locked(req, api::ErrorKind::unavailable,
                           "this node heads plan " + std::to_string(active->route.epoch) +
                               " but its stage is not running");
        return;
    }
    {
        std::lock_guard lock(mutex);
        requests.erase(req->request_id);
    }
    const std::uint64_t id = new_request_id();
    req->request_id = id;
    req->epoch = active->route.epoch;
    req->head = active->route.head();
    req->local_head = active->local_head;
    req->stream->set_hops(std::move(active->hops));
    req->last_heard = Clock::now();
    req->parked.reset();
    req->attempt_cut = false;
    ++req->attempts;
    {
        std::lock_guard lock(mutex);
        requests[id] = req;
    }
    if (active->local_head) {
        HeadRequest h;
        h.request_id = id;
        h.tokens = req->tokens;
        h.setup = req->setup;
        h.log_id = req->api_id;
        auto events = std::make_shared<LocalEvents>(weak_from_this(), req, id);
        switch (active->local_head->submit(std::move(h), std::move(events))) {
            case PipelineHead::Submitted::queued:
                return;
            case PipelineHead::Submitted::queue_full:
                stream_fail_locked(req, api::ErrorKind::overloaded, kBusy);
                return;
            case PipelineHead::Submitted::stopping:
                stream_fail_locked(req, api::ErrorKind::unavailable, "the server is shutting down");
                return;
            case PipelineHead::Submitted::invalid:
                stream_fail_locked(
                    req, api::ErrorKind::internal,
                    "the pipeline head refused request " + req->api_id + " as invalid");
                return;
        }
        return;
    }
    mesh::RequestFrame frame;
    frame.request_id = id;
    frame.epoch = req->epoch;
    frame.origin = self;
    frame.tokens = req->tokens;
    frame.n_prompt = static_cast<std::uint32_t>(req->setup.n_prompt);
    frame.setup = encode_generation_setup(req->setup);
    sender.send(req->head, std::move(frame));
}

void MeshCompletionService::Impl::cancel_at_head(const Request& req, const std::string& reason) {
    if (auto head = req->local_head.lock()) {
        head->cancel(req->request_id);
    } else if (req->request_id != 0 && !req->head.is_zero() && req->head != self) {
        sender.send(req->head, mesh::Cancel{req->request_id, reason});
        const auto now = Clock::now();
        std::lock_guard lock(mutex);
        while (!recent_cancels.empty() && (recent_cancels.size() >= kMaxRecentCancels ||
                                           now - recent_cancels.front().at > kRecentCancelAge)) {
            recent_cancels.pop_front();
        }
        recent_cancels.push_back({req->head, req->request_id, reason, now});
    }
}

void MeshCompletionService::Impl::finish(const Request& req) {
    req->done = true;
    std::lock_guard lock(mutex);
    requests.erase(req->request_id);
}

void MeshCompletionService::Impl::stream_fail_locked(const Request& req, api::ErrorKind kind,
                                                     std::string message) {
    if (req->done) return;
    req->stream->fail({kind, std::move(message), ""});
    finish(req);
}

bool MeshCompletionService::Impl::try_resume(const Request& req) {
    std::string why;
    auto active = directory.active(why);
    if (!active || active->route.epoch == req->epoch) return false;
    logger->info("{}: its head stopped; resuming on the pipeline of epoch {}", req->api_id,
                 active->route.epoch);
    route(req);
    return true;
}

void MeshCompletionService::Impl::on_accepted(const Request& req, std::uint64_t attempt,
                                              std::uint32_t cached) {
    std::lock_guard lock(req->mutex);
    if (req->done || req->request_id != attempt || req->attempt_cut) return;
    req->last_heard = Clock::now();
    req->stream->on_accepted(cached);
}

void MeshCompletionService::Impl::on_waiting(const Request& req, std::uint64_t attempt) {
    std::lock_guard lock(req->mutex);
    if (req->done || req->request_id != attempt || req->attempt_cut) return;
    req->last_heard = Clock::now();  // the head holds it: a long queue is not a lost head
}

void MeshCompletionService::Impl::on_tokens(const Request& req, std::uint64_t attempt,
                                            const std::vector<mesh::SampledTokenInfo>& tokens) {
    std::lock_guard lock(req->mutex);
    if (req->done || req->request_id != attempt || req->attempt_cut) return;
    req->last_heard = Clock::now();
    for (const auto& t : tokens) {
        if (t.request_id != attempt) continue;
        if (t.token >= 0) req->tokens.push_back(t.token);
        const auto outcome = req->stream->on_token(t);
        if (outcome == OutputStream::Outcome::running) continue;
        if (outcome == OutputStream::Outcome::stopped) cancel_at_head(req, "stop string");
        finish(req);
        return;
    }
}

void MeshCompletionService::Impl::on_failed(const Request& req, std::uint64_t attempt,
                                            api::ErrorKind kind, std::string message) {
    std::lock_guard lock(req->mutex);
    if (req->done || req->request_id != attempt || req->attempt_cut) return;
    if (kind == api::ErrorKind::unavailable) {
        if (try_resume(req)) return;
        if (options.resume_grace.count() > 0) {
            logger->info("{}: {}; waiting up to {} ms for a new pipeline", req->api_id, message,
                         options.resume_grace.count());
            req->parked = std::move(message);
            req->last_heard = Clock::now();
            return;
        }
    }
    if (kind == api::ErrorKind::internal && message.find(req->api_id) == std::string::npos) {
        message = "request " + req->api_id + ": " + message;  // for the client and its logs
    }
    stream_fail_locked(req, kind, std::move(message));
}

void MeshCompletionService::Impl::on_client_cancel(const Request& req) {
    std::lock_guard lock(req->mutex);
    if (req->done) return;
    logger->info("{} cancelled by the client after {} tokens; slot freed", req->api_id,
                 req->stream->n_generated());
    cancel_at_head(req, "client gone");
    stream_fail_locked(req, api::ErrorKind::internal, "cancelled");
}

void MeshCompletionService::Impl::check_stalled() {
    const std::vector<Request> all = all_requests();
    const auto now = Clock::now();
    const bool plan_expected = !all.empty() && directory.plan_expected();
    for (auto& req : all) {
        std::lock_guard lock(req->mutex);
        if (req->done) continue;
        if (req->parked) {
            // While a plan is being formed the request waits for it (bounded by plan_wait);
            // otherwise only the grace for a head that heard of a new plan first.
            const auto limit = plan_expected ? std::max(options.plan_wait, options.resume_grace)
                                             : options.resume_grace;
            if (now - req->last_heard >= limit && !try_resume(req)) {
                stream_fail_locked(req, api::ErrorKind::unavailable, *req->parked);
            }
            continue;
        }
        if (!req->local_head.expired() || req->head == self) continue;
        if (now - req->last_heard < options.remote_stall_timeout) continue;
        logger->warn("{}: no answer from head {} for {} ms", req->api_id, req->head.short_string(),
                     options.remote_stall_timeout.count());
        cancel_at_head(req, "stalled");
        if (!try_resume(req)) {
            stream_fail_locked(
                req, api::ErrorKind::unavailable,
                "the pipeline head " + req->head.short_string() + " stopped answering");
        }
    }
}

MeshCompletionService::MeshCompletionService(const ModelFrontend& model, mesh::NodeId self,
                                             PipelineDirectory& directory, FrameSender& sender,
                                             SamplingDefaults defaults,
                                             std::shared_ptr<spdlog::logger> logger,
                                             MeshServiceOptions options)
    : impl_(std::make_shared<Impl>(model, self, directory, sender, defaults, std::move(logger),
                                   options)) {
    impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
}

MeshCompletionService::~MeshCompletionService() { stop(); }

void MeshCompletionService::stop() {
    {
        std::lock_guard lock(impl_->mutex);
        impl_->stopping = true;
    }
    impl_->wake.notify_one();
    if (impl_->thread.joinable() && impl_->thread.get_id() != std::this_thread::get_id()) {
        impl_->thread.join();
    }
}

void MeshCompletionService::start(api::CompletionRequest request,
                                  std::shared_ptr<api::CompletionSink> sink,
                                  std::shared_ptr<api::Cancellation> cancel) {
    const auto& info = impl_->model.info;
    if (api::find_model({info}, request.model) == nullptr) {
        sink->on_error(
            {api::ErrorKind::model_not_found,
             "model '" + request.model + "' not found (this node serves '" + info.id + "')",
             "model"});
        return;
    }
    {
        std::lock_guard lock(impl_->mutex);
        if (impl_->stopping) {
            sink->on_error({api::ErrorKind::unavailable, "the server is shutting down", ""});
            return;
        }
        if (impl_->jobs.size() >= impl_->options.max_pending) {
            sink->on_error({api::ErrorKind::overloaded, kBusy, ""});
            return;
        }
        impl_->jobs.push_back({std::move(request), std::move(sink), std::move(cancel)});
    }
    impl_->wake.notify_one();
}

std::vector<api::ModelInfo> MeshCompletionService::list_models() { return {impl_->model.info}; }

api::Health MeshCompletionService::health() {
    std::string why;
    const auto active = impl_->directory.active(why);
    api::Health health{active ? api::HealthState::ok : api::HealthState::unavailable,
                       active ? "" : why, std::nullopt};
    api::RequestLoad load;
    load.in_flight = static_cast<std::int64_t>(n_in_flight());
    if (active && active->local_head) {
        load.head_running = static_cast<std::int64_t>(active->local_head->n_active());
        load.head_queued = static_cast<std::int64_t>(active->local_head->n_waiting());
        load.head_kv_positions = active->local_head->kv_positions();
        load.head_paused = active->local_head->n_preempted();
    }
    health.load = load;
    return health;
}

void MeshCompletionService::on_request_update(const mesh::NodeId& from,
                                              mesh::RequestUpdate update) {
    auto req = impl_->find(update.request_id);
    if (!req) return;
    {
        std::lock_guard lock(req->mutex);
        if (req->head != from || !req->local_head.expired()) return;
    }
    if (update.accepted) impl_->on_accepted(req, update.request_id, update.cached_tokens);
    if (!update.tokens.empty()) impl_->on_tokens(req, update.request_id, update.tokens);
    if (!update.accepted && update.tokens.empty()) impl_->on_waiting(req, update.request_id);
}

void MeshCompletionService::on_request_error(const mesh::NodeId& from,
                                             const mesh::ErrorFrame& error) {
    auto req = impl_->find(error.request_id);
    if (!req) return;
    {
        std::lock_guard lock(req->mutex);
        if (req->head != from || !req->local_head.expired()) return;
    }
    impl_->on_failed(req, error.request_id, error_kind_of(error.code), error.message);
}

void MeshCompletionService::on_pipeline_changed() {
    const std::vector<Impl::Request> all = impl_->all_requests();
    std::string why;
    const auto active = impl_->directory.active(why);
    const bool expected =
        !active && impl_->options.resume_grace.count() > 0 && impl_->directory.plan_expected();
    for (auto& req : all) {
        std::lock_guard lock(req->mutex);
        if (req->done) continue;
        if (!active && expected) {
            // Re-planning: the next plan resumes it (prompt + tokens so far), unless it takes
            // longer than plan_wait (check_stalled).
            impl_->cancel_at_head(req, "re-planning");
            if (!req->parked) {
                impl_->logger->info(
                    "{}: {}; waiting up to {} ms for the next plan", req->api_id, why,
                    std::max(impl_->options.plan_wait, impl_->options.resume_grace).count());
            }
            req->parked = why;
            req->last_heard = Clock::now();
        } else if (!active) {
            impl_->cancel_at_head(req, "no pipeline");
            impl_->stream_fail_locked(req, api::ErrorKind::unavailable,
                                      "no pipeline can serve this request: " + why);
        } else if (active->route.epoch != req->epoch) {
            impl_->logger->info("{}: resuming on the pipeline of epoch {} after {} tokens",
                                req->api_id, active->route.epoch,
                                req->tokens.size() - static_cast<std::size_t>(req->setup.n_prompt));
            impl_->cancel_at_head(req, "re-planned");
            impl_->route(req);
        }
    }
}

void MeshCompletionService::on_link_down(const mesh::NodeId& peer) {
    const std::vector<Impl::Request> all = impl_->all_requests();
    for (auto& req : all) {
        std::lock_guard lock(req->mutex);
        if (req->done || req->head != peer || !req->local_head.expired()) continue;
        req->attempt_cut = true;
    }
}

void MeshCompletionService::on_link_up(const mesh::NodeId& peer) {
    const std::vector<Impl::Request> all = impl_->all_requests();
    std::vector<mesh::Cancel> cancels;
    {
        std::lock_guard lock(impl_->mutex);
        for (const auto& c : impl_->recent_cancels) {
            if (c.head == peer) cancels.push_back({c.request_id, c.reason});
        }
    }
    // A head ignores a Cancel of a request it no longer runs.
    for (auto& c : cancels) impl_->sender.send(peer, std::move(c));
    for (auto& req : all) {
        std::lock_guard lock(req->mutex);
        // A parked request resumes on the next plan (on_pipeline_changed, check_stalled).
        if (req->done || !req->attempt_cut || req->parked || req->head != peer) continue;
        impl_->logger->warn("{}: the link to its head {} was cut; resuming after {} tokens",
                            req->api_id, peer.short_string(),
                            req->tokens.size() - static_cast<std::size_t>(req->setup.n_prompt));
        impl_->cancel_at_head(req, "link reset");
        impl_->route(req);
    }
}

std::size_t MeshCompletionService::n_in_flight() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->requests.size();
}

void MeshCompletionService::fail_all(const std::string& why) {
    const std::vector<Impl::Request> all = impl_->all_requests();
    for (auto& req : all) {
        std::lock_guard lock(req->mutex);
        if (req->done) continue;
        impl_->cancel_at_head(req, "shutdown");
        impl_->stream_fail_locked(req, api::ErrorKind::unavailable, why);
    }
}

}  // namespace brigade::node
