#pragma once
// Turns what a user passes as `--model` into a model directory (issue 4).
//
//   (nothing)         the bundled demo model (model/demo in the source tree, installed as
//                     <prefix>/share/brigade/demo), or $BRIGADE_DEMO_MODEL when set
//   a directory       used as is (it must hold config.json)
//   org/name[@rev]    a Hugging Face Hub snapshot already in the local cache:
//                     <hub>/models--org--name/snapshots/<commit>/, the commit read from
//                     refs/<rev> (default `main`) or given directly as `rev`. <hub> is
//                     $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub,
//                     else ~/.cache/huggingface/hub — the same order huggingface_hub uses.
//                     Nothing is downloaded.
//
// An existing local directory wins over a Hub name that looks the same.

#include <filesystem>
#include <optional>
#include <string>

#include "model/errors.hpp"

namespace brigade::node {

// What resolution reads from the process, passed in so tests can vary it.
struct ModelRefEnvironment {
    std::optional<std::string> brigade_demo_model;  // $BRIGADE_DEMO_MODEL
    std::optional<std::string> hf_hub_cache;        // $HF_HUB_CACHE (or $HUGGINGFACE_HUB_CACHE)
    std::optional<std::string> hf_home;             // $HF_HOME
    std::optional<std::string> xdg_cache_home;      // $XDG_CACHE_HOME
    std::optional<std::string> home;                // $HOME
    std::filesystem::path executable;               // this program's path; empty if unknown

    // The values of the running process (environment variables, /proc/self/exe or the
    // platform's equivalent).
    static ModelRefEnvironment from_process();
};

enum class ModelSource { kLocalDirectory, kHubCache, kDemo };

struct ResolvedModel {
    std::filesystem::path dir;
    ModelSource source = ModelSource::kLocalDirectory;
    // What was asked for: the path, `org/name`; for the demo model "demo", or
    // "BRIGADE_DEMO_MODEL" when that variable chose it.
    std::string name;
};

// Resolves `model_ref` (empty = the demo model). Errors say where it looked.
model::Result<ResolvedModel> resolve_model_ref(const std::string& model_ref,
                                               const ModelRefEnvironment& env);

// Directory of the Hugging Face Hub cache for `env` (see the header comment).
std::optional<std::filesystem::path> hub_cache_dir(const ModelRefEnvironment& env);

// One log line for people saying which model is used, e.g. "using the bundled demo model at
// /x/model/demo (no --model given)"; empty for a plain local directory, which needs no notice.
std::string model_choice_note(const ResolvedModel& model);

// resolve_model_ref with the process environment, printing the note (if any) to stderr as
// "brigade <command>: <note>". The usual entry point for subcommands.
model::Result<ResolvedModel> resolve_model_for_command(const std::string& model_ref,
                                                       const std::string& command);

}  // namespace brigade::node
