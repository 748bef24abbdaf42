#include "node/stage_worker.hpp"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <variant>

#include "node/activations.hpp"
#include "node/generation.hpp"

namespace brigade::node {
namespace {

using Clock = std::chrono::steady_clock;

struct Release {
    std::uint64_t request_id = 0;
};
using WorkItem = std::variant<mesh::ActivationFrame, Release, mesh::KvPrefix>;

}  // namespace

struct StageWorker::Impl {
    Impl(StageWorker& owner, const ModelFrontend& model, std::shared_ptr<StageResources> res,
         FrameSender& sender, std::shared_ptr<spdlog::logger> logger)
        : owner(owner),
          model(model),
          resources(std::move(res)),
          sender(sender),
          logger(std::move(logger)),
          texts(model.tokenizer) {
        const auto& route = owner.route_;
        const int index = route.index_of(route.self);
        is_tail = resources->stage->is_tail();
        if (index >= 0 && static_cast<std::size_t>(index) + 1 < route.stages.size()) {
            next = route.stages[static_cast<std::size_t>(index) + 1].node;
        }
        const auto r = resources->stage->range();
        name = "stage " + route.self.short_string() + " (layers " + std::to_string(r.first) + "-" +
               std::to_string(r.last - 1) + ")";
    }

    StageWorker& owner;
    const ModelFrontend& model;
    std::shared_ptr<StageResources> resources;
    FrameSender& sender;
    std::shared_ptr<spdlog::logger> logger;
    TokenTexts texts;
    bool is_tail = false;
    std::optional<mesh::NodeId> next;
    std::string name;

    mutable std::mutex mutex;
    std::condition_variable wake;
    std::deque<WorkItem> queue;
    bool stopping = false;
    StageTimings timings;
    std::size_t n_kv_mirror = 0;
    std::mutex join_mutex;
    std::thread thread;

    // Compute thread only.
    std::unordered_map<std::uint64_t, TokenSampler> samplers;  // tail
    // The tail's rows to sample, their jobs and tokens, reused across frames.
    std::vector<std::size_t> to_sample;
    std::vector<SampleJob> sample_jobs;
    std::vector<mesh::SampledTokenInfo> sampled;
    // Tail: token ids of what the KV holds, for requests that finished (until the head keeps or
    // frees them), for cached prefix entries, and for new requests that start from an entry
    // (the history their sampler starts with).
    std::unordered_map<std::uint64_t, std::vector<std::int32_t>> ended_history, entry_tokens,
        reused_history;
    std::vector<float> hidden_in, compact;
    std::vector<model::SequenceBatchEntry> batch;
    std::vector<std::size_t> kept;  // frame entry index of each batch entry
    model::StageOutput step_out;    // reused across steps (a tail's logits are 600 KB a row)

    void run();
    bool merge_into(mesh::ActivationFrame& into, mesh::ActivationFrame& from) const;
    void process(mesh::ActivationFrame& frame);
    void release(std::uint64_t request_id, bool forward);
    void apply(const mesh::KvPrefix& op);
    void fail_entry(const mesh::ActivationFrame& frame, const mesh::ActivationEntry& e,
                    const std::string& why);
    std::string check_entry(const mesh::ActivationEntry& e);
    void update_mirrors(double step_us, std::size_t rows);
};

StageWorker::StageWorker(const ModelFrontend& model, std::shared_ptr<StageResources> resources,
                         PipelineRoute route, FrameSender& sender,
                         std::shared_ptr<spdlog::logger> logger)
    : route_(std::move(route)) {
    impl_ = std::make_unique<Impl>(*this, model, std::move(resources), sender, std::move(logger));
    impl_->thread = std::thread([this] { impl_->run(); });
}

StageWorker::~StageWorker() { stop(); }

void StageWorker::on_activation(mesh::ActivationFrame frame) {
    {
        std::lock_guard lock(impl_->mutex);
        if (impl_->stopping) return;
        impl_->queue.emplace_back(std::move(frame));
    }
    impl_->wake.notify_one();
}

void StageWorker::release(std::uint64_t request_id) {
    {
        std::lock_guard lock(impl_->mutex);
        if (impl_->stopping) return;
        impl_->queue.emplace_back(Release{request_id});
    }
    impl_->wake.notify_one();
}

void StageWorker::on_kv_prefix(mesh::KvPrefix op) {
    {
        std::lock_guard lock(impl_->mutex);
        if (impl_->stopping) return;
        impl_->queue.emplace_back(std::move(op));
    }
    impl_->wake.notify_one();
}

void StageWorker::stop() {
    {
        std::lock_guard lock(impl_->mutex);
        impl_->stopping = true;
    }
    impl_->wake.notify_one();
    std::lock_guard join(impl_->join_mutex);
    if (impl_->thread.joinable()) impl_->thread.join();
}

StageTimings StageWorker::timings() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->timings;
}

