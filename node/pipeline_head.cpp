#include "node/pipeline_head.hpp"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "node/activations.hpp"
#include "node/kv_admission.hpp"
#include "node/prefix_cache.hpp"

namespace brigade::node {
namespace {

using Clock = std::chrono::steady_clock;

// One admitted request on the head's compute thread.
struct HeadSequence {
    std::uint64_t request_id = 0;
    std::uint64_t kv_id = 0;  // this stage's KV sequence; the other stages use request_id
    std::string log_id;
    std::shared_ptr<RequestEvents> events;
    GenerationSetup setup;
    std::vector<std::uint8_t> setup_bytes;  // several stages: sent with the first chunk
    std::vector<std::int32_t> tokens;       // prompt, then generated
    std::int64_t n_input = 0;               // tokens given at admission (prompt + resumed)
    std::int64_t n_computed = 0;            // positions in this stage's KV
    std::int64_t n_cached = 0;
    std::optional<std::uint64_t> reused_entry;  // the prefix cache entry its KV started from
    std::optional<TokenSampler> sampler;        // one stage: sampled here
    bool in_flight = false;                     // waiting for the tail's token
    std::uint64_t in_flight_batch = 0;          // the micro-batch it went with
    bool setup_sent = false;
    // A new sequence whose first rows found the KV memory held by running ones waits for one of
    // them to end: the count of ended sequences when it was put off.
    std::optional<std::uint64_t> kv_wait_since;
    Clock::time_point in_flight_since;

    bool prefilling() const { return n_computed < n_input; }
};

struct Submission {
    HeadRequest request;
    std::shared_ptr<RequestEvents> events;
};

struct StageError {
    mesh::NodeId from;
    mesh::ErrorFrame error;
};

std::string label(const HeadSequence& s) {
    return s.log_id.empty() ? std::to_string(s.request_id) : s.log_id;
}

// The id the other stages keep a cached prefix under: the head's KV id with the top bit set,
// which no request id has (submit refuses those), so entries and requests never clash there.
std::uint64_t entry_id_of(std::uint64_t kv_id) { return kPrefixEntryBit | kv_id; }

}  // namespace

struct PipelineHead::Impl {
    Impl(PipelineHead& owner, const ModelFrontend& model, std::shared_ptr<StageResources> res,
         FrameSender* sender, PipelineHeadOptions options, std::shared_ptr<spdlog::logger> logger)
        : owner(owner),
          model(model),
          resources(std::move(res)),
          sender(sender),
          options(options),
          logger(std::move(logger)),
          texts(model.tokenizer),
          n_stages(owner.route_.stages.size()) {
        auto& kv = resources->stage->kv_cache();
        if (n_stages > 1 && owner.route_.kv_positions > 0) {
            // Every stage holds the positions of every sequence here: kept within what the
            // tightest stage holds, no stage outgrows its memory, and a sequence that runs out
            // of room pauses here (give_back_kv) instead of failing on a stage.
            kv.set_max_bytes(owner.route_.kv_positions * kv.bytes_per_position());
            this->logger->info("plan {}: KV for {} positions across the pipeline's stages",
                               owner.route_.epoch, owner.route_.kv_positions);
        }
        if (kv.limits().max_bytes > 0 && kv.bytes_per_position() > 0) {
            kv_positions = kv.limits().max_bytes / kv.bytes_per_position();
        }
        // Several stages: the head's cache decides, the others mirror it (KvPrefix frames).
        prefix_cache.emplace(resources->stage->kv_cache(), options.prefix_cache_bytes,
                             [this](std::uint64_t kv_id) { tell_stages_drop(kv_id); });
    }

    PipelineHead& owner;
    const ModelFrontend& model;
    std::shared_ptr<StageResources> resources;
    FrameSender* sender;
    PipelineHeadOptions options;
    std::shared_ptr<spdlog::logger> logger;
    TokenTexts texts;
    const std::size_t n_stages;
    std::uint64_t kv_positions = 0;  // set once by the constructor

