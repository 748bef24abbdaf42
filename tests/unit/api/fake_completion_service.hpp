#pragma once
// A scripted `CompletionService` for the server tests: it answers from its own threads with
// delays, as the engine will, honours cancellation and can simulate a full queue.
//
// The last user message selects the script:
//   "echo <text>"   → "Echo: <text>" in 3-byte tokens (stop strings applied by OutputProcessor)
//   "slow"          → one token every 20 ms for up to 30 s, until cancelled
//   "pause"         → PromptInfo, 300 ms of silence, then "ok"
//   "tool"          → a Hermes tool call, parsed by OutputProcessor
//   "flood"         → 16 KiB deltas as fast as possible (up to 1 GiB, more than any socket
//                     buffers hold), until cancelled
//   "too long"      → context_length_exceeded
//   "engine error"  → an internal (engine) error before any output
//   "engine error later" → PromptInfo, "partial" in two deltas, then an internal error
// Model names: "fake-model" (id), "fake" (alias) and "" (default); anything else is a 404.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "api/completion_service.hpp"
#include "api/output_processor.hpp"

namespace brigade::api::test {

class FakeCompletionService final : public CompletionService {
public:
    ~FakeCompletionService() override { join(); }

    // Waits for every generation thread (they post to the server's io_context: join them before
    // it is destroyed).
    void join() {
        std::vector<std::thread> workers;
        {
            std::lock_guard lock(mutex_);
            workers.swap(workers_);
        }
        for (auto& worker : workers) worker.join();
    }

    void start(CompletionRequest request, std::shared_ptr<CompletionSink> sink,
               std::shared_ptr<Cancellation> cancel) override {
        ++started_;
        std::lock_guard lock(mutex_);
        workers_.emplace_back(
            [this, request = std::move(request), sink = std::move(sink),
             cancel = std::move(cancel)]() mutable { run(std::move(request), *sink, *cancel); });
    }

    std::vector<ModelInfo> list_models() override {
        return {ModelInfo{"fake-model", {"fake"}, 1700000000, "brigade", 4096}};
    }

    Health health() override { return {HealthState::ok, "", std::nullopt}; }

    // Waits until `n` generations have observed their cancellation.
    bool wait_cancelled(int n, std::chrono::milliseconds timeout) {
        std::unique_lock lock(mutex_);
        return cv_.wait_for(lock, timeout, [&] { return cancelled_ >= n; });
    }
    int cancelled() {
        std::lock_guard lock(mutex_);
        return cancelled_;
    }
    int started() const { return started_.load(); }

    std::atomic<bool> reject_overloaded{false};

private:
    void observed_cancel(CompletionSink& sink) {
        {
            std::lock_guard lock(mutex_);
            ++cancelled_;
        }
        cv_.notify_all();
        sink.on_error({ErrorKind::internal, "cancelled", ""});  // dropped by the server
    }

    void run(CompletionRequest request, CompletionSink& sink, Cancellation& cancel) {
        using namespace std::chrono_literals;
        std::this_thread::sleep_for(2ms);  // never answer synchronously
        if (!request.model.empty() && request.model != "fake-model" && request.model != "fake") {
            sink.on_error(
                {ErrorKind::model_not_found, "model '" + request.model + "' not found", "model"});
            return;
        }
        if (reject_overloaded) {
            sink.on_error({ErrorKind::overloaded, "queue full", ""});
            return;
        }
        const std::string prompt = request.endpoint == Endpoint::chat_completions
                                       ? request.messages.back().content
                                       : request.prompt;
        if (prompt == "too long") {
            sink.on_error({ErrorKind::context_length_exceeded,
                           "prompt has 5000 tokens; the context holds 4096", "messages"});
            return;
        }
        if (prompt == "engine error") {
            sink.on_error({ErrorKind::internal, "engine failed: injected fault", ""});
            return;
        }
        const auto prompt_tokens = static_cast<std::int64_t>(prompt.size());
        sink.on_prompt({"fake-model", prompt_tokens, prompt_tokens / 2});
        if (prompt == "engine error later") {
            for (const char* piece : {"part", "ial"}) {
                Delta delta;
                delta.content = piece;
                sink.on_delta(std::move(delta));
            }
            sink.on_error({ErrorKind::internal, "engine failed: injected fault", ""});
            return;
        }

        OutputOptions options;
        options.stop = request.stop;
        options.tool_format = request.tools.empty() ? ToolCallFormat::none : ToolCallFormat::hermes;
        OutputProcessor processor(options);
        std::string reply;
        int n_tokens = 0;
        auto delay = 1ms;
        if (prompt.starts_with("echo ")) {
            reply = "Echo: " + prompt.substr(5);
        } else if (prompt == "slow") {
            reply = std::string(1500 * 3, 'x');
            delay = 20ms;
        } else if (prompt == "pause") {
            std::this_thread::sleep_for(300ms);
            reply = "ok";
        } else if (prompt == "tool") {
            reply =
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                "\"Paris\"}}\n</tool_call>";
        } else {
            reply = "Hello!";
        }
        if (prompt == "flood") {
            for (int i = 0; i < 65536; ++i) {
                if (cancel.cancelled()) return observed_cancel(sink);
                Delta delta;
                delta.content.assign(16384, 'y');
                sink.on_delta(std::move(delta));
            }
            sink.on_final(Final{});
            return;
        }
        bool stopped = false, hit_length = false;
        for (std::size_t at = 0; at < reply.size() && !stopped; at += 3) {
            if (cancel.cancelled()) return observed_cancel(sink);
            if (request.max_tokens && n_tokens >= *request.max_tokens) {
                hit_length = true;
                break;
            }
            std::this_thread::sleep_for(delay);
            Delta delta;
            stopped = processor.feed(std::string_view(reply).substr(at, 3), delta);
            ++n_tokens;
            if (!delta.empty()) sink.on_delta(std::move(delta));
        }
        if (cancel.cancelled()) return observed_cancel(sink);
        Delta tail;
        processor.finish(tail);
        if (!tail.empty()) sink.on_delta(std::move(tail));
        Final final;
        final.finish_reason = processor.finish_reason(hit_length);
        final.usage = {prompt_tokens, n_tokens, prompt_tokens / 2, 0};
        final.timings = {10.0, prompt_tokens - prompt_tokens / 2, 20.0, n_tokens};
        sink.on_final(final);
    }

    std::mutex mutex_;
    std::condition_variable cv_;
    std::vector<std::thread> workers_;
    int cancelled_ = 0;
    std::atomic<int> started_{0};
};

}  // namespace brigade::api::test
