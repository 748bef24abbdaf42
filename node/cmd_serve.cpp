// `brigade serve`: join or create a mesh, take a share of the model's layers as the mesh plans,
// and serve the OpenAI-compatible API of the mesh's model until SIGINT/SIGTERM. A node alone is
// a mesh of one that holds every layer (what `brigade serve` always did).
//
//   brigade serve                          # the bundled demo model on 127.0.0.1:8177
//   brigade serve --model DIR --port 8080 --api-key secret --alias gpt-4o
//   brigade serve --join brigade1-...      # join the mesh of that invite token
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "api/http_server.hpp"
#include "mesh/identity.hpp"
#include "mesh/planner.hpp"
#include "model/cpu/thread_count.hpp"
#include "node/commands.hpp"
#include "node/local_serving.hpp"
#include "node/logging.hpp"
#include "node/mesh_completion_service.hpp"
#include "node/mesh_runtime.hpp"
#include "node/mesh_runtime_home.hpp"
#include "node/mesh_runtime_pipeline.hpp"
#include "node/model_loading.hpp"
#include "node/model_shape.hpp"
#include "node/serve_run.hpp"
#include "node/status_text.hpp"

namespace brigade::node {
namespace {

using namespace std::chrono_literals;

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
    // The mesh.
    bool no_mesh = false;
    std::string join;
    std::vector<std::string> peers;
    std::string mesh_host = "0.0.0.0";
    int mesh_port = mesh::kDefaultMeshPort;
    bool mesh_port_given = false;
    std::string mesh_port_file;
    std::string memory;
    std::string activations = "bf16";
    bool no_discovery = false;
    int discovery_port = mesh::kDefaultMeshPort;
    std::string discovery_group{mesh::kDefaultMulticastGroup};
    int suspect_after_ms = 2500;
    int dead_after_ms = 6000;
    int expect_nodes = 0;
    int drain_ms = 5000;
    int leave_ms = 15000;
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

std::uint64_t default_memory_bytes() {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page <= 0) return std::uint64_t{8} << 30;
    return static_cast<std::uint64_t>(static_cast<double>(pages) * static_cast<double>(page) * 0.8);
}

// The mesh's API: the completion service plus GET /v1/mesh from the runtime.
class MeshApi final : public api::CompletionService {
public:
    MeshApi(api::CompletionService& inner, MeshRuntime* runtime)
        : inner_(inner), runtime_(runtime) {}
    void start(api::CompletionRequest request, std::shared_ptr<api::CompletionSink> sink,
               std::shared_ptr<api::Cancellation> cancel) override {
        inner_.start(std::move(request), std::move(sink), std::move(cancel));
    }
    std::vector<api::ModelInfo> list_models() override { return inner_.list_models(); }
    api::Health health() override { return inner_.health(); }
    std::optional<nlohmann::json> mesh_status() override {
        if (runtime_ == nullptr) return std::nullopt;
        return runtime_->status();
    }
    std::optional<std::string> status_text() override {
        if (runtime_ == nullptr) return std::nullopt;
        return format_status(runtime_->status()) + format_load(api::health_json(health()));
    }

private:
    api::CompletionService& inner_;
    MeshRuntime* runtime_;
};

// SIGINT/SIGTERM set a flag the main thread waits on; the handler itself does nothing slow.
class StopSignal {
public:
    void request(const char* why) {
        {
            std::lock_guard lock(mutex_);
            if (why_) return;
            why_ = why;
        }
        cv_.notify_all();
    }
    // Waits until a stop is requested or `until()` holds or `limit` passes; true if stopping.
    bool wait(std::chrono::milliseconds limit, const std::function<bool()>& until) {
        std::unique_lock lock(mutex_);
        const auto deadline = std::chrono::steady_clock::now() + limit;
        while (!why_ && !until()) {
            if (cv_.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() + 50ms)) ==
                    std::cv_status::timeout &&
                std::chrono::steady_clock::now() >= deadline) {
                break;
            }
        }
        return why_ != nullptr;
    }
    const char* why() {
        std::lock_guard lock(mutex_);
        return why_;
    }

private:
    std::mutex mutex_;
    std::condition_variable cv_;
    const char* why_ = nullptr;
};

struct MeshSetup {
    mesh::NodeKey key;
    mesh::MeshCredentials credentials;
    std::vector<mesh::PeerAddress> seeds;
};