    // Shared with the API threads, under `mutex`.
    mutable std::mutex mutex;
    std::condition_variable wake;
    std::deque<Submission> queue;
    std::vector<std::uint64_t> cancels;
    std::vector<mesh::TokenFrame> token_frames;
    std::vector<StageError> stage_errors;
    // Queued or active request ids, with their origin (zero: this node).
    std::unordered_map<std::uint64_t, mesh::NodeId> known;
    bool stopping = false;
    Clock::time_point drain_deadline;
    std::size_t n_active_mirror = 0;
    std::size_t n_kv_mirror = 0;
    std::uint64_t n_preempted_mirror = 0;
    StageTimings timings;
    std::mutex join_mutex;
    std::thread thread;

    // Compute thread only.
    // False once the head stops: the other stages' KV goes with their plan. (Declared before
    // prefix_cache, whose destructor reads it.)
    bool stages_listen = true;
    std::optional<PrefixCache> prefix_cache;
    std::list<HeadSequence> active;
    std::unordered_map<std::uint64_t, std::list<HeadSequence>::iterator> by_id;
    std::uint64_t next_kv_id = 1;
    std::uint64_t next_batch_id = 1;
    std::vector<model::SequenceBatchEntry> batch;  // reused across steps
    model::StageOutput step_out;                   // likewise (the logits are 600 KB a row)
    std::vector<std::list<HeadSequence>::iterator> owners;
    // sample_locally's rows to sample, their jobs and tokens, reused across steps.
    std::vector<std::size_t> to_sample;
    std::vector<SampleJob> sample_jobs;
    std::vector<mesh::SampledTokenInfo> sampled;
    std::uint64_t n_retired = 0;    // sequences ended so far (a KV wait ends with the next one)
    std::uint64_t n_preempted = 0;  // sequences that gave their KV back to wait for room
    std::vector<std::uint8_t> payload;
    std::vector<std::uint64_t> batch_ids_in_flight;  // note_batches_in_flight's, reused

