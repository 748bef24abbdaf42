// `brigade perplexity`: perplexity of a model over a text file, computed with the engine
// (issue 4). The text is read whole and tokenized without special tokens; the windows and the
// scoring follow model/perplexity.hpp, the definition model/demo/reference.json states.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "model/backend.hpp"
#include "model/cpu/thread_count.hpp"
#include "model/forward.hpp"
#include "model/model_config.hpp"
#include "model/perplexity.hpp"
#include "model/text/tokenizer.hpp"
#include "model/text/utf8.hpp"
#include "node/commands.hpp"
#include "node/model_ref.hpp"

namespace brigade::node {
namespace {

// llama.cpp's `perplexity` default, capped by the model's own limit.
constexpr int kDefaultCtx = 512;

struct PerplexityArgs {
    std::string model;
    std::string file;
    int ctx = 0;
    bool ctx_given = false;  // else min(kDefaultCtx, max_position_embeddings)
    int stride = 0;
    bool stride_given = false;  // else ctx
    std::int64_t max_windows = 0;
    std::string backend = "cpu";
    int threads = 0;
    bool int8_activations = false;
    bool int16_activations = false;
    bool f32_activations = false;
    bool no_amx = false;
    bool kv_f32 = false;
    int step_tokens = 0;
    bool json = false;
};

int fail(const std::string& message) {
    std::fprintf(stderr, "brigade perplexity: error: %s\n", message.c_str());
    return 1;
}

model::Result<std::string> read_text_file(const std::string& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
        return model::make_error(model::errc::io_error, path + " is a directory, not a text file");
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) return model::make_error(model::errc::io_error, "cannot open " + path);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) return model::make_error(model::errc::io_error, "cannot read " + path);
    return bytes;
}

int run_perplexity(const PerplexityArgs& args) {
    auto text = read_text_file(args.file);
    if (!text) return fail(text.error().message);
    if (const auto bad = model::text::find_invalid_utf8(*text); bad != text->size()) {
        return fail(args.file + " is not valid UTF-8 (first bad byte at offset " +
                    std::to_string(bad) + ")");
    }

    auto resolved = resolve_model_for_command(args.model, "perplexity");
    if (!resolved) return fail(resolved.error().message);
    const auto& dir = resolved->dir;
    auto config = model::load_model_config(dir);
    if (!config) return fail(config.error().message);

    model::PerplexityOptions options;
    options.ctx =
        args.ctx_given ? args.ctx : std::min(kDefaultCtx, config->max_position_embeddings);
    if (args.stride_given && args.stride <= 0) {
        return fail("--stride must be at least 1; got " + std::to_string(args.stride));
    }
    options.stride = args.stride;
    options.max_windows = args.max_windows;
    options.step_tokens = args.step_tokens;
    if (auto ok = model::validate_perplexity_options(options, config->max_position_embeddings);
        !ok) {
        return fail(ok.error().message);
    }

    auto tokenizer = model::text::Tokenizer::load_from_dir(dir);
    if (!tokenizer) return fail(tokenizer.error().message);
    // As the reference defines it: the file as it is, no BOS or other special tokens added.
    auto ids = tokenizer->encode(*text, /*add_special_tokens=*/false);
    if (!ids) return fail(ids.error().message);

    const auto kind =
        args.backend == "reference" ? model::BackendKind::kReference : model::BackendKind::kCpu;
    if (const std::string warning =
            model::cpu::oversubscription_warning(args.threads, model::cpu::usable_cpus());
        !warning.empty() && kind == model::BackendKind::kCpu) {
        std::fprintf(stderr, "brigade perplexity: warning: %s\n", warning.c_str());
    }
    model::BackendOptions backend_options;
    backend_options.n_threads = args.threads;
    backend_options.cpu_int8_activations = args.int8_activations;
    backend_options.cpu_int16_activations = args.int16_activations;
    backend_options.cpu_split_int8_activations = !args.f32_activations;
    backend_options.cpu_amx = !args.no_amx;
    auto backend = model::make_backend(kind, backend_options);
    if (!backend) return fail(backend.error().message);
    model::StageOptions stage_options;
    stage_options.max_context = options.ctx;
    stage_options.kv_dtype = kv_cache_dtype(args.kv_f32);
    auto stage = model::Stage::load(dir, {0, config->n_layers}, **backend, stage_options);
    if (!stage) return fail(stage.error().message);

    // A running count on a terminal, so a long file does not look hung; never in pipes or JSON.
    model::PerplexityProgress progress;
    if (!args.json && isatty(STDERR_FILENO) == 1) {
        const auto total =
            model::perplexity_window_count(static_cast<std::int64_t>(ids->size()), options);
        progress = [total](const model::PerplexityResult& so_far) {
            std::fprintf(stderr, "\rbrigade perplexity: window %lld/%lld, perplexity so far %.4f",
                         static_cast<long long>(so_far.n_windows), static_cast<long long>(total),
                         so_far.perplexity());
            if (so_far.n_windows == total) std::fputc('\n', stderr);
            return true;
        };
    }
    auto result = model::compute_perplexity(**stage, *ids, options, progress);
    if (!result) return fail(result.error().message);

    const int stride = options.stride == 0 ? options.ctx : options.stride;
    const int threads = (*backend)->compute_threads();
    if (args.json) {
        nlohmann::json j = {
            {"model", dir.string()},
            {"file", args.file},
            {"bytes", text->size()},
            {"tokens", ids->size()},
            {"ctx", options.ctx},
            {"stride", stride},
            {"backend", args.backend},
            {"threads", threads},
            {"int8_activations", args.int8_activations},
            {"int16_activations", args.int16_activations},
            {"f32_activations", args.f32_activations},
            {"amx", !args.no_amx},
            {"kv_f32", args.kv_f32},
            {"step_tokens", args.step_tokens},
            {"windows", result->n_windows},
            {"scored_tokens", result->n_scored},
            {"evaluated_tokens", result->n_evaluated},
            {"total_nll", result->total_nll},
            {"mean_nll", result->mean_nll()},
            {"perplexity", result->perplexity()},
            {"first_window_nll", result->first_window_nll},
            {"seconds", result->seconds},
            {"tokens_per_second", result->tokens_per_second()},
        };
        std::printf("%s\n", j.dump(1).c_str());
        return 0;
    }
    std::printf("model       %s\n", dir.string().c_str());
    std::printf("file        %s (%zu bytes, %zu tokens)\n", args.file.c_str(), text->size(),
                ids->size());
    std::printf("windows     %lld of up to %d tokens, stride %d\n",
                static_cast<long long>(result->n_windows), options.ctx, stride);
    std::printf("scored      %lld tokens\n", static_cast<long long>(result->n_scored));
    std::printf("mean NLL    %.6f\n", result->mean_nll());
    std::printf("perplexity  %.4f\n", result->perplexity());
    std::printf("speed       %.1f tok/s (%lld tokens in %.2f s, %s backend, %d thread%s)\n",
                result->tokens_per_second(), static_cast<long long>(result->n_evaluated),
                result->seconds, args.backend.c_str(), threads, threads == 1 ? "" : "s");
    return 0;
}

}  // namespace

