#pragma once
// Sampling a request where its logits are: the tail of the pipeline (or the one node holding the
// whole model). Everything the tail needs travels in a `GenerationSetup` built at the origin;
// with the token ids of the rows that pass through the tail (ActivationEntry::tokens), the tail
// rebuilds the history penalties and constrained output need. Because draws depend only on
// (seed, step) and the history, a request resumed on another pipeline with the tokens already
// generated continues with exactly the tokens an uninterrupted run would give (issue 7).

#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "api/json_prefix.hpp"
#include "mesh/messages.hpp"
#include "model/backend.hpp"
#include "model/errors.hpp"
#include "model/sampling.hpp"
#include "node/serve_model.hpp"

namespace brigade::node {

struct GenerationSetup {
    model::SamplingParams sampling;  // resolved: server defaults applied, seed chosen
    std::vector<std::pair<std::int32_t, float>> logit_bias;
    bool json_object = false;  // response_format json_object: mask tokens that break the JSON
    bool logprobs = false;
    int top_logprobs = 0;
    std::int64_t n_prompt = 0;        // history positions [0, n_prompt) are the prompt
    std::int64_t max_new_tokens = 0;  // in total, counting tokens generated before a resume
    std::int64_t context = 0;         // positions available per sequence

    // Field by field (model::SamplingParams has no operator==).
    bool operator==(const GenerationSetup& o) const;
};

// A versioned byte encoding (RequestFrame::setup, ActivationEntry::setup). Decoding rejects
// truncation, unknown versions and out-of-range values with a clear message.
std::vector<std::uint8_t> encode_generation_setup(const GenerationSetup& setup);
model::Result<GenerationSetup> decode_generation_setup(std::span<const std::uint8_t> bytes);

// Texts of single tokens, for the JSON mask and logprobs (built once, on first use).
// Thread-safe: the table is built under a once_flag and read-only afterwards.
class TokenTexts {
public:
    explicit TokenTexts(const model::text::Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
    const std::string& text(std::int32_t id);
    // The whole table, for loops over the vocabulary (one build check, not one per token).
    const std::vector<std::string>& all();
    // Per token: a normal (not special) token whose text a JSON string accepts from between
    // characters (api::JsonPrefixValidator::string_text_accepted), for the JSON mask.
    const std::vector<bool>& plain_string_texts();

private:
    void build();

    const model::text::Tokenizer& tokenizer_;
    std::once_flag built_;
    std::vector<std::string> texts_;
    std::vector<bool> plain_;
};

// One request's sampler at the tail. Not thread-safe (the tail's compute thread owns it).
class TokenSampler {
public:
    TokenSampler(std::uint64_t request_id, GenerationSetup setup, const ModelFrontend& model,
                 TokenTexts& texts);

    // Token ids at positions [pos0, pos0 + ids.size()) passed through the tail: the prompt, and
    // on a resume the tokens generated before it (their texts are replayed into the JSON state).
    // Positions already known with the same id are skipped (the tail sees each sampled token
    // again as the next decode row). False, with nothing changed, when pos0 leaves a gap.
    bool observe(std::int32_t pos0, std::span<const std::int32_t> ids);
    // Samples the token at position `history().size()` from the logits of the position before.
    // A finish other than kContinue ends the request (then `finished()`); token -1 means it
    // ended without a token (max_new_tokens already reached, or nothing can continue the JSON).
    // `host`: the sampler's whole-row passes run on its host threads (model::Sampler::sample).
    mesh::SampledTokenInfo sample(std::span<const float> logits, model::Backend* host = nullptr);

    const std::vector<std::int32_t>& history() const { return history_; }
    std::int64_t n_generated() const;
    bool finished() const { return finished_; }

private:
    std::uint64_t request_id_;
    GenerationSetup setup_;
    const ModelFrontend& model_;
    TokenTexts& texts_;
    std::vector<std::int32_t> history_;
    std::optional<api::JsonPrefixValidator> json_;
    // Candidate tokens tried on copies of json_, one per chunk of the vocabulary.
    std::vector<api::JsonPrefixValidator> json_probes_;
    // JSON masks by validator state (api::JsonPrefixValidator::state_key): a bit per token id,
    // set where its text can follow that state. A JSON output revisits a few states over and
    // over (after a value in the same object, inside a key), and a mask costs ~3 ms to build.
    std::unordered_map<std::string, std::vector<std::uint64_t>> json_masks_;
    std::string json_key_;
    std::vector<float> work_;               // biased and masked logits, reused across steps
    model::Sampler sampler_;                // its buffers too
    std::vector<model::SampledToken> top_;  // top_logprobs of a step, reused
    bool finished_ = false;

    void rebuild_json_state();
    std::vector<std::uint64_t> json_mask_of_state(std::size_t n_tokens, model::Backend* host);
};

// One row of a batch to sample: the request's sampler and the logits of its last position.
struct SampleJob {
    TokenSampler* sampler = nullptr;
    std::span<const float> logits;
};
// out[i] = jobs[i].sampler->sample(jobs[i].logits). Every request's sampler is its own state,
// so the rows are sampled in parallel on the backend's host threads (Backend::run_host_tasks):
// one after another, 16 requests at a temperature took 16 x 0.1-0.8 ms a step (sampling_bench,
// bench/RESULTS.md session 13). A single row's passes run in chunks on them instead. The
// samplers must be distinct. `out` is resized, so a reused one does not allocate.
void sample_batch(model::Backend& backend, std::span<const SampleJob> jobs,
                  std::vector<mesh::SampledTokenInfo>& out);

}  // namespace brigade::node