    void run();
    bool has_ready_work() const;
    bool waits_for_kv(const HeadSequence& s) const {
        return s.kv_wait_since && *s.kv_wait_since == n_retired;
    }
    void admit(Submission s);
    void step();
    // Releases a running sequence's KV (here and on the other stages) so that it computes its
    // tokens again once room frees.
    void give_back_kv(HeadSequence& seq);
    void sample_locally(const model::StageOutput& out);
    void send_downstream(const model::StageOutput& out);
    void on_tokens(mesh::TokenFrame& frame);
    void on_error(const StageError& e);
    void deliver(std::list<HeadSequence>::iterator it, mesh::SampledTokenInfo token);
    void fail(std::list<HeadSequence>::iterator it, api::ErrorKind kind, const std::string& why);
    // Reserves KV for every entry of `batch`; the entries that do not fit leave it: to wait
    // for a running sequence to end (a new one, or any with one stage), else failed.
    void reserve_batch_kv();
    void retire(std::list<HeadSequence>::iterator it, bool keep_kv);
    void send_prefix_op(mesh::KvPrefixOp op, std::uint64_t request_id, std::uint64_t kv_id,
                        std::int64_t n_tokens);
    void tell_stages_drop(std::uint64_t kv_id);
    void check_timeouts();
    // RequestEvents::on_waiting for the queued and the paused, every waiting_update_interval.
    void tell_waiting();
    Clock::time_point last_waiting_update = Clock::now();
    void update_mirrors(double step_us, std::size_t rows);
    // Counts the micro-batches with sequences waiting for the tail (timings' maximum).
    void note_batches_in_flight();
};

PipelineHead::PipelineHead(const ModelFrontend& model, std::shared_ptr<StageResources> resources,
                           PipelineRoute route, FrameSender* sender, PipelineHeadOptions options,
                           std::shared_ptr<spdlog::logger> logger)
    : route_(std::move(route)) {
    impl_ = std::make_unique<Impl>(*this, model, std::move(resources), sender, options,
                                   std::move(logger));
    impl_->thread = std::thread([this] { impl_->run(); });
}

PipelineHead::~PipelineHead() { stop(std::chrono::milliseconds(0)); }

PipelineHead::Submitted PipelineHead::submit(HeadRequest request,
                                             std::shared_ptr<RequestEvents> events) {
    const auto& m = impl_->model;
    const auto n = static_cast<std::int64_t>(request.tokens.size());
    const auto& setup = request.setup;
    const bool can_send = impl_->n_stages == 1 || impl_->sender != nullptr;
    if (n == 0 || setup.n_prompt < 1 || setup.n_prompt > n || setup.context > m.context ||
        n >= setup.context || !events || !can_send) {
        return Submitted::invalid;
    }
    for (auto id : request.tokens) {
        if (id < 0 || id >= m.vocab_size) return Submitted::invalid;
    }
    if ((request.request_id & kPrefixEntryBit) != 0) return Submitted::invalid;
    {
        std::lock_guard lock(impl_->mutex);
        if (impl_->stopping) return Submitted::stopping;
        if (impl_->known.count(request.request_id) != 0) return Submitted::invalid;
        // A free slot admits at once; otherwise the request waits in the bounded queue.
        const auto max_active = static_cast<std::size_t>(impl_->options.max_active);
        const std::size_t free_slots =
            impl_->n_active_mirror < max_active ? max_active - impl_->n_active_mirror : 0;
        if (impl_->queue.size() >=
            free_slots + static_cast<std::size_t>(impl_->options.max_queue)) {
            return Submitted::queue_full;
        }
        impl_->known.emplace(request.request_id, request.origin);
        impl_->queue.push_back({std::move(request), std::move(events)});
    }
    impl_->wake.notify_one();
    return Submitted::queued;
}

void PipelineHead::on_token_frame(mesh::TokenFrame frame) {
    if (frame.epoch != route_.epoch) return;
    {
        std::lock_guard lock(impl_->mutex);
        impl_->token_frames.push_back(std::move(frame));
    }
    impl_->wake.notify_one();
}

void PipelineHead::cancel(std::uint64_t request_id) {
    {
        std::lock_guard lock(impl_->mutex);
        if (impl_->known.count(request_id) == 0) return;
        auto& q = impl_->queue;
        auto queued = std::find_if(q.begin(), q.end(), [&](const Submission& s) {
            return s.request.request_id == request_id;
        });
        if (queued != q.end()) {  // never admitted: nothing to free
            q.erase(queued);
            impl_->known.erase(request_id);
            return;
        }
        impl_->cancels.push_back(request_id);
    }
    impl_->wake.notify_one();
}

void PipelineHead::cancel_origin(const mesh::NodeId& origin) {
    std::vector<std::uint64_t> ids;
    {
        std::lock_guard lock(impl_->mutex);
        for (const auto& [id, from] : impl_->known) {
            if (from == origin) ids.push_back(id);
        }
    }
    if (!ids.empty()) {
        impl_->logger->info("origin {} is gone: cancelling its {} request(s)",
                            origin.short_string(), ids.size());
    }
    for (auto id : ids) cancel(id);
}

bool PipelineHead::on_stage_error(const mesh::NodeId& from, const mesh::ErrorFrame& error) {
    {
        std::lock_guard lock(impl_->mutex);
        if (error.request_id == 0 || impl_->known.count(error.request_id) == 0) return false;
        impl_->stage_errors.push_back({from, error});
    }
    impl_->wake.notify_one();
    return true;
}

void PipelineHead::stop(std::chrono::milliseconds drain) {
    {
        std::lock_guard lock(impl_->mutex);
        if (!impl_->stopping) {
            impl_->stopping = true;
            impl_->drain_deadline = Clock::now() + drain;
        }
    }
    impl_->wake.notify_one();
    std::lock_guard join(impl_->join_mutex);
    if (impl_->thread.joinable()) impl_->thread.join();
}

StageTimings PipelineHead::timings() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->timings;
}

