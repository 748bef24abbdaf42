// `brigade run`: generate a continuation on this machine alone (issue 2), or run one layer
// range on a hidden-state file so that any pipeline split can be exercised by hand.
//
//   brigade run --model DIR --prompt "Hello" -n 32
//   brigade run --model DIR --prompt-ids 1,2,3 --logits-out logits.bin
//   brigade run --model DIR --prompt-ids 1,2,3 --layers 0:4 --hidden-out h4.bin
//   brigade run --model DIR --prompt-ids 1,2,3 --layers 4:8 --hidden-in h4.bin --logits-out l.bin
#include <charconv>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/backend.hpp"
#include "model/cpu/thread_count.hpp"
#include "model/forward.hpp"
#include "model/generate.hpp"
#include "model/model_config.hpp"
#include "model/text/tokenizer.hpp"
#include "node/commands.hpp"
#include "node/model_ref.hpp"

namespace brigade::node {
namespace {

struct RunArgs {
    std::string model;
    std::optional<std::string> prompt;
    std::optional<std::string> prompt_ids;
    int n_predict = 64;
    model::SamplingParams sampling;
    std::string backend = "cpu";
    int threads = 0;
    bool int8_activations = false;
    bool int16_activations = false;
    bool f32_activations = false;
    bool no_amx = false;
    bool kv_f32 = false;
    std::string logits_out;
    std::string layers;
    std::string hidden_in;
    std::string hidden_out;
    int max_context = 0;
    bool print_ids = false;
};

int fail(const std::string& message) {
    std::fprintf(stderr, "brigade run: error: %s\n", message.c_str());
    return 1;
}

model::Result<std::vector<std::int32_t>> parse_ids(const std::string& text) {
    std::vector<std::int32_t> ids;
    std::size_t pos = 0;
    while (pos <= text.size()) {
        std::size_t comma = text.find(',', pos);
        if (comma == std::string::npos) comma = text.size();
        std::string item = text.substr(pos, comma - pos);
        while (!item.empty() && item.front() == ' ') item.erase(item.begin());
        while (!item.empty() && item.back() == ' ') item.pop_back();
        std::int32_t id = 0;
        auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
        if (item.empty() || ec != std::errc{} || end != item.data() + item.size() || id < 0) {
            return model::make_error(
                model::errc::invalid_argument,
                "--prompt-ids: \"" + item + "\" is not a token id (expected e.g. 1,2,3)");
        }
        ids.push_back(id);
        pos = comma + 1;
    }
    return ids;
}

model::Result<model::LayerRange> parse_layers(const std::string& text, int n_layers) {
    const auto colon = text.find(':');
    model::LayerRange r;
    auto num = [](const std::string& s, int& out) {
        auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
        return !s.empty() && ec == std::errc{} && end == s.data() + s.size();
    };
    if (colon == std::string::npos || !num(text.substr(0, colon), r.first) ||
        !num(text.substr(colon + 1), r.last)) {
        return model::make_error(model::errc::invalid_argument,
                                 "--layers: expected A:B (e.g. 0:4), got \"" + text + "\"");
    }
    if (r.first < 0 || r.last > n_layers || r.first >= r.last) {
        return model::make_error(model::errc::out_of_range,
                                 "--layers " + text + " is not a non-empty range within the " +
                                     std::to_string(n_layers) + " layers of the model");
    }
    return r;
}

model::Result<void> write_floats(const std::string& path, const float* data, std::size_t n,
                                 std::ios::openmode mode = std::ios::trunc) {
    std::ofstream out(path, std::ios::binary | mode);
    if (!out) return model::make_error(model::errc::io_error, path + ": cannot create");
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(n * sizeof(float)));
    if (!out) return model::make_error(model::errc::io_error, path + ": write failed");
    return {};
}

model::Result<std::vector<float>> read_floats(const std::string& path, std::size_t expected) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) return model::make_error(model::errc::io_error, path + ": cannot open");
    const auto size = static_cast<std::size_t>(in.tellg());
    if (size != expected * sizeof(float)) {
        return model::make_error(model::errc::invalid_argument,
                                 path + ": " + std::to_string(size) + " bytes, expected " +
                                     std::to_string(expected * sizeof(float)) +
                                     " (float32 [tokens, hidden])");
    }
    std::vector<float> v(expected);
    in.seekg(0);
    in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(size));
    if (!in) return model::make_error(model::errc::io_error, path + ": read failed");
    return v;
}