std::size_t StageWorker::n_kv_sequences() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->n_kv_mirror;
}

void StageWorker::Impl::run() {
    for (;;) {
        WorkItem item;
        {
            std::unique_lock lock(mutex);
            wake.wait(lock, [&] { return stopping || !queue.empty(); });
            if (stopping) break;
            item = std::move(queue.front());
            queue.pop_front();
            // Micro-batches that queued up while this stage was busy run as one batch (fewer,
            // larger matrix products); a Release ends the run so it never overtakes them.
            if (auto* first = std::get_if<mesh::ActivationFrame>(&item)) {
                while (!queue.empty()) {
                    auto* more = std::get_if<mesh::ActivationFrame>(&queue.front());
                    if (more == nullptr || !merge_into(*first, *more)) break;
                    queue.pop_front();
                }
            }
        }
        if (auto* frame = std::get_if<mesh::ActivationFrame>(&item)) {
            process(*frame);
        } else if (auto* op = std::get_if<mesh::KvPrefix>(&item)) {
            apply(*op);
            update_mirrors(0, 0);
        } else {
            release(std::get<Release>(item).request_id, /*forward=*/true);
            update_mirrors(0, 0);
        }
    }
    // The stage is going away with its KV; nothing to tell the others (a new plan replaces it).
    samplers.clear();
}

// Appends `from` to `into` when they can run as one batch: same plan, layer, width and dtype,
// no request in both (its rows must run in order), and at most kMaxMergedRows rows in all.
bool StageWorker::Impl::merge_into(mesh::ActivationFrame& into, mesh::ActivationFrame& from) const {
    constexpr std::uint32_t kMaxMergedRows = 512;
    if (from.epoch != into.epoch || from.first_layer != into.first_layer ||
        from.hidden != into.hidden || from.dtype != into.dtype ||
        into.rows() + from.rows() > kMaxMergedRows) {
        return false;
    }
    const std::size_t row_bytes =
        std::size_t{into.hidden} * mesh::activation_dtype_bytes(into.dtype);
    if (into.payload.size() != into.rows() * row_bytes ||
        from.payload.size() != from.rows() * row_bytes) {
        return false;  // malformed: processed (and refused) on its own
    }
    for (const auto& a : from.entries) {
        for (const auto& b : into.entries) {
            if (a.request_id == b.request_id) return false;
        }
    }
    for (auto& e : from.entries) into.entries.push_back(std::move(e));
    into.payload.insert(into.payload.end(), from.payload.begin(), from.payload.end());
    return true;
}

void StageWorker::Impl::update_mirrors(double step_us, std::size_t rows) {
    const std::size_t n_kv = resources->stage->kv_cache().n_sequences();
    std::lock_guard lock(mutex);
    n_kv_mirror = n_kv;
    if (rows > 0) {
        ++timings.steps;
        timings.tokens += rows;
        timings.mean_step_us =
            timings.steps == 1 ? step_us : 0.9 * timings.mean_step_us + 0.1 * step_us;
    }
}

void StageWorker::Impl::release(std::uint64_t request_id, bool forward) {
    resources->stage->kv_cache().release(request_id);
    samplers.erase(request_id);
    ended_history.erase(request_id);
    reused_history.erase(request_id);
    if (forward && next) sender.send(*next, mesh::Cancel{request_id, "ended"});
}