std::size_t PipelineHead::n_active() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->n_active_mirror;
}

std::size_t PipelineHead::n_waiting() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->queue.size();
}

std::size_t PipelineHead::n_kv_sequences() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->n_kv_mirror;
}

std::uint64_t PipelineHead::n_preempted() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->n_preempted_mirror;
}

std::uint64_t PipelineHead::kv_positions() const { return impl_->kv_positions; }

// ---------------------------------------------------------------------------------------------
// Compute thread
// ---------------------------------------------------------------------------------------------

bool PipelineHead::Impl::has_ready_work() const {
    return std::any_of(active.begin(), active.end(),
                       [&](const HeadSequence& s) { return !s.in_flight && !waits_for_kv(s); });
}

void PipelineHead::Impl::run() {
    std::vector<Submission> admitted, refused;
    std::vector<std::uint64_t> cancelled;
    std::vector<mesh::TokenFrame> frames;
    std::vector<StageError> errors;
    bool stop_seen = false;
    for (;;) {
        bool draining = false, drain_over = false;
        {
            std::unique_lock lock(mutex);
            auto has_input = [&] {
                return (stopping && !stop_seen) || !cancels.empty() || !token_frames.empty() ||
                       !stage_errors.empty() ||
                       (!queue.empty() &&
                        active.size() < static_cast<std::size_t>(options.max_active));
            };
            if (!has_ready_work()) {
                if (active.empty() && !stopping) {
                    wake.wait(lock, has_input);
                } else {  // all in flight: wake up in time to notice a lost token or the drain
                    auto until = Clock::now() + std::chrono::milliseconds(200);
                    if (stopping) until = std::min(until, drain_deadline);
                    wake.wait_until(lock, until, has_input);
                }
            }
            stop_seen = stopping;
            draining = stopping;
            drain_over = stopping && Clock::now() >= drain_deadline;
            if (stopping) {
                for (auto& s : queue) refused.push_back(std::move(s));
                queue.clear();
            }
            while (!queue.empty() &&
                   active.size() + admitted.size() < static_cast<std::size_t>(options.max_active)) {
                admitted.push_back(std::move(queue.front()));
                queue.pop_front();
            }
            // Taken from the queue means holding a slot: `submit` must not count it as free
            // while it is being admitted (it would let one request too many past the queue).
            n_active_mirror = active.size() + admitted.size();
            cancelled.swap(cancels);
            frames.swap(token_frames);
            errors.swap(stage_errors);
            for (const auto& s : refused) known.erase(s.request.request_id);
        }
        for (auto& s : refused) {
            s.events->on_failed(api::ErrorKind::unavailable,
                                "the pipeline head is stopping; retry");
        }
        refused.clear();
        for (auto id : cancelled) {
            auto it = by_id.find(id);
            if (it == by_id.end()) continue;
            logger->debug("{}: cancelled at the head after {} tokens", label(*it->second),
                          it->second->tokens.size() - it->second->setup.n_prompt);
            it->second->events.reset();  // the origin has already answered its client
            retire(it->second, /*keep_kv=*/false);
        }
        cancelled.clear();
        for (auto& f : frames) on_tokens(f);
        frames.clear();
        for (const auto& e : errors) on_error(e);
        errors.clear();
        for (auto& s : admitted) admit(std::move(s));
        admitted.clear();
        check_timeouts();
        tell_waiting();

        if (draining && (drain_over || active.empty())) {
            while (!active.empty()) {
                fail(active.begin(), api::ErrorKind::unavailable,
                     "the pipeline head stopped before the request finished");
            }
            stages_listen = false;
            if (prefix_cache) prefix_cache->clear();
            update_mirrors(0, 0);
            return;
        }
        if (has_ready_work()) step();
        update_mirrors(0, 0);
    }
}

