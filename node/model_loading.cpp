#include "node/model_loading.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "mesh/planner.hpp"
#include "model/model_config.hpp"
#include "node/model_ref.hpp"

namespace brigade::node {
namespace {

namespace fs = std::filesystem;

// Weight files in `dir` that `wanted` allows (all when `wanted` is empty).
std::vector<fs::path> safetensors_files(const fs::path& dir, const std::set<std::string>& wanted) {
    std::vector<fs::path> files;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        if (entry.path().extension() == ".safetensors" && entry.is_regular_file(ec) &&
            (wanted.empty() || wanted.count(entry.path().filename().string()) != 0)) {
            files.push_back(entry.path());
        }
    }
    std::sort(files.begin(), files.end());
    return files;
}

// Reads the weight files once, front to back, so the page cache holds them before the stage
// maps them: this is where the time goes on a cold start, and it is the part whose progress we
// can measure in bytes. Draws a bar on a terminal; logs start and end otherwise.
void read_weights_with_progress(const std::vector<fs::path>& files, spdlog::logger& logger) {
    std::uintmax_t total = 0;
    std::error_code ec;
    for (const auto& f : files) total += fs::file_size(f, ec);
    const bool tty = isatty(STDERR_FILENO) == 1;
    logger.info("reading {} weight file(s), {:.1f} MiB", files.size(),
                static_cast<double>(total) / (1 << 20));
    std::vector<char> buffer(std::size_t{8} << 20);
    std::uintmax_t done = 0;
    int last_percent = -1;
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& f : files) {
        std::ifstream in(f, std::ios::binary);
        while (in) {
            in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
            done += static_cast<std::uintmax_t>(in.gcount());
            const int percent = total > 0 ? static_cast<int>(done * 100 / total) : 100;
            if (tty && percent != last_percent) {
                last_percent = percent;
                const int width = 40;
                const int filled = percent * width / 100;
                const double s =
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                std::fprintf(stderr, "\rloading [%.*s%*s] %3d%%  %.0f/%.0f MiB  %.1fs", filled,
                             "########################################", width - filled, "",
                             percent, static_cast<double>(done) / (1 << 20),
                             static_cast<double>(total) / (1 << 20), s);
                std::fflush(stderr);
            }
        }
    }
    if (tty) std::fputs("\n", stderr);
}

model::Result<model::BackendKind> backend_kind(const std::string& name) {
    if (name == "cpu") return model::BackendKind::kCpu;
    if (name == "reference") return model::BackendKind::kReference;
    return model::make_error(model::errc::invalid_argument,
                             "--backend must be cpu or reference, not \"" + name + "\"");
}

}  // namespace

std::vector<std::filesystem::path> weight_files_for_range(const std::filesystem::path& dir,
                                                          model::LayerRange range, int n_layers) {
    std::set<std::string> wanted;
    std::ifstream in(dir / "model.safetensors.index.json");
    if (!in) return safetensors_files(dir, wanted);
    const nlohmann::json index = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
        return safetensors_files(dir, wanted);
    }
    const bool ends = range.first == 0 || range.last == n_layers;
    static const std::string kLayers = "model.layers.";
    for (const auto& [name, file] : index["weight_map"].items()) {
        if (!file.is_string()) return safetensors_files(dir, {});  // not understood: read all
        bool needed = ends;  // embedding, final norm, lm_head: the head and the tail
        if (name.rfind(kLayers, 0) == 0) {
            needed = range.contains(std::atoi(name.c_str() + kLayers.size()));
        }
        if (needed) wanted.insert(file.get<std::string>());
    }
    return safetensors_files(dir, wanted);
}