void StageWorker::Impl::apply(const mesh::KvPrefix& op) {
    if (op.epoch != owner.route_.epoch) return;  // entries live as long as their plan
    auto& kv = resources->stage->kv_cache();
    const auto n = static_cast<std::int64_t>(op.n_tokens);
    switch (op.op) {
        case mesh::KvPrefixOp::kKeep: {
            // The head keeps what its own KV holds; this stage ran the same rows. Should the
            // counts disagree (a bug), the entry is simply not kept here and a later reuse of
            // it fails that request with a clear error.
            if (auto r = kv.rename(op.request_id, op.entry_id, n); !r) {
                logger->warn("{}: cannot keep request {} as a cached prefix: {}", name,
                             op.request_id, r.error().message);
                kv.release(op.request_id);
            } else if (is_tail) {
                auto history = std::move(ended_history[op.request_id]);
                if (auto s = samplers.find(op.request_id); s != samplers.end()) {
                    history = s->second.history();
                }
                history.resize(std::min(history.size(), static_cast<std::size_t>(n)));
                entry_tokens[op.entry_id] = std::move(history);
            }
            samplers.erase(op.request_id);
            ended_history.erase(op.request_id);
            break;
        }
        case mesh::KvPrefixOp::kReuse: {
            std::string why;
            if (auto r = kv.copy_prefix(op.entry_id, op.request_id, n); !r) {
                why = r.error().message;
            } else if (is_tail) {
                auto t = entry_tokens.find(op.entry_id);
                if (t == entry_tokens.end() || t->second.size() < static_cast<std::size_t>(n)) {
                    why = "no token history for cached prefix " + std::to_string(op.entry_id);
                } else {
                    reused_history[op.request_id].assign(t->second.begin(), t->second.begin() + n);
                }
            }
            if (!why.empty()) {
                const std::string message = name + " cannot start request " +
                                            std::to_string(op.request_id) +
                                            " from a cached prefix: " + why;
                logger->warn("{}", message);
                kv.release(op.request_id);
                reused_history.erase(op.request_id);
                sender.send(owner.route_.head(),
                            mesh::ErrorFrame{error_code_of(api::ErrorKind::internal), op.request_id,
                                             message});
            }
            break;
        }
        case mesh::KvPrefixOp::kDrop:
            kv.release(op.entry_id);
            entry_tokens.erase(op.entry_id);
            break;
    }
    if (next) sender.send(*next, op);
}

void StageWorker::Impl::fail_entry(const mesh::ActivationFrame& frame,
                                   const mesh::ActivationEntry& e, const std::string& why) {
    const std::string message = name + " failed request " + std::to_string(e.request_id) +
                                " at position " + std::to_string(e.pos0) + ": " + why;
    logger->warn("{} (plan {}, batch {})", message, frame.epoch, frame.batch_id);
    release(e.request_id, /*forward=*/false);  // the head's Cancel follows along the pipeline
    sender.send(owner.route_.head(),
                mesh::ErrorFrame{error_code_of(api::ErrorKind::internal), e.request_id, message});
}

// Why an entry cannot run on this stage, or "" when it can.
std::string StageWorker::Impl::check_entry(const mesh::ActivationEntry& e) {
    auto& kv = resources->stage->kv_cache();
    if (e.n_tokens == 0) return "an entry without rows";
    if (e.tokens.size() != e.n_tokens) return "token ids do not match the rows";
    const std::int64_t cached = kv.length(e.request_id);
    if (e.pos0 != cached) {
        return "rows start at position " + std::to_string(e.pos0) + " but this stage holds " +
               std::to_string(cached) + " positions";
    }
    if (static_cast<std::int64_t>(e.pos0) + e.n_tokens > model.context) {
        return "past the context of " + std::to_string(model.context) + " positions";
    }
    if (is_tail && samplers.count(e.request_id) == 0) {
        if (e.setup.empty()) return "no generation setup for a new request";
        auto setup = decode_generation_setup(e.setup);
        if (!setup) return setup.error().message;
        // A new request starts at position 0, or right after the cached prefix it reuses
        // (whose token ids the sampler's history starts with).
        std::vector<std::int32_t> history;
        if (auto r = reused_history.find(e.request_id); r != reused_history.end()) {
            history = std::move(r->second);
            reused_history.erase(r);
        }
        if (static_cast<std::size_t>(e.pos0) != history.size()) {
            return "a new request must start at position 0 or after its cached prefix";
        }
        auto [it, added] =
            samplers.try_emplace(e.request_id, e.request_id, std::move(*setup), model, texts);
        if (!history.empty() && !it->second.observe(0, history)) {
            samplers.erase(it);
            return "the cached prefix does not fit the sampler";
        }
    }
    return {};
}