void PipelineHead::Impl::update_mirrors(double step_us, std::size_t rows) {
    const std::size_t n_kv = resources->stage->kv_cache().n_sequences();
    std::lock_guard lock(mutex);
    n_active_mirror = active.size();
    n_kv_mirror = n_kv;
    n_preempted_mirror = n_preempted;
    if (rows > 0) {
        ++timings.steps;
        timings.tokens += rows;
        timings.mean_step_us =
            timings.steps == 1 ? step_us : 0.9 * timings.mean_step_us + 0.1 * step_us;
    }
}

void PipelineHead::Impl::admit(Submission sub) {
    auto& req = sub.request;
    HeadSequence seq;
    seq.request_id = req.request_id;
    seq.kv_id = next_kv_id++;
    seq.log_id = std::move(req.log_id);
    seq.events = std::move(sub.events);
    seq.setup = std::move(req.setup);
    seq.tokens = std::move(req.tokens);
    seq.n_input = static_cast<std::int64_t>(seq.tokens.size());
    seq.tokens.reserve(static_cast<std::size_t>(std::min<std::int64_t>(
        seq.setup.n_prompt + seq.setup.max_new_tokens + 1, seq.setup.context)));
    auto& kv = resources->stage->kv_cache();
    if (prefix_cache) {
        // Reuse the longest cached prefix of the prompt; the last input token always runs (its
        // logits start the generation).
        const auto n_input = static_cast<std::int64_t>(seq.tokens.size());
        if (auto match = prefix_cache->find(seq.tokens, n_input - 1)) {
            if (kv.copy_prefix(match->seq_id, seq.kv_id, match->n_tokens)) {
                seq.n_cached = std::min(match->n_tokens, seq.setup.n_prompt);
                seq.n_computed = match->n_tokens;
                seq.reused_entry = match->seq_id;
                // Ahead of the request's first activations on the same link: every stage
                // starts its KV from the same entry.
                send_prefix_op(mesh::KvPrefixOp::kReuse, seq.request_id, match->seq_id,
                               match->n_tokens);
            } else {
                kv.release(seq.kv_id);
            }
        }
    }
    if (n_stages == 1) {
        seq.sampler.emplace(seq.request_id, seq.setup, model, texts);
        seq.sampler->observe(0, seq.tokens);
    } else {
        seq.setup_bytes = encode_generation_setup(seq.setup);
    }
    active.push_back(std::move(seq));
    auto it = std::prev(active.end());
    by_id[it->request_id] = it;
    it->events->on_accepted(static_cast<std::uint32_t>(it->n_cached));
}

void PipelineHead::Impl::step() {
    owners.clear();
    // With k stages at most ceil(active / k) sequences per micro-batch, so that k micro-batches
    // are in the pipeline at once.
    const std::size_t cap = (active.size() + n_stages - 1) / n_stages;
    std::int64_t prefill_budget = options.prefill_chunk;
    std::size_t n_batch = 0;  // entries are reused, so their token vectors keep their storage
    for (auto it = active.begin(); it != active.end() && n_batch < cap; ++it) {
        if (it->in_flight || waits_for_kv(*it)) continue;
        std::int64_t n = 1;  // decoding: the token sampled last
        if (it->prefilling()) {
            n = std::min(prefill_budget, it->n_input - it->n_computed);
            if (n <= 0) continue;
            prefill_budget -= n;
        }
        if (batch.size() == n_batch) batch.emplace_back();
        model::SequenceBatchEntry& e = batch[n_batch++];
        e.seq_id = it->kv_id;
        e.pos0 = static_cast<std::int32_t>(it->n_computed);
        e.n_tokens = static_cast<std::int32_t>(n);
        e.all_logits = false;
        e.tokens.assign(it->tokens.begin() + it->n_computed,
                        it->tokens.begin() + it->n_computed + n);
        owners.push_back(it);
    }
    batch.resize(n_batch);
    reserve_batch_kv();
    if (batch.empty()) return;

    const auto t0 = Clock::now();
    if (auto ran = resources->stage->run_layers(batch, {}, step_out); !ran) {
        logger->error("engine step failed ({} sequences): {}", batch.size(), ran.error().message);
        for (auto it : owners) {
            fail(it, api::ErrorKind::internal,
                 "engine error in request " + label(*it) + ": " + ran.error().message);
        }
        return;
    }
    std::size_t rows = 0;
    for (std::size_t i = 0; i < batch.size(); ++i) {
        owners[i]->n_computed += batch[i].n_tokens;
        rows += static_cast<std::size_t>(batch[i].n_tokens);
    }
    if (n_stages == 1) {
        sample_locally(step_out);
    } else {
        send_downstream(step_out);
    }
    update_mirrors(std::chrono::duration<double, std::micro>(Clock::now() - t0).count(), rows);
}

