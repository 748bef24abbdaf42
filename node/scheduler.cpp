#include "node/scheduler.hpp"

#include <algorithm>
#include <variant>

namespace brigade::node {

BatchScheduler::BatchScheduler(ServeModel& model, SchedulerOptions options,
                               std::shared_ptr<spdlog::logger> logger)
    : model_(model),
      options_(options),
      logger_(std::move(logger)),
      texts_(model.tokenizer),
      prefix_cache_(model.stage->kv_cache(), options.prefix_cache_bytes) {
    thread_ = std::thread([this] { run(); });
}

BatchScheduler::~BatchScheduler() { stop(); }

BatchScheduler::Submitted BatchScheduler::submit(Job& job) {
    {
        std::lock_guard lock(mutex_);
        if (stopping_) return Submitted::stopping;
        // A free slot admits at once; otherwise the request waits in the bounded queue.
        const std::size_t free_slots =
            n_active_ < static_cast<std::size_t>(options_.max_active)
                ? static_cast<std::size_t>(options_.max_active) - n_active_
                : 0;
        if (queue_.size() >= free_slots + static_cast<std::size_t>(options_.max_queue)) {
            return Submitted::queue_full;
        }
        queue_.push_back(std::move(job));
    }
    wake_.notify_one();
    return Submitted::queued;
}

std::size_t BatchScheduler::n_waiting() const {
    std::lock_guard lock(mutex_);
    return queue_.size();
}

void BatchScheduler::stop() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_one();
    if (thread_.joinable()) thread_.join();
}

void BatchScheduler::run() {
    for (;;) {
        std::deque<Job> admitted;
        {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [&] { return stopping_ || !queue_.empty() || !active_.empty(); });
            if (stopping_) {
                admitted.swap(queue_);
                lock.unlock();
                for (auto& job : admitted) {
                    job.sink->on_error(
                        {api::ErrorKind::unavailable, "the server is shutting down", ""});
                }
                while (!active_.empty()) {
                    active_.front().fail(
                        {api::ErrorKind::unavailable, "the server is shutting down", ""});
                    retire(active_.begin(), /*keep_kv=*/false);
                }
                prefix_cache_.clear();
                return;
            }
            while (!queue_.empty() && active_.size() + admitted.size() <
                                          static_cast<std::size_t>(options_.max_active)) {
                admitted.push_back(std::move(queue_.front()));
                queue_.pop_front();
            }
        }
        for (auto& job : admitted) admit(std::move(job));
        drop_cancelled();
        if (!active_.empty()) step();
        // After the step too: a slot freed by the last finished sequence must count for
        // `submit` while this thread sleeps.
        std::lock_guard lock(mutex_);
        n_active_ = active_.size();
    }
}

void BatchScheduler::admit(Job job) {
    if (job.cancel->cancelled()) {
        job.sink->on_error({api::ErrorKind::internal, "cancelled before it started", ""});
        return;
    }
    auto prepared = prepare_prompt(model_, job.request);
    if (auto* error = std::get_if<api::ServiceError>(&prepared)) {
        job.sink->on_error(std::move(*error));
        return;
    }
    auto& prompt = std::get<PreparedPrompt>(prepared);
    const auto sampling = resolve_sampling(job.request, options_.sampling);
    if (auto v = model::validate_sampling_params(sampling); !v) {
        job.sink->on_error({api::ErrorKind::invalid_request, v.error().message, ""});
        return;
    }
    const std::uint64_t seq_id = next_seq_id_++;
    auto& kv = model_.stage->kv_cache();
    // Reuse the longest cached prefix; the last prompt token always runs (its logits start
    // the generation).
    std::int64_t n_cached = 0;
    const auto n_prompt = static_cast<std::int64_t>(prompt.tokens.size());
    if (auto match = prefix_cache_.find(prompt.tokens, n_prompt - 1)) {
        if (kv.copy_prefix(match->seq_id, seq_id, match->n_tokens)) {
            n_cached = match->n_tokens;
        } else {
            kv.release(seq_id);
        }
    }
    auto& seq =
        active_.emplace_back(std::move(job), std::move(prompt), sampling, seq_id, model_, texts_);
    seq.set_cached(n_cached);
    seq.start();
}

void BatchScheduler::drop_cancelled() {
    for (auto it = active_.begin(); it != active_.end();) {
        auto next = std::next(it);
        if (it->job().cancel->cancelled()) {
            logger_->info("{} cancelled by the client after {} tokens; slot freed",
                          it->job().request.id, it->tokens().size() - it->n_prompt());
            it->fail({api::ErrorKind::internal, "cancelled", ""});
            retire(it, /*keep_kv=*/false);
        }
        it = next;
    }
}

void BatchScheduler::retire(std::list<Sequence>::iterator it, bool keep_kv) {
    auto& kv = model_.stage->kv_cache();
    const std::int64_t n = kv.length(it->seq_id());
    if (keep_kv && n > 0) {
        const auto& t = it->tokens();
        prefix_cache_.insert(it->seq_id(), std::vector<std::int32_t>(t.begin(), t.begin() + n));
    } else {
        kv.release(it->seq_id());
    }
    active_.erase(it);
}

void BatchScheduler::step() {
    std::vector<model::SequenceBatchEntry> batch;
    std::vector<std::list<Sequence>::iterator> owners;
    std::int64_t prefill_budget = options_.prefill_chunk;
    for (auto it = active_.begin(); it != active_.end(); ++it) {
        model::SequenceBatchEntry e;
        e.seq_id = it->seq_id();
        e.pos0 = static_cast<std::int32_t>(it->n_computed());
        const auto& t = it->tokens();
        if (it->prefilling()) {
            const std::int64_t n = std::min(prefill_budget, it->n_prompt() - it->n_computed());
            if (n <= 0) continue;
            prefill_budget -= n;
            e.n_tokens = static_cast<std::int32_t>(n);
            e.tokens.assign(t.begin() + it->n_computed(), t.begin() + it->n_computed() + n);
        } else {
            e.n_tokens = 1;  // the token sampled last
            e.tokens = {t.back()};
        }
        batch.push_back(std::move(e));
        owners.push_back(it);
    }
    if (batch.empty()) return;

    auto out = model_.stage->run_layers(batch);
    if (!out) {
        logger_->error("engine step failed ({} sequences): {}", batch.size(), out.error().message);
        for (auto it : owners) {
            it->fail(
                {api::ErrorKind::internal,
                 "engine error in request " + it->job().request.id + ": " + out.error().message,
                 ""});
            retire(it, /*keep_kv=*/false);
        }
        return;
    }
    for (std::size_t i = 0; i < batch.size(); ++i) {
        auto it = owners[i];
        it->advance(batch[i].n_tokens);
        if (it->prefilling()) continue;  // more prompt chunks to go
        if (it->on_logits(out->last_row(i, batch[i]))) retire(it, /*keep_kv=*/true);
    }
}

}  // namespace brigade::node