void StageWorker::Impl::process(mesh::ActivationFrame& frame) {
    const auto& route = owner.route_;
    if (frame.epoch != route.epoch) {
        logger->debug("{}: dropped activations of plan {} (running plan {})", name, frame.epoch,
                      route.epoch);
        return;
    }
    auto& stage = *resources->stage;
    const std::size_t hidden = static_cast<std::size_t>(model.config.hidden_size);
    std::string frame_error;
    if (frame.first_layer != stage.range().first) {
        frame_error = "activations for layer " + std::to_string(frame.first_layer) +
                      " reached a stage starting at layer " + std::to_string(stage.range().first);
    } else if (frame.hidden != hidden) {
        frame_error = "activations of width " + std::to_string(frame.hidden) + ", expected " +
                      std::to_string(hidden);
    } else if (auto d =
                   decode_activations(frame.payload, frame.dtype, frame.rows() * hidden, hidden_in);
               !d) {
        frame_error = d.error().message;
    }
    if (!frame_error.empty()) {
        for (const auto& e : frame.entries) fail_entry(frame, e, frame_error);
        update_mirrors(0, 0);
        return;
    }

    // Entries this stage can run; the rows of the others are left out.
    batch.clear();
    kept.clear();
    std::size_t row = 0;
    bool all_kept = true;
    compact.clear();
    for (std::size_t i = 0; i < frame.entries.size(); ++i) {
        const auto& e = frame.entries[i];
        const std::size_t rows = e.n_tokens;
        if (auto why = check_entry(e); !why.empty()) {
            fail_entry(frame, e, why);
            all_kept = false;
        } else {
            model::SequenceBatchEntry b;
            b.seq_id = e.request_id;
            b.pos0 = e.pos0;
            b.n_tokens = static_cast<std::int32_t>(e.n_tokens);
            batch.push_back(std::move(b));
            kept.push_back(i);
            compact.insert(compact.end(), hidden_in.begin() + row * hidden,
                           hidden_in.begin() + (row + rows) * hidden);
        }
        row += rows;
    }
    if (batch.empty()) {
        update_mirrors(0, 0);
        return;
    }
    const std::span<const float> input = all_kept ? std::span<const float>(hidden_in) : compact;

    const auto t0 = Clock::now();
    if (auto ran = stage.run_layers(batch, input, step_out); !ran) {
        logger->error("{}: engine step failed ({} sequences): {}", name, batch.size(),
                      ran.error().message);
        for (auto i : kept)
            fail_entry(frame, frame.entries[i], "engine error: " + ran.error().message);
        update_mirrors(0, 0);
        return;
    }
    const model::StageOutput* out = &step_out;
    std::size_t n_rows = 0;
    for (const auto& b : batch) n_rows += static_cast<std::size_t>(b.n_tokens);

    if (!is_tail) {
        mesh::ActivationFrame fwd;
        fwd.epoch = frame.epoch;
        fwd.batch_id = frame.batch_id;
        fwd.first_layer = stage.range().last;
        fwd.dtype = frame.dtype;
        fwd.hidden = frame.hidden;
        fwd.entries.reserve(kept.size());
        for (auto i : kept) fwd.entries.push_back(std::move(frame.entries[i]));
        encode_activations(out->hidden, fwd.dtype, fwd.payload);
        if (next) sender.send(*next, std::move(fwd));
    } else {
        mesh::TokenFrame tokens;
        tokens.epoch = frame.epoch;
        tokens.batch_id = frame.batch_id;
        to_sample.clear();
        sample_jobs.clear();
        for (std::size_t k = 0; k < kept.size(); ++k) {
            const auto& e = frame.entries[kept[k]];
            auto& sampler = samplers.at(e.request_id);
            if (!sampler.observe(e.pos0, e.tokens)) {
                fail_entry(frame, e, "token history out of step with the rows");
                continue;
            }
            if (!e.wants_token) continue;
            to_sample.push_back(k);
            sample_jobs.push_back({&sampler, out->last_row(k, batch[k])});
        }
        // All rows at once (sample_batch: in parallel), then sent in batch order.
        sample_batch(*resources->backend, sample_jobs, sampled);
        for (std::size_t j = 0; j < to_sample.size(); ++j) {
            const auto& e = frame.entries[kept[to_sample[j]]];
            const bool finished = sampled[j].finish != mesh::TokenFinish::kContinue;
            tokens.tokens.push_back(std::move(sampled[j]));
            if (finished) {
                // The KV stays until the head keeps it as a cached prefix or frees it (its
                // KvPrefix or Cancel follows); the sampler is done, its history is kept.
                ended_history[e.request_id] = sample_jobs[j].sampler->history();
                samplers.erase(e.request_id);
            }
        }
        if (!tokens.tokens.empty()) sender.send(route.head(), std::move(tokens));
    }
    update_mirrors(std::chrono::duration<double, std::micro>(Clock::now() - t0).count(), n_rows);
}

}  // namespace brigade::node