void PipelineHead::Impl::reserve_batch_kv() {
    auto& kv = resources->stage->kv_cache();
    std::size_t kept = 0;
    for (std::size_t i = 0; i < batch.size(); ++i) {
        const auto& e = batch[i];
        const std::int64_t n_positions = static_cast<std::int64_t>(e.pos0) + e.n_tokens;
        auto refusal = reserve_kv(kv, e.seq_id, n_positions);
        // Cached prefixes of finished requests give their room to running ones.
        while (refusal && prefix_cache && prefix_cache->evict_oldest()) {
            refusal = reserve_kv(kv, e.seq_id, n_positions);
        }
        const bool holds_kv = kv.contains(e.seq_id);
        if (refusal && refusal->kind == api::ErrorKind::overloaded) {
            // Rather than a 429, it waits until a running sequence ends and frees room. One
            // that holds KV gives it back first and computes its tokens again when it resumes,
            // so the others can go on meanwhile.
            if (holds_kv) give_back_kv(*owners[i]);
            if (!holds_kv && !owners[i]->kv_wait_since) {
                logger->debug("{}: waits for KV memory ({} positions)", label(*owners[i]),
                              n_positions);
            }
            owners[i]->kv_wait_since = n_retired;
            continue;
        }
        if (refusal) {
            fail(owners[i], refusal->kind,
                 "request " + label(*owners[i]) + ": " + refusal->message);
            continue;
        }
        owners[i]->kv_wait_since.reset();
        if (kept != i) {
            std::swap(batch[kept], batch[i]);  // keeps both entries' token storage
            owners[kept] = owners[i];
        }
        ++kept;
    }
    batch.resize(kept);
    owners.resize(kept);
    // Only running sequences end and free room; with none left, a wait would never end.
    const bool running = std::any_of(active.begin(), active.end(), [&](const HeadSequence& s) {
        return s.in_flight || !waits_for_kv(s);
    });
    while (!running && !active.empty()) {
        fail(active.begin(), api::ErrorKind::overloaded,
             "request " + label(active.front()) +
                 ": this node's KV memory is held and nothing running will free it; retry later");
    }
}

void PipelineHead::Impl::give_back_kv(HeadSequence& seq) {
    logger->info(
        "{}: KV memory full at {} positions: gives them back and waits for a running "
        "request to end",
        label(seq), seq.n_computed);
    resources->stage->kv_cache().release(seq.kv_id);
    if (n_stages > 1 && sender != nullptr) {
        // The other stages drop its KV and the tail its sampler, behind its last activations;
        // the rerun starts again from position 0 with the setup, and the tail's new sampler
        // takes the generated tokens as history (the same draws as a resumed request).
        sender->send(owner.route_.stages[1].node, mesh::Cancel{seq.request_id, "paused"});
        seq.setup_sent = false;
    }
    seq.n_computed = 0;
    seq.n_input = static_cast<std::int64_t>(seq.tokens.size());
    ++n_preempted;
}

