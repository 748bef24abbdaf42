#pragma once
// Subcommands of the `brigade` executable. Each lives in its own `cmd_*.cpp` and registers
// itself with `add_*_command`; main() parses argv and dispatches to the one chosen.

#include <CLI/CLI.hpp>
#include <functional>
#include <vector>

#include "model/types.hpp"

namespace brigade::node {

// Help of --f32-activations (run, serve, perplexity).
inline constexpr const char* kF32ActivationsHelp =
    "One- and two-token decode on 4-bit (and, with AVX-512 VNNI, 8-bit) MLX weights with f32 "
    "activations instead of the default two int8 digits (x86 CPUs with AVX2, Arm with sdot; "
    " within 3.1e-5 of each group's largest activation): slower, for comparison";

// Help of --no-amx (run, serve, perplexity).
inline constexpr const char* kNoAmxHelp =
    "Never use AMX tiles (Xeon from Sapphire Rapids on): decode batches of 8-31 sequences and "
    "prompts then take the AVX-512 kernels and dequantize + sgemm; for comparison";

// The KV cache's element type for --kv-f32 given or not (StageOptions::kv_dtype).
inline model::DType kv_cache_dtype(bool kv_f32) {
    return kv_f32 ? model::DType::kF32 : model::DType::kF16;
}
inline constexpr const char* kKvF32Help =
    "Keep the KV cache in f32 instead of the default f16: twice the memory per position and "
    "the bytes a long context's decode step reads, logits unrounded (f16 moves them by ~1e-3 "
    "of the largest)";

// The subcommands parsed so far and what to run for each. Returns the process exit code.
class CommandSet {
public:
    void add(CLI::App* sub, std::function<int()> run) {
        commands_.push_back({sub, std::move(run)});
    }
    int dispatch() const {
        for (const auto& c : commands_) {
            if (c.app->parsed()) return c.run();
        }
        return 2;
    }

private:
    struct Entry {
        CLI::App* app;
        std::function<int()> run;
    };
    std::vector<Entry> commands_;
};

// One declaration per subcommand file (node/cmd_<name>.cpp).
void add_version_command(CLI::App& app, CommandSet& commands);
void add_run_command(CLI::App& app, CommandSet& commands);
void add_tokenize_command(CLI::App& app, CommandSet& commands);
void add_template_command(CLI::App& app, CommandSet& commands);
void add_perplexity_command(CLI::App& app, CommandSet& commands);
void add_serve_command(CLI::App& app, CommandSet& commands);
void add_chat_command(CLI::App& app, CommandSet& commands);
void add_plan_command(CLI::App& app, CommandSet& commands);
void add_mesh_command(CLI::App& app, CommandSet& commands);
void add_status_command(CLI::App& app, CommandSet& commands);
void add_stop_command(CLI::App& app, CommandSet& commands);

}  // namespace brigade::node