// One layer range over the prompt's positions: hidden state in, hidden state or logits out.
int run_range(const RunArgs& args, const std::filesystem::path& dir, model::Backend& backend,
              const model::ModelConfig& config, const std::vector<std::int32_t>& ids) {
    auto range = parse_layers(args.layers, config.n_layers);
    if (!range) return fail(range.error().message);
    model::StageOptions options;
    options.max_context = args.max_context;
    options.kv_dtype = kv_cache_dtype(args.kv_f32);
    auto stage = model::Stage::load(dir, *range, backend, options);
    if (!stage) return fail(stage.error().message);
    auto& s = **stage;
    model::SequenceBatchEntry e;
    e.seq_id = 0;
    e.pos0 = 0;
    e.n_tokens = static_cast<std::int32_t>(ids.size());
    std::vector<float> hidden_in;
    if (s.is_head()) {
        if (!args.hidden_in.empty())
            return fail("--hidden-in is not used by a range starting at 0");
        e.tokens = ids;
    } else {
        if (args.hidden_in.empty()) {
            return fail("--layers " + args.layers + " does not start at layer 0: give --hidden-in");
        }
        auto h =
            read_floats(args.hidden_in, ids.size() * static_cast<std::size_t>(config.hidden_size));
        if (!h) return fail(h.error().message);
        hidden_in = std::move(*h);
    }
    auto out = s.run_layers({e}, hidden_in);
    if (!out) return fail(out.error().message);
    if (!s.is_tail()) {
        if (args.hidden_out.empty()) {
            return fail("--layers " + args.layers +
                        " does not end at the last layer: give --hidden-out");
        }
        if (auto w = write_floats(args.hidden_out, out->hidden.data(), out->hidden.size()); !w) {
            return fail(w.error().message);
        }
        std::fprintf(stderr, "brigade run: layers %d:%d wrote hidden state [%zu, %d] to %s\n",
                     range->first, range->last, ids.size(), config.hidden_size,
                     args.hidden_out.c_str());
        return 0;
    }
    const auto last = out->last_row(0, e);
    if (!args.logits_out.empty()) {
        if (auto w = write_floats(args.logits_out, last.data(), last.size()); !w) {
            return fail(w.error().message);
        }
    }
    std::size_t best = 0;
    for (std::size_t i = 1; i < last.size(); ++i) best = last[i] > last[best] ? i : best;
    std::printf("%zu\n", best);  // the greedy next token after the prompt
    return 0;
}