void PipelineHead::Impl::sample_locally(const model::StageOutput& out) {
    // All rows at once (sample_batch: in parallel), then delivered in batch order.
    to_sample.clear();
    sample_jobs.clear();
    for (std::size_t i = 0; i < batch.size(); ++i) {
        if (owners[i]->prefilling()) continue;  // more prompt chunks to go
        to_sample.push_back(i);
        sample_jobs.push_back({&*owners[i]->sampler, out.last_row(i, batch[i])});
    }
    sample_batch(*resources->backend, sample_jobs, sampled);
    for (std::size_t k = 0; k < to_sample.size(); ++k) {
        deliver(owners[to_sample[k]], std::move(sampled[k]));
    }
}

void PipelineHead::Impl::send_downstream(const model::StageOutput& out) {
    mesh::ActivationFrame frame;
    frame.epoch = owner.route_.epoch;
    frame.batch_id = next_batch_id++;
    frame.first_layer = owner.route_.stages[1].first_layer;
    frame.dtype = owner.route_.activations;
    frame.hidden = static_cast<std::uint32_t>(model.config.hidden_size);
    frame.entries.reserve(batch.size());
    const auto now = Clock::now();
    for (std::size_t i = 0; i < batch.size(); ++i) {
        auto it = owners[i];
        mesh::ActivationEntry e;
        e.request_id = it->request_id;
        e.pos0 = batch[i].pos0;
        e.n_tokens = static_cast<std::uint32_t>(batch[i].n_tokens);
        e.wants_token = !it->prefilling();
        e.tokens = std::move(batch[i].tokens);
        if (!it->setup_sent) {
            e.setup = it->setup_bytes;
            it->setup_sent = true;
        }
        if (e.wants_token) {
            it->in_flight = true;
            it->in_flight_since = now;
            it->in_flight_batch = frame.batch_id;
        }
        frame.entries.push_back(std::move(e));
    }
    note_batches_in_flight();
    encode_activations(out.hidden, frame.dtype, frame.payload);
    sender->send(owner.route_.stages[1].node, std::move(frame));
}

void PipelineHead::Impl::note_batches_in_flight() {
    // At most max_active sequences, so a linear pass over a small set.
    auto& ids = batch_ids_in_flight;
    ids.clear();
    for (const auto& s : active) {
        if (s.in_flight && std::find(ids.begin(), ids.end(), s.in_flight_batch) == ids.end()) {
            ids.push_back(s.in_flight_batch);
        }
    }
    std::lock_guard lock(mutex);
    timings.max_batches_in_flight =
        std::max<std::uint64_t>(timings.max_batches_in_flight, ids.size());
}

void PipelineHead::Impl::on_tokens(mesh::TokenFrame& frame) {
    for (auto& t : frame.tokens) {
        auto found = by_id.find(t.request_id);
        if (found == by_id.end() || !found->second->in_flight) continue;  // cancelled meanwhile
        auto it = found->second;
        it->in_flight = false;
        deliver(it, std::move(t));
    }
}

void PipelineHead::Impl::deliver(std::list<HeadSequence>::iterator it,
                                 mesh::SampledTokenInfo token) {
    if (token.token >= 0) it->tokens.push_back(token.token);
    const bool finished = token.finish != mesh::TokenFinish::kContinue;
    if (!finished && static_cast<std::int64_t>(it->tokens.size()) >= it->setup.context) {
        // Cannot happen with a correct tail (it ends at the context); never run past the KV.
        token.finish = mesh::TokenFinish::kLength;
    }
    const bool done = token.finish != mesh::TokenFinish::kContinue;
    std::vector<mesh::SampledTokenInfo> tokens;
    tokens.push_back(std::move(token));
    it->events->on_tokens(std::move(tokens));
    if (done) retire(it, /*keep_kv=*/true);
}

