#pragma once
// One pipeline stage: the decoder layers [first, last) of a model on one backend, with the
// KV cache of its layers (house guide §2, issue 2 "Forward").
//
// `run_layers` takes a batch of sequences, each contributing its new tokens (a prefill chunk
// or one decode token) at positions pos0 .. pos0 + n_tokens - 1. Rows of the hidden state are
// the batch's tokens in batch order: entry 0's tokens, then entry 1's, ... Between stages the
// hidden state is a plain f32 `[total_tokens, hidden]` array, so a split may sit after any
// layer. The head (first == 0) embeds token ids; the tail (last == n_layers) applies the final
// norm and the lm_head to the rows that need logits.
//
// All arithmetic goes through `Backend`; this file only sequences ops.
//
// A `Stage` is not thread-safe: one caller drives `run_layers` and the KV cache at a time (the
// node's compute thread). Sequences are identified by caller-chosen ids; the caller releases
// them (`kv_cache().release`) when a request ends.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "model/backend.hpp"
#include "model/errors.hpp"
#include "model/io/safetensors.hpp"
#include "model/kv_cache.hpp"
#include "model/model_config.hpp"
#include "model/rope.hpp"
#include "model/weights.hpp"

namespace brigade::model {

struct SequenceBatchEntry {
    std::uint64_t seq_id = 0;
    std::vector<std::int32_t> tokens;  // [n_tokens] token ids; needed on the head only
    std::int32_t pos0 = 0;             // must equal the positions this stage has cached
    std::int32_t n_tokens = 0;
    bool all_logits = false;  // tail: logits for every new token, not only the last one
};

struct StageOutput {
    // Not the tail: the hidden state after the stage's last layer, [total_tokens, hidden].
    std::vector<float> hidden;
    // Tail: [n_rows, vocab]. Entry i of the batch owns rows logits_row0[i] ..
    // logits_row0[i] + (all_logits ? n_tokens : 1) - 1, in position order.
    std::vector<float> logits;
    std::vector<std::int64_t> logits_row0;  // [batch size]
    std::int64_t n_logit_rows = 0;
    std::int64_t vocab = 0;

    std::span<const float> row(std::int64_t r) const {
        return {logits.data() + r * vocab, static_cast<std::size_t>(vocab)};
    }
    // The logits of the last new token of batch entry i (tail only).
    std::span<const float> last_row(std::size_t entry, const SequenceBatchEntry& e) const {
        return row(logits_row0[entry] + (e.all_logits ? e.n_tokens - 1 : 0));
    }
};

struct StageOptions {
    // Positions per sequence; 0 = the model's max_position_embeddings.
    std::int64_t max_context = 0;
    // The KV cache's element type: F16 (half the memory and the bytes read at long contexts)
    // or F32 (no rounding of keys and values).
    DType kv_dtype = DType::kF16;
    // The KV byte budget depends on the weights, known once loaded: kv_cache().set_max_bytes.
};

class Stage {
public:
    // Loads config.json and the weights `range` needs from `model_dir`. The backend must
    // outlive the stage.
    static Result<std::unique_ptr<Stage>> load(const std::filesystem::path& model_dir,
                                               LayerRange range, Backend& backend,
                                               const StageOptions& options = {});

    Result<StageOutput> run_layers(const std::vector<SequenceBatchEntry>& batch,
                                   std::span<const float> hidden_in = {});
    // The same, writing into `out` and reusing its vectors: in steady-state decode (KV cache
    // capacity and scratch already grown, `out` reused) a step allocates no memory at all.
    Result<void> run_layers(const std::vector<SequenceBatchEntry>& batch,
                            std::span<const float> hidden_in, StageOutput& out);

    const ModelConfig& config() const { return config_; }
    LayerRange range() const { return weights_.range; }
    bool is_head() const { return weights_.is_head; }
    bool is_tail() const { return weights_.is_tail; }
    const StageWeights& weights() const { return weights_; }
    KvCache& kv_cache() { return *kv_; }
    Backend& backend() { return backend_; }
    io::Checkpoint& checkpoint() { return checkpoint_; }

private:
    Stage(Backend& backend, ModelConfig config, io::Checkpoint checkpoint);
    Result<void> validate_batch(const std::vector<SequenceBatchEntry>& batch,
                                std::span<const float> hidden_in) const;
    // Scratch activations, grown as needed and reused across calls.
    float* scratch(int slot, std::size_t n_floats);
    void run_layer(int local, const std::vector<SequenceBatchEntry>& batch,
                   const std::vector<std::int64_t>& row0, std::int64_t n_rows, float* x);

    Backend& backend_;
    ModelConfig config_;
    io::Checkpoint checkpoint_;
    StageWeights weights_;  // views into `checkpoint_` made resident by `backend_.upload`
    RopeTable rope_;
    std::unique_ptr<KvCache> kv_;
    std::vector<DeviceBuffer> scratch_;
    std::vector<std::int32_t> positions_;  // [total_tokens] host
    // Per-step host vectors, kept so that a step reuses their memory.
    std::vector<std::int64_t> row0_;             // first row of each batch entry
    std::vector<std::int32_t> ids_;              // head: the batch's token ids
    std::vector<std::int64_t> logit_rows_;       // tail: rows that need logits
    std::vector<float> row_staging_;             // tail: one hidden row on its way to kTailRows
    std::vector<AttentionArgs> attention_args_;  // one per batch entry
};

}  // namespace brigade::model
