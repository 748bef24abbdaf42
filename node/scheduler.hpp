#pragma once
// Continuous batching on one compute thread (never on an I/O thread). Each step builds one
// batch from the active sequences — prefill chunks of newly admitted requests (at most
// `prefill_chunk` prompt tokens per step over all of them, so decoding sequences keep flowing)
// plus one decode token for every generating sequence — runs `Stage::run_layers` once, and
// samples each sequence from its own logits.
//
// At most `max_active` sequences hold KV at once; up to `max_queue` more wait; beyond that
// `submit` refuses (the service answers 429). A cancelled request (client gone) is dropped and
// its KV freed at the next step. Finished sequences leave their KV to the prefix cache.

#include <spdlog/logger.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <thread>

#include "node/prefix_cache.hpp"
#include "node/sequence.hpp"
#include "node/serve_model.hpp"

namespace brigade::node {

struct SchedulerOptions {
    int max_active = 4;
    int max_queue = 64;
    int prefill_chunk = 512;
    std::uint64_t prefix_cache_bytes = std::uint64_t{256} << 20;
    SamplingDefaults sampling;
};

class BatchScheduler {
public:
    BatchScheduler(ServeModel& model, SchedulerOptions options,
                   std::shared_ptr<spdlog::logger> logger);
    ~BatchScheduler();
    BatchScheduler(const BatchScheduler&) = delete;
    BatchScheduler& operator=(const BatchScheduler&) = delete;

    enum class Submitted { queued, queue_full, stopping };
    // Thread-safe. Unless `queued`, the job is left untouched (the caller answers it).
    Submitted submit(Job& job);
    // Ends the compute thread; requests still queued or running get `unavailable`. Idempotent.
    void stop();

    std::size_t n_waiting() const;

private:
    void run();
    void admit(Job job);
    void drop_cancelled();
    void step();
    void retire(std::list<Sequence>::iterator it, bool keep_kv);

    ServeModel& model_;
    SchedulerOptions options_;
    std::shared_ptr<spdlog::logger> logger_;
    TokenTexts texts_;
    PrefixCache prefix_cache_;

    mutable std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<Job> queue_;
    bool stopping_ = false;
    std::size_t n_active_ = 0;  // mirrors active_.size() for the I/O threads

    // Compute thread only.
    std::list<Sequence> active_;
    std::uint64_t next_seq_id_ = 1;
    std::thread thread_;
};

}  // namespace brigade::node