int run_generate(const RunArgs& args, const std::filesystem::path& dir, model::Backend& backend,
                 const model::ModelConfig& config, const std::vector<std::int32_t>& ids,
                 const std::optional<model::text::Tokenizer>& tokenizer) {
    model::StageOptions options;
    options.max_context = args.max_context;
    options.kv_dtype = kv_cache_dtype(args.kv_f32);
    const auto t_load = std::chrono::steady_clock::now();
    auto stage = model::Stage::load(dir, {0, config.n_layers}, backend, options);
    if (!stage) return fail(stage.error().message);
    const auto t_start = std::chrono::steady_clock::now();

    model::GenerateOptions g;
    g.max_new_tokens = args.n_predict;
    g.sampling = args.sampling;
    for (int id : config.eos_token_ids) g.stop_ids.push_back(id);
    if (tokenizer) {
        for (auto id : tokenizer->special().stop_ids) g.stop_ids.push_back(id);
    }
    if (!args.logits_out.empty()) {
        if (auto w = write_floats(args.logits_out, nullptr, 0); !w) return fail(w.error().message);
    }
    const bool as_text = tokenizer.has_value() && !args.print_ids;
    std::optional<model::text::StreamingDecoder> decoder;
    if (as_text) decoder.emplace(*tokenizer, /*skip_special_tokens=*/true);
    std::optional<model::Error> write_error;
    std::chrono::steady_clock::time_point t_first;
    bool first = true;
    auto on_step = [&](const model::GenerationStep& step) {
        if (first) {
            t_first = std::chrono::steady_clock::now();
            first = false;
        }
        if (!args.logits_out.empty()) {
            auto w = write_floats(args.logits_out, step.logits.data(), step.logits.size(),
                                  std::ios::app);
            if (!w) {
                write_error = w.error();
                return false;
            }
        }
        if (as_text) {
            if (!step.is_stop) std::fputs(decoder->push(step.token).c_str(), stdout);
        } else {
            std::printf("%s%d", step.index == 0 ? "" : " ", step.token);
        }
        std::fflush(stdout);
        return true;
    };
    auto result = model::generate(**stage, 0, ids, g, on_step);
    if (as_text) std::fputs(decoder->finish().c_str(), stdout);
    std::fputs("\n", stdout);
    if (write_error) return fail(write_error->message);
    if (!result) return fail(result.error().message);
    const auto t_end = std::chrono::steady_clock::now();
    auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    const double prefill_s = first ? 0.0 : secs(t_start, t_first);
    const double decode_s = first ? 0.0 : secs(t_first, t_end);
    const std::size_t n_gen = result->tokens.size();
    std::fprintf(stderr,
                 "brigade run: load %.2fs, prompt %zu tokens in %.3fs (%.1f tok/s), generated %zu "
                 "tokens (%.1f tok/s), %s, backend %s\n",
                 secs(t_load, t_start), ids.size(), prefill_s,
                 prefill_s > 0 ? static_cast<double>(ids.size()) / prefill_s : 0.0, n_gen,
                 decode_s > 0 && n_gen > 1 ? static_cast<double>(n_gen - 1) / decode_s : 0.0,
                 result->finish == model::FinishReason::kStop ? "stopped at EOS" : "length limit",
                 std::string(backend.name()).c_str());
    return 0;
}

int run_command(const RunArgs& args) {
    if (args.prompt.has_value() == args.prompt_ids.has_value()) {
        return fail("give exactly one of --prompt TEXT or --prompt-ids 1,2,3");
    }
    if (args.n_predict < 0) return fail("-n must be >= 0");
    if (args.threads < 0) return fail("--threads must be >= 0");
    if (const std::string warning =
            model::cpu::oversubscription_warning(args.threads, model::cpu::usable_cpus());
        !warning.empty() && args.backend == "cpu") {
        std::fprintf(stderr, "brigade run: warning: %s\n", warning.c_str());
    }
    if (auto v = model::validate_sampling_params(args.sampling); !v) {
        return fail(v.error().message);
    }
    if (args.layers.empty() && (!args.hidden_in.empty() || !args.hidden_out.empty())) {
        return fail("--hidden-in / --hidden-out need --layers A:B");
    }
    auto resolved = resolve_model_for_command(args.model, "run");
    if (!resolved) return fail(resolved.error().message);
    const auto& dir = resolved->dir;
    auto config = model::load_model_config(dir);
    if (!config) return fail(config.error().message);

    std::optional<model::text::Tokenizer> tokenizer;
    auto tok = model::text::Tokenizer::load_from_dir(dir);
    if (tok) {
        tokenizer = std::move(*tok);
    } else if (args.prompt) {
        return fail("--prompt needs a tokenizer: " + tok.error().message +
                    " (use --prompt-ids instead)");
    }
    std::vector<std::int32_t> ids;
    if (args.prompt) {
        auto enc = tokenizer->encode(*args.prompt, /*add_special_tokens=*/true);
        if (!enc) return fail(enc.error().message);
        ids = std::move(*enc);
    } else {
        auto parsed = parse_ids(*args.prompt_ids);
        if (!parsed) return fail(parsed.error().message);
        ids = std::move(*parsed);
    }
    if (ids.empty()) return fail("the prompt has no tokens");
    for (auto id : ids) {
        if (id >= config->vocab_size) {
            return fail("token id " + std::to_string(id) + " is outside the vocabulary (size " +
                        std::to_string(config->vocab_size) + ")");
        }
    }

    model::BackendKind kind;
    if (args.backend == "cpu") {
        kind = model::BackendKind::kCpu;
    } else if (args.backend == "reference") {
        kind = model::BackendKind::kReference;
    } else {
        return fail("--backend must be cpu or reference, not \"" + args.backend + "\"");
    }
    model::BackendOptions backend_options;
    backend_options.n_threads = args.threads;
    backend_options.cpu_int8_activations = args.int8_activations;
    backend_options.cpu_int16_activations = args.int16_activations;
    backend_options.cpu_split_int8_activations = !args.f32_activations;
    backend_options.cpu_amx = !args.no_amx;
    auto backend = model::make_backend(kind, backend_options);
    if (!backend) return fail(backend.error().message);

    if (!args.layers.empty()) return run_range(args, dir, **backend, *config, ids);
    return run_generate(args, dir, **backend, *config, ids, tokenizer);
}

}  // namespace

