// `brigade serve`: load a model (every layer on this node) and serve the OpenAI-compatible API
// until SIGINT/SIGTERM.
//
//   brigade serve                          # the bundled demo model on 127.0.0.1:8177
//   brigade serve --model DIR --port 8080 --api-key secret --alias gpt-4o
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "api/http_server.hpp"
#include "node/commands.hpp"
#include "node/local_serving.hpp"
#include "node/logging.hpp"
#include "node/model_loading.hpp"

namespace brigade::node {
namespace {

struct ServeArgs {
    ServeModelOptions model;
    std::string host = "127.0.0.1";
    int port = 8177;
    std::string port_file;
    std::string api_key;
    int max_concurrency = 4;
    int max_queue = 64;
    int prefill_chunk = 512;
    double prefix_cache_mib = 256;
    SamplingDefaults sampling;
    bool verbose = false;
};

int fail(const std::string& message) {
    std::fprintf(stderr, "brigade serve: error: %s\n", message.c_str());
    return 1;
}

spdlog::level::level_enum to_spdlog(api::LogLevel level) {
    switch (level) {
        case api::LogLevel::debug:
            return spdlog::level::debug;
        case api::LogLevel::info:
            return spdlog::level::info;
        case api::LogLevel::warn:
            return spdlog::level::warn;
        case api::LogLevel::error:
            return spdlog::level::err;
    }
    return spdlog::level::info;
}

int serve_command(const ServeArgs& args) {
    if (args.port < 0 || args.port > 65535) return fail("--port must be within 0..65535");
    if (args.port == 0 && args.port_file.empty()) {
        return fail("--port 0 (any free port) needs --port-file to say which one was chosen");
    }
    if (args.max_concurrency < 1) return fail("--max-concurrency must be >= 1");
    if (args.max_queue < 0) return fail("--max-queue must be >= 0");
    if (args.prefill_chunk < 1) return fail("--prefill-chunk must be >= 1");
    if (args.model.context < 0) return fail("--ctx must be >= 0");
    if (args.prefix_cache_mib < 0) return fail("--prefix-cache-mib must be >= 0");

    auto logger =
        make_stderr_logger("serve", args.verbose ? spdlog::level::debug : spdlog::level::info);
    auto frontend = load_model_frontend(args.model, *logger);
    if (!frontend) return fail(frontend.error().message);
    const ModelFrontend model = std::move(*frontend);
    StageLoadOptions stage_options;
    stage_options.backend = args.model.backend;
    stage_options.n_threads = args.model.n_threads;
    auto resources =
        load_stage_resources(model, {0, model.config.n_layers}, stage_options, *logger);
    if (!resources) return fail(resources.error().message);
    logger->info("model '{}' loaded: {} layers, context {}, backend {}", model.info.id,
                 model.config.n_layers, model.context, (*resources)->backend->name());

    LocalServingOptions serving;
    serving.head.max_active = args.max_concurrency;
    serving.head.max_queue = args.max_queue;
    serving.head.prefill_chunk = args.prefill_chunk;
    serving.head.prefix_cache_bytes = static_cast<std::uint64_t>(args.prefix_cache_mib * (1 << 20));
    serving.sampling = args.sampling;

    boost::asio::io_context io;
    auto local = std::make_unique<LocalServing>(model, std::move(*resources), mesh::NodeId{},
                                                serving, logger);
    auto* service = local.get();
    api::ServerOptions options;
    options.host = args.host;
    options.port = static_cast<std::uint16_t>(args.port);
    options.api_key = args.api_key;
    options.max_concurrency = 0;  // the scheduler's slots and queue decide 429s
    options.log = [logger](api::LogLevel level, std::string_view line) {
        logger->log(to_spdlog(level), "{}", line);
    };
    auto server = std::make_unique<api::HttpServer>(io, local->service(), options);
    auto port = server->start();
    if (!port) {
        service->stop();
        return fail("cannot listen on " + args.host + ":" + std::to_string(args.port) + ": " +
                    port.error().message());
    }
    if (!args.port_file.empty()) {
        std::ofstream(args.port_file) << *port << "\n";
    }

    boost::asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](const boost::system::error_code& ec, int signal) {
        if (ec) return;
        logger->info("{}: stopping (in-flight requests are cancelled)",
                     signal == SIGINT ? "SIGINT" : "SIGTERM");
        server->stop();   // stop accepting, cancel in-flight
        service->stop();  // ends the compute thread after its current step
    });

