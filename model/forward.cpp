#include "model/forward.hpp"

#include <cmath>
#include <string>

namespace brigade::model {
namespace {

// Scratch slots of one forward call; each holds `[total_tokens, width]` f32.
enum Slot : int {
    kResidual = 0,  // x [T, hidden]
    kNormed,        // xn [T, hidden]
    kQuery,         // q [T, q_dim]
    kAttnOut,       // [T, q_dim]
    kProjected,     // o_proj / down_proj output [T, hidden]
    kGate,          // [T, intermediate]
    kUp,            // [T, intermediate]
    kTailRows,      // rows that need logits [R, hidden]
    kLogits,        // [R, vocab]
    kKeys,          // new keys of a multi-sequence batch [T, kv_dim]
    kValues,        // new values of a multi-sequence batch [T, kv_dim]
    kNumSlots,
};

const WeightVector* bias_or_null(const WeightVector& v) { return v.valid() ? &v : nullptr; }

// Checks that the backend computes with every weight, then makes it resident.
class Uploader {
public:
    explicit Uploader(Backend& backend) : backend_(backend) {}

    Result<void> matrix(WeightMatrix& w, const std::string& name) {
        if (!w.valid()) return {};
        if (!backend_.supports(w)) {
            std::string what = std::string(dtype_name(w.dtype));
            if (w.quantized()) {
                what = std::to_string(w.bits) + "-bit group " + std::to_string(w.group_size) +
                       " quantized";
            }
            return make_error(errc::unsupported_dtype,
                              "tensor \"" + name + "\": backend " + std::string(backend_.name()) +
                                  " cannot compute with " + what + " weights");
        }
        w = backend_.upload(w);
        return {};
    }
    void vector(WeightVector& v) {
        if (v.valid()) v = backend_.upload(v);
    }

private:
    Backend& backend_;
};

Result<void> upload_weights(StageWeights& s, Backend& backend) {
    Uploader up(backend);
    const WeightMatrix host_embed = s.embed;
    if (auto r = up.matrix(s.embed, "model.embed_tokens.weight"); !r) return r;
    for (std::size_t i = 0; i < s.layers.size(); ++i) {
        LayerWeights& l = s.layers[i];
        const std::string p = layer_prefix(s.range.first + static_cast<int>(i));
        struct {
            WeightMatrix* w;
            const char* name;
        } matrices[] = {{&l.wq, "self_attn.q_proj"},  {&l.wk, "self_attn.k_proj"},
                        {&l.wv, "self_attn.v_proj"},  {&l.wo, "self_attn.o_proj"},
                        {&l.w_gate, "mlp.gate_proj"}, {&l.w_up, "mlp.up_proj"},
                        {&l.w_down, "mlp.down_proj"}};
        for (auto& m : matrices) {
            if (auto r = up.matrix(*m.w, p + m.name + ".weight"); !r) return r;
        }
        for (WeightVector* v : {&l.attn_norm, &l.mlp_norm, &l.bq, &l.bk, &l.bv, &l.bo, &l.q_norm,
                                &l.k_norm, &l.b_gate, &l.b_up, &l.b_down}) {
            up.vector(*v);
        }
    }
    if (s.is_tail) {
        up.vector(s.final_norm);
        const bool tied_to_resident_embed =
            s.is_head && s.lm_head.data == host_embed.data && s.lm_head.scales == host_embed.scales;
        if (tied_to_resident_embed) {
            s.lm_head = s.embed;  // one resident copy serves both
        } else if (auto r = up.matrix(s.lm_head, "lm_head.weight"); !r) {
            return r;
        }
    }
    return {};
}

}  // namespace

Stage::Stage(Backend& backend, ModelConfig config, io::Checkpoint checkpoint)
    : backend_(backend), config_(std::move(config)), checkpoint_(std::move(checkpoint)) {}

Result<std::unique_ptr<Stage>> Stage::load(const std::filesystem::path& model_dir, LayerRange range,
                                           Backend& backend, const StageOptions& options) {
    auto config = load_model_config(model_dir);
    if (!config) return config.error();
    auto checkpoint = io::Checkpoint::open(model_dir);
    if (!checkpoint) return checkpoint.error();
    std::unique_ptr<Stage> stage(new Stage(backend, std::move(*config), std::move(*checkpoint)));
    auto weights = load_stage_weights(stage->checkpoint_, stage->config_, range);
    if (!weights) return weights.error();
    stage->weights_ = std::move(*weights);
    if (auto r = upload_weights(stage->weights_, backend); !r) return r.error();
    const ModelConfig& c = stage->config_;
    stage->rope_ =
        make_rope_table(c.rope_theta, c.rope_dims > 0 ? c.rope_dims : c.head_dim, c.rope_scaling);
    KvCacheLimits limits;
    limits.max_positions =
        options.max_context > 0 ? options.max_context : stage->config_.max_position_embeddings;
    stage->kv_ = std::make_unique<KvCache>(backend, range.size(), stage->config_.kv_dim(), limits,
                                           options.kv_dtype);
    stage->scratch_.resize(kNumSlots);
    return stage;
}

float* Stage::scratch(int slot, std::size_t n_floats) {
    DeviceBuffer& b = scratch_[static_cast<std::size_t>(slot)];
    const std::size_t bytes = std::max<std::size_t>(n_floats, 1) * sizeof(float);
    if (b.bytes() < bytes) b = backend_.alloc(bytes);
    return b.f32();
}

Result<void> Stage::validate_batch(const std::vector<SequenceBatchEntry>& batch,
                                   std::span<const float> hidden_in) const {
    if (batch.empty()) return make_error(errc::invalid_argument, "run_layers: empty batch");
    std::int64_t total = 0;
    // Checked without allocating (a decode step allocates nothing): batches are a few dozen
    // sequences at most, so the quadratic scan costs less than building a set.
    for (std::size_t i = 0; i < batch.size(); ++i) {
        for (std::size_t j = i + 1; j < batch.size(); ++j) {
            if (batch[i].seq_id == batch[j].seq_id) {
                return make_error(
                    errc::invalid_argument,
                    "sequence " + std::to_string(batch[i].seq_id) + " appears twice in one batch");
            }
        }
    }
    for (const auto& e : batch) {
        // Only built when there is an error to report.
        auto who = [&e] { return "sequence " + std::to_string(e.seq_id); };
        if (e.n_tokens <= 0) {
            return make_error(errc::invalid_argument, who() + ": n_tokens must be positive");
        }
        if (e.pos0 != kv_->length(e.seq_id)) {
            return make_error(errc::out_of_range,
                              who() + ": pos0 is " + std::to_string(e.pos0) +
                                  " but this stage has " + std::to_string(kv_->length(e.seq_id)) +
                                  " positions cached (truncate the cache first)");
        }
        if (static_cast<std::int64_t>(e.pos0) + e.n_tokens > kv_->limits().max_positions) {
            return make_error(errc::out_of_range, who() + ": positions up to " +
                                                      std::to_string(e.pos0 + e.n_tokens) +
                                                      " exceed the context limit of " +
                                                      std::to_string(kv_->limits().max_positions));
        }
        if (is_head()) {
            if (static_cast<std::int64_t>(e.tokens.size()) != e.n_tokens) {
                return make_error(
                    errc::invalid_argument,
                    who() + ": " + std::to_string(e.tokens.size()) +
                        " token ids given for n_tokens = " + std::to_string(e.n_tokens));
            }
            for (auto id : e.tokens) {
                if (id < 0 || id >= config_.vocab_size) {
                    return make_error(errc::out_of_range,
                                      who() + ": token id " + std::to_string(id) +
                                          " is outside the vocabulary [0, " +
                                          std::to_string(config_.vocab_size) + ")");
                }
            }
        }
        total += e.n_tokens;
    }
    if (!is_head()) {
        const auto expected =
            static_cast<std::size_t>(total) * static_cast<std::size_t>(config_.hidden_size);
        if (hidden_in.size() != expected) {
            return make_error(errc::invalid_argument,
                              "run_layers: hidden state has " + std::to_string(hidden_in.size()) +
                                  " floats, expected " + std::to_string(total) + " tokens x " +
                                  std::to_string(config_.hidden_size));
        }
    }
    return {};
}

Result<StageOutput> Stage::run_layers(const std::vector<SequenceBatchEntry>& batch,
                                      std::span<const float> hidden_in) {
    StageOutput out;
    if (auto r = run_layers(batch, hidden_in, out); !r) return r.error();
    return out;
}

Result<void> Stage::run_layers(const std::vector<SequenceBatchEntry>& batch,
                               std::span<const float> hidden_in, StageOutput& out) {
    if (auto r = validate_batch(batch, hidden_in); !r) return r.error();
    const auto hidden = static_cast<std::int64_t>(config_.hidden_size);

    std::vector<std::int64_t>& row0 = row0_;
    row0.resize(batch.size());
    std::int64_t n_rows = 0;
    for (std::size_t i = 0; i < batch.size(); ++i) {
        row0[i] = n_rows;
        n_rows += batch[i].n_tokens;
    }
    for (const auto& e : batch) {
        if (auto r = kv_->reserve(e.seq_id, static_cast<std::int64_t>(e.pos0) + e.n_tokens); !r) {
            return r.error();
        }
    }
    // One token per sequence: decode steps, whose activations the backend may round as its
    // decode path does (a one-token prompt is one too: alone, it takes the same GEMV).
    backend_.set_rows_are_decode_steps(n_rows == static_cast<std::int64_t>(batch.size()));
    positions_.resize(static_cast<std::size_t>(n_rows));
    for (std::size_t i = 0; i < batch.size(); ++i) {
        for (std::int32_t t = 0; t < batch[i].n_tokens; ++t) {
            positions_[static_cast<std::size_t>(row0[i] + t)] = batch[i].pos0 + t;
        }
    }

    // Size every slot for this batch before taking pointers, so none moves mid-call.
    const auto T = static_cast<std::size_t>(n_rows);
    float* x = scratch(kResidual, T * static_cast<std::size_t>(hidden));
    scratch(kNormed, T * static_cast<std::size_t>(hidden));
    scratch(kQuery, T * static_cast<std::size_t>(config_.q_dim()));
    scratch(kAttnOut, T * static_cast<std::size_t>(config_.q_dim()));
    scratch(kProjected, T * static_cast<std::size_t>(hidden));
    scratch(kGate, T * static_cast<std::size_t>(config_.intermediate_size));
    scratch(kUp, T * static_cast<std::size_t>(config_.intermediate_size));
    if (batch.size() > 1 || kv_->dtype() != DType::kF32) {  // see run_layer
        scratch(kKeys, T * static_cast<std::size_t>(config_.kv_dim()));
        scratch(kValues, T * static_cast<std::size_t>(config_.kv_dim()));
    }

    if (is_head()) {
        std::vector<std::int32_t>& ids = ids_;
        ids.clear();
        for (const auto& e : batch) ids.insert(ids.end(), e.tokens.begin(), e.tokens.end());
        backend_.embed(weights_.embed, ids, x);
    } else {
        backend_.write(scratch_[kResidual], 0, hidden_in.data(), hidden_in.size_bytes());
    }
    for (int l = 0; l < range().size(); ++l) run_layer(l, batch, row0, n_rows, x);
    for (const auto& e : batch) {
        kv_->set_length(e.seq_id, static_cast<std::int64_t>(e.pos0) + e.n_tokens);
    }

    const std::size_t row_bytes = static_cast<std::size_t>(hidden) * sizeof(float);
    if (!is_tail()) {
        out.hidden.resize(T * static_cast<std::size_t>(hidden));
        out.logits.clear();
        out.logits_row0.clear();
        out.n_logit_rows = 0;
        out.vocab = 0;
        backend_.read(scratch_[kResidual], 0, out.hidden.data(), T * row_bytes);
        backend_.synchronize();
        return {};
    }

    // Gather the rows that need logits (the last token of each entry, or all of them).
    out.hidden.clear();
    out.logits_row0.resize(batch.size());
    std::vector<std::int64_t>& rows = logit_rows_;
    rows.clear();
    for (std::size_t i = 0; i < batch.size(); ++i) {
        out.logits_row0[i] = static_cast<std::int64_t>(rows.size());
        const auto& e = batch[i];
        for (std::int32_t t = e.all_logits ? 0 : e.n_tokens - 1; t < e.n_tokens; ++t) {
            rows.push_back(row0[i] + t);
        }
    }
    const auto R = static_cast<std::int64_t>(rows.size());
    const std::int64_t vocab = config_.vocab_size;
    float* tail_rows = x;
    if (R != n_rows) {
        tail_rows = scratch(kTailRows, static_cast<std::size_t>(R * hidden));
        std::vector<float>& staging = row_staging_;
        staging.resize(static_cast<std::size_t>(hidden));
        for (std::int64_t r = 0; r < R; ++r) {
            backend_.read(scratch_[kResidual], static_cast<std::size_t>(rows[r]) * row_bytes,
                          staging.data(), row_bytes);
            backend_.write(scratch_[kTailRows], static_cast<std::size_t>(r) * row_bytes,
                           staging.data(), row_bytes);
        }
    }
    backend_.rms_norm(tail_rows, weights_.final_norm, R, hidden,
                      static_cast<float>(config_.rms_norm_eps), tail_rows);
    float* logits = scratch(kLogits, static_cast<std::size_t>(R * vocab));
    backend_.matmul(weights_.lm_head, tail_rows, R, logits);
    out.n_logit_rows = R;
    out.vocab = vocab;
    out.logits.resize(static_cast<std::size_t>(R * vocab));
    backend_.read(scratch_[kLogits], 0, out.logits.data(), out.logits.size() * sizeof(float));
    backend_.synchronize();
    return {};
}

void Stage::run_layer(int local, const std::vector<SequenceBatchEntry>& batch,
                      const std::vector<std::int64_t>& row0, std::int64_t n_rows, float* x) {
    const LayerWeights& w = weights_.layers[static_cast<std::size_t>(local)];
    const ModelConfig& c = config_;
    const std::int64_t hidden = c.hidden_size;
    const std::int64_t q_dim = c.q_dim();
    const std::int64_t kv_dim = c.kv_dim();
    const auto eps = static_cast<float>(c.rms_norm_eps);
    float* xn = scratch_[kNormed].f32();
    float* q = scratch_[kQuery].f32();
    float* attn = scratch_[kAttnOut].f32();
    float* proj = scratch_[kProjected].f32();
    float* gate = scratch_[kGate].f32();
    float* up = scratch_[kUp].f32();

    // Attention block: x += o_proj(attention(rope(q), rope(k), v)) of rms_norm(x).
    // Q, K and V are one fused op (one parallel region on the CPU backend, where K and V of a
    // small model are too small to be worth a fork-join each).
    backend_.rms_norm(x, w.attn_norm, n_rows, hidden, eps, xn);
    auto project_qkv = [&](float* k_out, float* v_out) {
        const MatmulJob jobs[] = {{&w.wq, q, bias_or_null(w.bq)},
                                  {&w.wk, k_out, bias_or_null(w.bk)},
                                  {&w.wv, v_out, bias_or_null(w.bv)}};
        backend_.matmul_many(jobs, xn, n_rows);
    };
    if (batch.size() > 1 || kv_->dtype() != DType::kF32) {
        // Several sequences: project K and V of all rows at once (each weight read once per
        // step, which is what makes batched decode cheap), then store each sequence's rows
        // into its cache. (So also for one sequence when the cache holds f16 rows.)
        float* k_all = scratch_[kKeys].f32();
        float* v_all = scratch_[kValues].f32();
        project_qkv(k_all, v_all);
        if (c.qk_norm) {
            backend_.rms_norm(k_all, w.k_norm, n_rows * c.n_kv_heads, c.head_dim, eps, k_all);
        }
        backend_.rope(k_all, n_rows, c.n_kv_heads, c.head_dim, positions_.data(), rope_.inv_freq,
                      rope_.attention_scaling);
        const std::size_t kv_row_bytes = static_cast<std::size_t>(kv_dim) * sizeof(float);
        for (std::size_t i = 0; i < batch.size(); ++i) {
            const auto& e = batch[i];
            const std::size_t offset = static_cast<std::size_t>(row0[i]) * kv_row_bytes;
            kv_->write_rows(e.seq_id, local, 0, e.pos0, e.n_tokens, scratch_[kKeys], offset);
            kv_->write_rows(e.seq_id, local, 1, e.pos0, e.n_tokens, scratch_[kValues], offset);
        }
    } else {
        // One sequence, f32 cache: K and V go straight into its rows pos0 .. pos0 + n - 1.
        const auto& e = batch[0];
        float* k_new =
            static_cast<float*>(kv_->keys(e.seq_id, local)) + std::int64_t{e.pos0} * kv_dim;
        float* v_new =
            static_cast<float*>(kv_->values(e.seq_id, local)) + std::int64_t{e.pos0} * kv_dim;
        project_qkv(k_new, v_new);  // n_rows == e.n_tokens
        if (c.qk_norm) {
            backend_.rms_norm(k_new, w.k_norm, static_cast<std::int64_t>(e.n_tokens) * c.n_kv_heads,
                              c.head_dim, eps, k_new);
        }
        backend_.rope(k_new, e.n_tokens, c.n_kv_heads, c.head_dim, positions_.data(),
                      rope_.inv_freq, rope_.attention_scaling);
    }
    if (c.qk_norm) backend_.rms_norm(q, w.q_norm, n_rows * c.n_heads, c.head_dim, eps, q);
    backend_.rope(q, n_rows, c.n_heads, c.head_dim, positions_.data(), rope_.inv_freq,
                  rope_.attention_scaling);
    std::vector<AttentionArgs>& attention = attention_args_;
    attention.resize(batch.size());
    for (std::size_t i = 0; i < batch.size(); ++i) {
        const auto& e = batch[i];
        AttentionArgs& a = attention[i];
        a.q = q + row0[i] * q_dim;
        a.k = kv_->keys(e.seq_id, local);
        a.v = kv_->values(e.seq_id, local);
        a.kv_dtype = kv_->dtype();
        a.k_layout = kv_->key_layout();
        a.out = attn + row0[i] * q_dim;
        a.n_q = e.n_tokens;
        a.n_kv = static_cast<std::int64_t>(e.pos0) + e.n_tokens;
        a.n_heads = c.n_heads;
        a.n_kv_heads = c.n_kv_heads;
        a.head_dim = c.head_dim;
        a.q_pos0 = e.pos0;
        a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    }
    backend_.attention_many(attention);  // one parallel region for the whole batch
    // The residual adds are fused into o_proj and down_proj.
    backend_.matmul_add(w.wo, attn, n_rows, bias_or_null(w.bo), x, proj);

    // MLP block: x += down(silu(gate(h)) * up(h)), h = rms_norm(x).
    backend_.rms_norm(x, w.mlp_norm, n_rows, hidden, eps, xn);
    backend_.gated_mlp_up(w.w_gate, bias_or_null(w.b_gate), w.w_up, bias_or_null(w.b_up), xn,
                          n_rows, gate, up);
    backend_.matmul_add(w.w_down, gate, n_rows, bias_or_null(w.b_down), x, proj);
}

}  // namespace brigade::model