// Node key, the mesh (created, loaded, or joined with the token) and the seeds to dial.
std::optional<MeshSetup> set_up_mesh(const ServeArgs& args, const std::filesystem::path& home,
                                     spdlog::logger& logger, std::string& error) {
    auto key = mesh::load_or_create_node_key(home);
    if (!key) {
        error = key.error().message;
        return std::nullopt;
    }
    MeshSetup setup{std::move(*key), {}, {}};
    if (!args.join.empty()) {
        auto token = mesh::decode_invite_token(args.join);
        if (!token) {
            error = "--join: " + token.error().message;
            return std::nullopt;
        }
        setup.credentials = token->mesh;
        setup.seeds = token->addresses;
        if (auto saved = mesh::save_mesh_credentials(home, setup.credentials); !saved) {
            error = saved.error().message;
            return std::nullopt;
        }
    } else {
        std::error_code ec;
        if (std::filesystem::exists(home / "mesh.json", ec)) {
            auto loaded = mesh::load_mesh_credentials(home);
            if (!loaded) {
                error = loaded.error().message;
                return std::nullopt;
            }
            setup.credentials = *loaded;
        } else {
            setup.credentials = mesh::MeshCredentials::generate();
            if (auto saved = mesh::save_mesh_credentials(home, setup.credentials); !saved) {
                error = saved.error().message;
                return std::nullopt;
            }
            logger.info("created a new mesh {} in {}", setup.credentials.id.to_string(),
                        (home / "mesh.json").string());
        }
    }
    for (const std::string& p : args.peers) {
        auto address = mesh::parse_peer_address(p, mesh::kDefaultMeshPort);
        if (!address) {
            error = "--peer '" + p + "': " + address.error().message;
            return std::nullopt;
        }
        setup.seeds.push_back(*address);
    }
    return setup;
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
    if (args.mesh_port < 0 || args.mesh_port > 65535) {
        return fail("--mesh-port must be within 0..65535");
    }
    if (args.discovery_port < 1 || args.discovery_port > 65535) {
        return fail("--discovery-port must be within 1..65535");
    }
    if (args.suspect_after_ms < 100 || args.dead_after_ms <= args.suspect_after_ms) {
        return fail("--suspect-after must be >= 100 ms and --dead-after above it");
    }
    if (args.expect_nodes < 0) return fail("--expect-nodes must be >= 0");
    if (args.drain_ms < 0 || args.leave_ms < 0)
        return fail("--drain-ms and --leave-ms must be >= 0");
    if (args.activations != "bf16" && args.activations != "f32") {
        return fail("--activations must be bf16 or f32, got '" + args.activations + "'");
    }
    std::uint64_t memory_bytes = default_memory_bytes();
    if (!args.memory.empty()) {
        auto parsed = mesh::parse_size(args.memory);
        if (!parsed) return fail("--memory: " + parsed.error().message);
        memory_bytes = *parsed;
    }

    auto logger =
        make_stderr_logger("serve", args.verbose ? spdlog::level::debug : spdlog::level::info);
    const auto home = mesh::default_brigade_home();
    std::optional<MeshSetup> mesh_setup;
    if (!args.no_mesh) {
        std::string error;
        mesh_setup = set_up_mesh(args, home, *logger, error);
        if (!mesh_setup) return fail(error);
    }

    auto frontend = load_model_frontend(args.model, *logger);
    if (!frontend) return fail(frontend.error().message);
    const ModelFrontend model = std::move(*frontend);
    StageLoadOptions stage_options;
    stage_options.backend = args.model.backend;
    stage_options.n_threads = args.model.n_threads;
    if (const std::string warning = model::cpu::oversubscription_warning(stage_options.n_threads,
                                                                         model::cpu::usable_cpus());
        !warning.empty() && stage_options.backend == "cpu") {
        logger->warn("{}", warning);
    }
    if (stage_options.n_threads == 0 && stage_options.backend == "cpu") {
        // Measured here, before the node's speed is measured, so that the log says how.
        const model::cpu::ThreadCountChoice& choice = model::cpu::default_thread_count();
        stage_options.n_threads = choice.threads;
        logger->info("compute threads: {}",
                     model::cpu::describe(choice, model::cpu::usable_cpus()));
    }
    stage_options.int8_activations = args.model.int8_activations;
    stage_options.int16_activations = args.model.int16_activations;
    stage_options.f32_activations = args.model.f32_activations;
    stage_options.amx = !args.model.no_amx;
    stage_options.kv_dtype = kv_cache_dtype(args.model.kv_f32);
    stage_options.memory_bytes = memory_bytes;

    PipelineHeadOptions head;
    head.max_active = args.max_concurrency;
    head.max_queue = args.max_queue;
    head.prefill_chunk = args.prefill_chunk;
    head.prefix_cache_bytes = static_cast<std::uint64_t>(args.prefix_cache_mib * (1 << 20));

    std::unique_ptr<MeshRuntime> runtime;
    std::unique_ptr<ModelPipelineHost> host;
    std::unique_ptr<MeshCompletionService> mesh_service;
    std::unique_ptr<LocalServing> local;
    api::CompletionService* inner = nullptr;
    if (mesh_setup) {
        auto shape = read_model_shape(model.dir, stage_options.kv_dtype);
        if (!shape) return fail(shape.error().message);
        auto seconds = measure_layer_seconds(model, stage_options, *logger);
        if (!seconds) return fail("measuring this node's speed: " + seconds.error().message);
        MeshRuntimeOptions options;
        options.listen_host = args.mesh_host;
        options.listen_port = static_cast<std::uint16_t>(args.mesh_port);
        options.fallback_to_any_port = !args.mesh_port_given;
        options.seeds = mesh_setup->seeds;
        options.discovery = !args.no_discovery;
        options.discovery_group = args.discovery_group;
        options.discovery_port = static_cast<std::uint16_t>(args.discovery_port);
        options.membership.suspect_after = std::chrono::milliseconds(args.suspect_after_ms);
        options.membership.dead_after = std::chrono::milliseconds(args.dead_after_ms);
        options.expect_nodes = args.expect_nodes;
        options.memory_bytes = memory_bytes;
        options.backend = args.model.backend;
        options.seconds_per_layer = *seconds;
        options.model_id = model.info.id;
        options.shape = shape->shape;
        options.tied_embeddings = shape->tied_embeddings;
        options.context_tokens = static_cast<int>(model.context);
        options.activations =
            args.activations == "f32" ? mesh::ActivationDType::kF32 : mesh::ActivationDType::kBF16;
        logger->info("this node offers {} for weights and KV; {:.3f} ms per layer per token",
                     mesh::format_size(memory_bytes), *seconds * 1000.0);
        runtime = std::make_unique<MeshRuntime>(std::move(mesh_setup->key), mesh_setup->credentials,
                                                options, logger);
        ModelPipelineHostOptions host_options;
        host_options.load = stage_options;
        host_options.head = head;
        host = std::make_unique<ModelPipelineHost>(model, runtime->self(), runtime->sender(),
                                                   host_options, logger);
        mesh_service = std::make_unique<MeshCompletionService>(
            model, runtime->self(), *host, runtime->sender(), args.sampling, logger);
        host->set_service(mesh_service.get());
        inner = mesh_service.get();
    } else {
        auto resources =
            load_stage_resources(model, {0, model.config.n_layers}, stage_options, *logger);
        if (!resources) return fail(resources.error().message);
        LocalServingOptions serving;
        serving.head = head;
        serving.sampling = args.sampling;
        local = std::make_unique<LocalServing>(model, std::move(*resources), mesh::NodeId{},
                                               serving, logger);
        inner = &local->service();
    }
    MeshApi api_service(*inner, runtime.get());

    boost::asio::io_context io;
    api::ServerOptions options;
    options.host = args.host;
    options.port = static_cast<std::uint16_t>(args.port);
    options.api_key = args.api_key;
    options.max_concurrency = 0;  // the head's slots and queue decide 429s
    options.log = [logger](api::LogLevel level, std::string_view line) {
        logger->log(to_spdlog(level), "{}", line);
    };
    auto server = std::make_unique<api::HttpServer>(io, api_service, options);

    if (runtime) {
        if (auto started = runtime->start(*host); !started) {
            return fail("mesh: " + started.error().message);
        }
        const std::vector<mesh::PeerAddress> addresses = runtime->self_addresses();
        if (auto saved = save_mesh_addresses(home, addresses); !saved) {
            logger->warn("{}", saved.error().message);
        }
        if (!args.mesh_port_file.empty()) {
            std::ofstream(args.mesh_port_file) << runtime->port() << "\n";
        }
        if (args.join.empty()) {
            mesh::InviteToken token{mesh_setup->credentials, addresses};
            std::printf("brigade serve: invite token: %s\n",
                        mesh::encode_invite_token(token).c_str());
            std::fflush(stdout);
        }
    }

    auto port = server->start();
    if (!port) {
        if (runtime) runtime->stop();
        return fail("cannot listen on " + args.host + ":" + std::to_string(args.port) + ": " +
                    port.error().message());
    }

    // `brigade stop` finds this process by the record in the home (removed again on the way out).
    const std::string host_text =
        args.host.find(':') != std::string::npos ? "[" + args.host + "]" : args.host;
    const ServeRun run{static_cast<int>(::getpid()),
                       "http://" + host_text + ":" + std::to_string(*port),
                       std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count()};
    if (auto earlier = read_serve_run(home);
        earlier && *earlier && (*earlier)->pid != run.pid && process_running((*earlier)->pid)) {
        logger->warn(
            "another brigade serve (pid {}, {}) runs with the home {}: `brigade stop` "
            "will stop this one",
            (*earlier)->pid, (*earlier)->url, home.string());
    }
    if (auto written = write_serve_run(home, run); !written) {
        logger->warn("{} (`brigade stop` will not find this node)", written.error().message);
    }
    struct RunRecord {
        const std::filesystem::path& home;
        int pid;
        ~RunRecord() { remove_serve_run(home, pid); }
    } run_record{home, run.pid};

    StopSignal stop;
    boost::asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](const boost::system::error_code& ec, int signal) {
        if (!ec) stop.request(signal == SIGINT ? "SIGINT" : "SIGTERM");
    });
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i) threads.emplace_back([&] { io.run(); });

    // Ready once requests can be answered: the first pipeline is active, or the model fits
    // nowhere (503 with the reason), or more nodes are expected (503 "forming" until they come).
    if (runtime && args.expect_nodes <= 1) {
        if (!stop.wait(600s, [&] { return runtime->settled(); }) && !runtime->settled()) {
            logger->warn("no pipeline after 600 s; serving anyway (requests get 503 until one)");
        }
    }
    if (!stop.why()) {
        if (!args.port_file.empty()) std::ofstream(args.port_file) << *port << "\n";
        std::printf("brigade serve: ready at http://%s:%u/v1 (model '%s')\n", host_text.c_str(),
                    static_cast<unsigned>(*port), model.info.id.c_str());
        std::fflush(stdout);
        while (!stop.wait(std::chrono::hours(1), [] { return false; })) {
        }
    }

    // Graceful stop: new requests get 503, running ones finish (bounded), peers are told.
    const auto drain = std::chrono::milliseconds(args.drain_ms);
    logger->info("{}: stopping (running requests get up to {} ms)", stop.why(), drain.count());
    // A stage hands its layers over first: the mesh re-plans around this node while the current
    // plan serves, and requests in flight move to the new pipeline.
    if (runtime) runtime->leave(std::chrono::milliseconds(args.leave_ms));
    if (host) host->stop(drain);
    if (local) local->stop(drain);
    if (mesh_service) {
        const auto deadline = std::chrono::steady_clock::now() + drain;
        while (mesh_service->n_in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(20ms);
        }
        mesh_service->fail_all("the node is shutting down");
    }
    if (runtime) runtime->stop();  // Bye on every link
    server->stop();
    signals.cancel();
    for (auto& t : threads) t.join();
    // Order (api/README.md): server stopped, service done with its callbacks, then destroy.
    if (mesh_service) mesh_service->stop();
    server.reset();
    if (host) host->set_service(nullptr);
    mesh_service.reset();
    local.reset();
    host.reset();
    runtime.reset();
    logger->info("stopped");
    return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, CommandSet& commands) {
    auto args = std::make_shared<ServeArgs>();
    auto* sub = app.add_subcommand(
        "serve",
        "Serve a model over an OpenAI-compatible HTTP API (chat, completions, models), alone or "
        "as one node of a mesh");
    sub->footer(
        "\nExamples:\n"
        "  brigade serve                              # the bundled demo model on :8177\n"
        "  brigade serve -m ~/models/Qwen2.5-0.5B-Instruct --port 8080 --api-key s3cret\n"
        "  brigade serve --join brigade1-...          # another machine joins that mesh\n"
        "  curl http://127.0.0.1:8177/v1/chat/completions -H 'Content-Type: application/json' \\\n"
        "       -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}'\n"
        "  curl http://127.0.0.1:8177/v1/mesh         # nodes, plan, links\n"
        "\nState lives in $BRIGADE_HOME (default ~/.brigade): node.key, mesh.json, "
        "addresses.json.\n");
    sub->add_option("--model,-m", args->model.model_ref,
                    "Model directory or Hugging Face cache name org/name (default: the bundled "
                    "demo model)");
    sub->add_option("--host", args->host, "Address to listen on (default 127.0.0.1)");
    sub->add_option("--port", args->port, "TCP port (default 8177; 0 = any, with --port-file)");
    sub->add_option("--port-file", args->port_file,
                    "Write the bound port to this file once serving");
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
    sub->add_option("--threads,-t", args->model.n_threads,
                    "Compute threads (0 = every CPU, fewer where the machine runs fewer faster)");
    sub->add_flag("--int8-activations", args->model.int8_activations,
                  "Decode (1-4 tokens per step) on 4/8-bit MLX weights with int8 activations "
                  "and integer dot products: faster, but logits move by a few percent (demo "
                  "model: perplexity +0.4-0.6%); off by default");
    sub->add_flag("--f32-activations", args->model.f32_activations, kF32ActivationsHelp);
    sub->add_flag("--no-amx", args->model.no_amx, kNoAmxHelp);
    sub->add_flag("--kv-f32", args->model.kv_f32, kKvF32Help);
    sub->add_flag("--int16-activations", args->model.int16_activations,
                  "Decode (1-4 tokens per step) on MLX-quantized weights: round "
                  "activations to int16 per weight group and use integer dot products (4/8-bit: "
                  "AVX-512 VNNI row tiles): faster where 4-bit decode is compute-bound, logits "
                  "move by ~1e-3; off by default (--int8-activations wins if both are given)");
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

    const char* const mesh_group = "Mesh";
    sub->add_option("--join", args->join, "Join the mesh of this invite token (brigade1-...)")
        ->group(mesh_group);
    sub->add_option("--peer", args->peers, "Dial this node HOST:PORT (repeatable)")
        ->group(mesh_group);
    sub->add_option("--mesh-host", args->mesh_host,
                    "Address for mesh links (default 0.0.0.0: every interface)")
        ->group(mesh_group);
    sub->add_option("--mesh-port", args->mesh_port,
                    "TCP port for mesh links (default 8178; 0 = any, see --mesh-port-file)")
        ->group(mesh_group);
    sub->add_option("--mesh-port-file", args->mesh_port_file,
                    "Write the bound mesh port to this file")
        ->group(mesh_group);
    sub->add_option("--memory", args->memory,
                    "Memory offered for weights and KV, e.g. 6MB, 24GB (default: 80% of RAM); "
                    "serving the whole model, the KV cache gets what the weights leave")
        ->group(mesh_group);
    sub->add_option("--activations", args->activations,
                    "Hidden states between stages: bf16 (default) or f32 (exact)")
        ->group(mesh_group);
    sub->add_flag("--no-discovery", args->no_discovery, "No LAN multicast discovery")
        ->group(mesh_group);
    sub->add_option("--discovery-port", args->discovery_port,
                    "UDP port of discovery beacons (default 8178)")
        ->group(mesh_group);
    sub->add_option("--discovery-group", args->discovery_group,
                    "Multicast group of discovery beacons (default 239.255.81.77)")
        ->group(mesh_group);
    sub->add_option("--suspect-after", args->suspect_after_ms,
                    "A silent member is suspect after this many ms (default 2500)")
        ->group(mesh_group);
    sub->add_option("--dead-after", args->dead_after_ms,
                    "A silent member is dead and removed after this many ms (default 6000)")
        ->group(mesh_group);
    sub->add_option("--expect-nodes", args->expect_nodes,
                    "Wait (a few seconds at most) for this many members before the first plan")
        ->group(mesh_group);
    sub->add_option("--drain-ms", args->drain_ms,
                    "On SIGINT/SIGTERM, running requests get this long to finish (default 5000)")
        ->group(mesh_group);
    sub->add_option("--leave-ms", args->leave_ms,
                    "On SIGINT/SIGTERM, wait this long for the mesh to re-plan without this node "
                    "(default 15000)")
        ->group(mesh_group);
    sub->add_flag("--no-mesh", args->no_mesh,
                  "Serve alone: no mesh links, no discovery, every layer here")
        ->group(mesh_group);
    commands.add(sub, [args, sub] {
        args->mesh_port_given = sub->count("--mesh-port") > 0;
        return serve_command(*args);
    });
}

}  // namespace brigade::node