    const std::string host =
        args.host.find(':') != std::string::npos ? "[" + args.host + "]" : args.host;
    std::printf("brigade serve: ready at http://%s:%u/v1 (model '%s')\n", host.c_str(),
                static_cast<unsigned>(*port), model.info.id.c_str());
    std::fflush(stdout);

    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i) threads.emplace_back([&] { io.run(); });
    for (auto& t : threads) t.join();
    // Order (api/README.md): server stopped, service done with its callbacks, then destroy.
    service->stop();
    server.reset();
    local.reset();
    logger->info("stopped");
    return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, CommandSet& commands) {
    auto args = std::make_shared<ServeArgs>();
    auto* sub = app.add_subcommand(
        "serve", "Serve a model over an OpenAI-compatible HTTP API (chat, completions, models)");
    sub->footer(
        "\nExamples:\n"
        "  brigade serve                              # the bundled demo model on :8177\n"
        "  brigade serve -m ~/models/Qwen2.5-0.5B-Instruct --port 8080 --api-key s3cret\n"
        "  curl http://127.0.0.1:8177/v1/chat/completions -H 'Content-Type: application/json' \\\n"
        "       -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}'\n");
    sub->add_option("--model,-m", args->model.model_ref,
                    "Model directory or Hugging Face cache name org/name (default: the bundled "
                    "demo model)");
    sub->add_option("--host", args->host, "Address to listen on (default 127.0.0.1)");
    sub->add_option("--port", args->port, "TCP port (default 8177; 0 = any, with --port-file)");
    sub->add_option("--port-file", args->port_file,
                    "Write the bound port to this file once listening");
    sub->add_option("--api-key", args->api_key,
                    "Require 'Authorization: Bearer KEY' on every request");
    sub->add_option("--alias", args->model.aliases,
                    "Another name the model answers to (repeatable)");
    sub->add_option("--max-concurrency", args->max_concurrency,
                    "Requests generated at once, batched together (default 4)");
    sub->add_option("--max-queue", args->max_queue,
                    "Requests waiting for a slot before new ones get 429 (default 64)");
    sub->add_option("--ctx", args->model.context,
                    "Context per request in tokens (default: the model's "
                    "max_position_embeddings)");
    sub->add_option("--threads,-t", args->model.n_threads, "Compute threads (0 = all cores)");
    sub->add_option("--backend", args->model.backend, "cpu (default) or reference");
    sub->add_option("--prefill-chunk", args->prefill_chunk,
                    "Prompt tokens computed per step over all requests (default 512)");
    sub->add_option("--prefix-cache-mib", args->prefix_cache_mib,
                    "KV kept from finished requests for prefix reuse, MiB (default 256)");
    sub->add_option("--temp", args->sampling.temperature,
                    "Default temperature when a request sets none (default 0.7)");
    sub->add_option("--top-p", args->sampling.top_p, "Default top-p (default 1)");
    sub->add_option("--top-k", args->sampling.top_k, "Default top-k (default 0 = off)");
    sub->add_option("--min-p", args->sampling.min_p, "Default min-p (default 0)");
    sub->add_option("--repeat-penalty", args->sampling.repetition_penalty,
                    "Default repetition penalty (default 1 = off)");
    sub->add_flag("--verbose,-v", args->verbose, "Debug logging");
    commands.add(sub, [args] { return serve_command(*args); });
}

}  // namespace brigade::node