model::Result<ModelFrontend> load_model_frontend(const ServeModelOptions& options,
                                                 spdlog::logger& logger) {
    auto resolved = resolve_model_for_command(options.model_ref, "serve");
    if (!resolved) return resolved.error();
    const fs::path dir = resolved->dir;
    auto config = model::load_model_config(dir);
    if (!config) return config.error();
    auto tokenizer = model::text::Tokenizer::load_from_dir(dir);
    if (!tokenizer) {
        return model::make_error(model::errc::invalid_argument,
                                 "serving needs a tokenizer: " + tokenizer.error().message);
    }
    if (options.context < 0) {
        return model::make_error(model::errc::invalid_argument, "--ctx must be >= 0");
    }

    ModelFrontend m(std::move(*tokenizer));
    m.dir = dir;
    m.config = *config;
    m.context = options.context > 0 ? options.context : config->max_position_embeddings;
    m.vocab_size = config->vocab_size;

    auto tpl = model::text::ChatTemplate::load_from_dir(dir);
    if (tpl) {
        m.chat_template = std::move(*tpl);
    } else {
        logger.warn("no chat template ({}); only /v1/completions will work", tpl.error().message);
    }
    for (int id : config->eos_token_ids) m.stop_ids.push_back(id);
    for (auto id : m.tokenizer.special().stop_ids) m.stop_ids.push_back(id);
    std::sort(m.stop_ids.begin(), m.stop_ids.end());
    m.stop_ids.erase(std::unique(m.stop_ids.begin(), m.stop_ids.end()), m.stop_ids.end());

    // Names: the directory's name is the id; the path, what the user typed and --alias also
    // answer (api::find_model).
    std::error_code canonical_error;
    fs::path canonical = fs::weakly_canonical(dir, canonical_error);
    if (canonical_error) canonical = dir;
    m.info.id = canonical.filename().string();
    if (m.info.id.empty()) m.info.id = "model";
    auto add_alias = [&](const std::string& a) {
        if (!a.empty() && a != m.info.id &&
            std::find(m.info.aliases.begin(), m.info.aliases.end(), a) == m.info.aliases.end()) {
            m.info.aliases.push_back(a);
        }
    };
    add_alias(canonical.string());
    add_alias(dir.string());
    add_alias(options.model_ref);
    for (const auto& a : options.aliases) add_alias(a);
    m.info.context_length = m.context;
    m.info.created = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    return m;
}

std::uint64_t kv_budget_bytes(std::uint64_t memory_bytes, std::uint64_t weight_bytes) {
    if (memory_bytes == 0) return 0;  // no limit
    // At least one byte: a budget of 0 would read as "no limit".
    return memory_bytes > weight_bytes ? memory_bytes - weight_bytes : 1;
}

model::Result<std::shared_ptr<StageResources>> load_stage_resources(const ModelFrontend& model,
                                                                    model::LayerRange range,
                                                                    const StageLoadOptions& options,
                                                                    spdlog::logger& logger) {
    if (range.empty() || range.first < 0 || range.last > model.config.n_layers) {
        return model::make_error(model::errc::invalid_argument,
                                 "layer range [" + std::to_string(range.first) + ", " +
                                     std::to_string(range.last) + ") is not within the model's " +
                                     std::to_string(model.config.n_layers) + " layers");
    }
    auto kind = backend_kind(options.backend);
    if (!kind) return kind.error();
    model::BackendOptions backend_options;
    backend_options.n_threads = options.n_threads;
    backend_options.cpu_int8_activations = options.int8_activations;
    backend_options.cpu_int16_activations = options.int16_activations;
    backend_options.cpu_split_int8_activations = !options.f32_activations;
    backend_options.cpu_amx = options.amx;
    auto backend = model::make_backend(*kind, backend_options);
    if (!backend) return backend.error();

    auto resources = std::make_shared<StageResources>();
    resources->backend = std::move(*backend);
    if (options.show_progress) {
        read_weights_with_progress(weight_files_for_range(model.dir, range, model.config.n_layers),
                                   logger);
    }
    model::StageOptions stage_options;
    stage_options.max_context = model.context;
    stage_options.kv_dtype = options.kv_dtype;
    auto stage = model::Stage::load(model.dir, range, *resources->backend, stage_options);
    if (!stage) return stage.error();
    // The KV budget is set here only where this node runs the whole model. A stage of a split
    // that ran out of room could only fail the request (its sampler is on the tail); with
    // budgets there, a 3-minute soak of 2.5 MB nodes failed 21 requests mid-stream (bench/
    // RESULTS.md, Elasticity, session 11). Instead the head of a split bounds its sequences by
    // the positions every stage holds (PipelineRoute::kv_positions) and pauses them itself.
    const bool whole_model = range.first == 0 && range.last == model.config.n_layers;
    if (options.memory_bytes != 0 && whole_model) {
        const std::uint64_t weights = (*stage)->weights().n_bytes;
        const std::uint64_t budget = kv_budget_bytes(options.memory_bytes, weights);
        (*stage)->kv_cache().set_max_bytes(budget);
        const std::uint64_t per_position = (*stage)->kv_cache().bytes_per_position();
        const std::uint64_t positions = per_position == 0 ? 0 : budget / per_position;
        if (positions < static_cast<std::uint64_t>(model.context)) {
            logger.warn(
                "layers [{}, {}): {} of weights leave {} for KV, {} positions in all "
                "(less than one full context of {})",
                range.first, range.last, mesh::format_size(weights), mesh::format_size(budget),
                positions, model.context);
        } else {
            logger.debug("layers [{}, {}): {} of KV budget, {} positions", range.first, range.last,
                         mesh::format_size(budget), positions);
        }
    }
    resources->stage = std::move(*stage);
    return resources;
}

}  // namespace brigade::node