void add_perplexity_command(CLI::App& app, CommandSet& commands) {
    auto args = std::make_shared<PerplexityArgs>();
    auto* sub = app.add_subcommand("perplexity", "Perplexity of a model over a text file");
    sub->add_option("--model,-m", args->model,
                    "Model directory or cached Hugging Face repo org/name (default: the bundled "
                    "demo model)");
    sub->add_option("--file,-f", args->file, "UTF-8 text file, scored as a whole")->required();
    auto* ctx = sub->add_option("--ctx,-c", args->ctx,
                                "Tokens per window (default 512 or the model's limit if smaller)");
    auto* stride = sub->add_option("--stride", args->stride,
                                   "Start a window every N tokens, scoring only new tokens "
                                   "(default: ctx, non-overlapping windows)");
    sub->add_option("--max-windows", args->max_windows, "Stop after N windows (default: all)");
    sub->add_option("--backend", args->backend, "Compute backend")
        ->check(CLI::IsMember({"cpu", "reference"}));
    sub->add_option("--threads,-t", args->threads,
                    "CPU threads (0 = every CPU, fewer where the machine runs fewer faster)")
        ->check(CLI::NonNegativeNumber);
    sub->add_flag("--int8-activations", args->int8_activations,
                  "Decode (1-4 tokens per step) on 4/8-bit MLX weights with int8 activations "
                  "and integer dot products: faster, but logits move by a few percent (demo "
                  "model: perplexity +0.4-0.6%); off by default");
    sub->add_flag("--f32-activations", args->f32_activations, kF32ActivationsHelp);
    sub->add_flag("--no-amx", args->no_amx, kNoAmxHelp);
    sub->add_flag("--kv-f32", args->kv_f32, kKvF32Help);
    sub->add_flag("--int16-activations", args->int16_activations,
                  "Decode (1-4 tokens per step) on MLX-quantized weights: round "
                  "activations to int16 per weight group and use integer dot products (4/8-bit: "
                  "AVX-512 VNNI row tiles): faster where 4-bit decode is compute-bound, logits "
                  "move by ~1e-3; off by default (--int8-activations wins if both are given)");
    sub->add_option("--step-tokens", args->step_tokens,
                    "Run each window this many tokens at a time, as decode does (default 0: "
                    "the whole window at once, as prompt processing); 1-4 scores the decode "
                    "kernels, e.g. with --int8-activations, which prompts never use")
        ->check(CLI::NonNegativeNumber);
    sub->add_flag("--json", args->json, "Print the result as JSON");
    commands.add(sub, [args, ctx, stride] {
        args->ctx_given = ctx->count() > 0;
        args->stride_given = stride->count() > 0;
        return run_perplexity(*args);
    });
}

}  // namespace brigade::node