void add_run_command(CLI::App& app, CommandSet& commands) {
    auto args = std::make_shared<RunArgs>();
    auto* sub = app.add_subcommand("run", "Generate text with a model on this machine alone");
    sub->add_option("--model,-m", args->model,
                    "Model directory or Hugging Face cache name (default: the bundled demo)");
    sub->add_option("--prompt,-p", args->prompt, "Prompt text (tokenized with special tokens)");
    sub->add_option("--prompt-ids", args->prompt_ids, "Prompt as token ids, e.g. 1,2,3");
    sub->add_option("-n,--n-predict", args->n_predict, "Tokens to generate (default 64)");
    sub->add_option("--temp", args->sampling.temperature, "Temperature; 0 = greedy (default 0)");
    sub->add_option("--top-k", args->sampling.top_k, "Top-k (0 = off)");
    sub->add_option("--top-p", args->sampling.top_p, "Top-p (1 = off)");
    sub->add_option("--min-p", args->sampling.min_p, "Min-p (0 = off)");
    sub->add_option("--repeat-penalty", args->sampling.repetition_penalty,
                    "Repetition penalty, HF semantics (1 = off)");
    sub->add_option("--presence-penalty", args->sampling.presence_penalty,
                    "Presence penalty, OpenAI semantics (0 = off)");
    sub->add_option("--frequency-penalty", args->sampling.frequency_penalty,
                    "Frequency penalty, OpenAI semantics (0 = off)");
    sub->add_option("--seed", args->sampling.seed, "Sampling seed (default 0)");
    sub->add_option("--backend", args->backend, "cpu (default) or reference");
    sub->add_option("--threads,-t", args->threads,
                    "Compute threads (0 = every CPU, fewer where the machine runs fewer faster)");
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
    sub->add_option("--ctx", args->max_context,
                    "Context limit in tokens (default: the model's max_position_embeddings)");
    sub->add_option("--logits-out", args->logits_out,
                    "Write float32 logits, one row per generated step (first = after the prompt)");
    sub->add_option(
        "--layers", args->layers,
        "Run only layers A:B over the prompt positions (with --hidden-in/--hidden-out)");
    sub->add_option("--hidden-in", args->hidden_in, "float32 [tokens, hidden] input of --layers");
    sub->add_option("--hidden-out", args->hidden_out,
                    "float32 [tokens, hidden] output of --layers");
    sub->add_flag("--print-ids", args->print_ids, "Print token ids even when a tokenizer exists");
    commands.add(sub, [args] { return run_command(*args); });
}

}  // namespace brigade::node