void PipelineHead::Impl::on_error(const StageError& e) {
    auto found = by_id.find(e.error.request_id);
    if (found == by_id.end()) return;
    logger->warn("{}: stage {} failed it: {}", label(*found->second), e.from.short_string(),
                 e.error.message);
    // Whatever went wrong there, the next request with this prompt computes it afresh.
    if (const auto entry = found->second->reused_entry) prefix_cache->erase(*entry);
    fail(found->second, error_kind_of(e.error.code), e.error.message);
}

void PipelineHead::Impl::check_timeouts() {
    if (n_stages == 1) return;
    const auto now = Clock::now();
    for (auto it = active.begin(); it != active.end();) {
        auto next = std::next(it);
        if (it->in_flight && now - it->in_flight_since > options.token_timeout) {
            fail(it, api::ErrorKind::unavailable,
                 "no token from the pipeline within " +
                     std::to_string(options.token_timeout.count()) + " ms for request " +
                     label(*it));
        }
        it = next;
    }
}

void PipelineHead::Impl::tell_waiting() {
    const auto now = Clock::now();
    if (now - last_waiting_update < options.waiting_update_interval) return;
    last_waiting_update = now;
    // The queue is shared with `submit`; its events are only ever called from this thread.
    std::vector<std::shared_ptr<RequestEvents>> queued;
    {
        std::lock_guard lock(mutex);
        for (const auto& s : queue) queued.push_back(s.events);
    }
    for (const auto& events : queued) events->on_waiting();
    for (auto& s : active) {
        if (s.events && waits_for_kv(s)) s.events->on_waiting();
    }
}

void PipelineHead::Impl::fail(std::list<HeadSequence>::iterator it, api::ErrorKind kind,
                              const std::string& why) {
    auto events = std::move(it->events);
    retire(it, /*keep_kv=*/false);
    if (events) events->on_failed(kind, why);
}

void PipelineHead::Impl::retire(std::list<HeadSequence>::iterator it, bool keep_kv) {
    auto& kv = resources->stage->kv_cache();
    const std::int64_t n = kv.length(it->kv_id);
    const bool keep = keep_kv && prefix_cache && n > 0;
    if (keep) {
        // The other stages keep their share first (the insert may evict, which tells them to
        // drop entries, this one included: those frames must come after the keep).
        send_prefix_op(mesh::KvPrefixOp::kKeep, it->request_id, it->kv_id, n);
        const auto& t = it->tokens;
        prefix_cache->insert(it->kv_id, std::vector<std::int32_t>(t.begin(), t.begin() + n));
    } else {
        kv.release(it->kv_id);
        if (n_stages > 1 && sender != nullptr) {
            // Along the pipeline, behind this request's last activations.
            sender->send(owner.route_.stages[1].node, mesh::Cancel{it->request_id, "ended"});
        }
    }
    {
        std::lock_guard lock(mutex);
        known.erase(it->request_id);
    }
    by_id.erase(it->request_id);
    active.erase(it);
    ++n_retired;
}

void PipelineHead::Impl::send_prefix_op(mesh::KvPrefixOp op, std::uint64_t request_id,
                                        std::uint64_t kv_id, std::int64_t n_tokens) {
    if (n_stages == 1 || sender == nullptr || !stages_listen) return;
    mesh::KvPrefix m;
    m.epoch = owner.route_.epoch;
    m.op = op;
    m.request_id = request_id;
    m.entry_id = entry_id_of(kv_id);
    m.n_tokens = static_cast<std::uint32_t>(n_tokens);
    sender->send(owner.route_.stages[1].node, m);
}

void PipelineHead::Impl::tell_stages_drop(std::uint64_t kv_id) {
    send_prefix_op(mesh::KvPrefixOp::kDrop, 0, kv_id, 0);
}

}  // namespace brigade::node
