#include "node/generation.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "mesh/bytes.hpp"
#include "model/logit_math.hpp"

namespace brigade::node {
namespace {

constexpr std::uint8_t kSetupVersion = 1;
constexpr std::uint8_t kFlagJson = 1u << 0;
constexpr std::uint8_t kFlagLogprobs = 1u << 1;
constexpr int kMaxTopLogprobs = 20;  // OpenAI's limit, checked by the HTTP layer too
constexpr float kMaxBias = 100.0f;

model::Error bad_setup(const std::string& what) {
    return model::Error{model::errc::invalid_argument, "generation setup: " + what};
}

}  // namespace

bool GenerationSetup::operator==(const GenerationSetup& o) const {
    const auto& a = sampling;
    const auto& b = o.sampling;
    const bool same_sampling = a.temperature == b.temperature && a.top_k == b.top_k &&
                               a.top_p == b.top_p && a.min_p == b.min_p &&
                               a.repetition_penalty == b.repetition_penalty &&
                               a.presence_penalty == b.presence_penalty &&
                               a.frequency_penalty == b.frequency_penalty && a.seed == b.seed;
    return same_sampling && logit_bias == o.logit_bias && json_object == o.json_object &&
           logprobs == o.logprobs && top_logprobs == o.top_logprobs && n_prompt == o.n_prompt &&
           max_new_tokens == o.max_new_tokens && context == o.context;
}

std::vector<std::uint8_t> encode_generation_setup(const GenerationSetup& setup) {
    mesh::Bytes out;
    out.reserve(64 + setup.logit_bias.size() * 8);
    mesh::ByteWriter w(out);
    w.u8(kSetupVersion);
    const auto& s = setup.sampling;
    w.f32(s.temperature);
    w.i32(s.top_k);
    w.f32(s.top_p);
    w.f32(s.min_p);
    w.f32(s.repetition_penalty);
    w.f32(s.presence_penalty);
    w.f32(s.frequency_penalty);
    w.u64(s.seed);
    w.u32(static_cast<std::uint32_t>(setup.logit_bias.size()));
    for (const auto& [id, bias] : setup.logit_bias) {
        w.i32(id);
        w.f32(bias);
    }
    std::uint8_t flags = 0;
    if (setup.json_object) flags |= kFlagJson;
    if (setup.logprobs) flags |= kFlagLogprobs;
    w.u8(flags);
    w.u8(static_cast<std::uint8_t>(std::clamp(setup.top_logprobs, 0, 255)));
    w.u64(static_cast<std::uint64_t>(setup.n_prompt));
    w.u64(static_cast<std::uint64_t>(setup.max_new_tokens));
    w.u64(static_cast<std::uint64_t>(setup.context));
    return out;
}

model::Result<GenerationSetup> decode_generation_setup(std::span<const std::uint8_t> bytes) {
    mesh::ByteReader r(bytes);
    const std::uint8_t version = r.u8();
    if (!r.ok()) return bad_setup("empty");
    if (version != kSetupVersion) {
        return bad_setup("unknown version " + std::to_string(version) + " (this node reads " +
                         std::to_string(kSetupVersion) + ")");
    }
    GenerationSetup g;
    auto& s = g.sampling;
    s.temperature = r.f32();
    s.top_k = r.i32();
    s.top_p = r.f32();
    s.min_p = r.f32();
    s.repetition_penalty = r.f32();
    s.presence_penalty = r.f32();
    s.frequency_penalty = r.f32();
    s.seed = r.u64();
    const std::uint32_t n_bias = r.u32();
    if (!r.ok()) return bad_setup("truncated sampling parameters");
    if (auto v = model::validate_sampling_params(s); !v) return bad_setup(v.error().message);
    // Checked against what is left before anything is allocated.
    if (n_bias > r.remaining() / 8) return bad_setup("truncated logit_bias");
    g.logit_bias.reserve(n_bias);
    for (std::uint32_t i = 0; i < n_bias; ++i) {
        const std::int32_t id = r.i32();
        const float bias = r.f32();
        if (id < 0) return bad_setup("logit_bias token id " + std::to_string(id) + " < 0");
        if (!(bias >= -kMaxBias && bias <= kMaxBias)) {
            return bad_setup("logit_bias value out of [-100, 100]");
        }
        g.logit_bias.emplace_back(id, bias);
    }
    const std::uint8_t flags = r.u8();
    const std::uint8_t top_logprobs = r.u8();
    g.n_prompt = static_cast<std::int64_t>(r.u64());
    g.max_new_tokens = static_cast<std::int64_t>(r.u64());
    g.context = static_cast<std::int64_t>(r.u64());
    if (!r.ok()) return bad_setup("truncated limits");
    if ((flags & ~(kFlagJson | kFlagLogprobs)) != 0) return bad_setup("unknown flags");
    g.json_object = (flags & kFlagJson) != 0;
    g.logprobs = (flags & kFlagLogprobs) != 0;
    g.top_logprobs = top_logprobs;
    if (g.top_logprobs > kMaxTopLogprobs) return bad_setup("top_logprobs above 20");
    if (g.context < 1) return bad_setup("context < 1");
    if (g.n_prompt < 1 || g.n_prompt > g.context) {
        return bad_setup("prompt length " + std::to_string(g.n_prompt) +
                         " not within [1, context " + std::to_string(g.context) + "]");
    }
    if (g.max_new_tokens < 0) return bad_setup("max_new_tokens < 0");
    if (r.remaining() != 0) return bad_setup(std::to_string(r.remaining()) + " trailing bytes");
    return g;
}

void TokenTexts::build() {
    std::call_once(built_, [this] {
        const auto n = static_cast<std::size_t>(tokenizer_.vocab_size());
        texts_.resize(n);
        plain_.resize(n);
        for (std::int32_t i = 0; i < tokenizer_.vocab_size(); ++i) {
            const std::int32_t one[] = {i};
            const auto at = static_cast<std::size_t>(i);
            texts_[at] = tokenizer_.decode(one, false);
            plain_[at] = !tokenizer_.is_special(i) &&
                         api::JsonPrefixValidator::string_text_accepted(texts_[at]);
        }
    });
}

const std::string& TokenTexts::text(std::int32_t id) {
    build();
    static const std::string kEmpty;
    if (id < 0 || static_cast<std::size_t>(id) >= texts_.size()) return kEmpty;
    return texts_[static_cast<std::size_t>(id)];
}

const std::vector<std::string>& TokenTexts::all() {
    build();
    return texts_;
}

const std::vector<bool>& TokenTexts::plain_string_texts() {
    build();
    return plain_;
}

TokenSampler::TokenSampler(std::uint64_t request_id, GenerationSetup setup,
                           const ModelFrontend& model, TokenTexts& texts)
    : request_id_(request_id), setup_(std::move(setup)), model_(model), texts_(texts) {
    if (setup_.json_object) json_.emplace();
    history_.reserve(static_cast<std::size_t>(
        std::min<std::int64_t>(setup_.n_prompt + setup_.max_new_tokens, setup_.context)));
}

std::int64_t TokenSampler::n_generated() const {
    return std::max<std::int64_t>(0, static_cast<std::int64_t>(history_.size()) - setup_.n_prompt);
}

bool TokenSampler::observe(std::int32_t pos0, std::span<const std::int32_t> ids) {
    if (pos0 < 0 || static_cast<std::size_t>(pos0) > history_.size()) return false;
    bool rewritten = false;
    for (std::size_t i = 0; i < ids.size(); ++i) {
        const auto pos = static_cast<std::size_t>(pos0) + i;
        if (pos < history_.size()) {
            if (history_[pos] == ids[i]) continue;
            // Another continuation than the one we know (a resumed request re-sending its
            // tokens): the new rows win.
            history_.resize(pos);
            rewritten = true;
        }
        history_.push_back(ids[i]);
        if (json_ && !rewritten && static_cast<std::int64_t>(pos) >= setup_.n_prompt) {
            json_->feed(texts_.text(ids[i]));
        }
    }
    if (rewritten) rebuild_json_state();
    return true;
}

void TokenSampler::rebuild_json_state() {
    if (!setup_.json_object) return;
    json_.emplace();
    for (std::size_t p = static_cast<std::size_t>(setup_.n_prompt); p < history_.size(); ++p) {
        json_->feed(texts_.text(history_[p]));
    }
}

std::vector<std::uint64_t> TokenSampler::json_mask_of_state(std::size_t n_tokens,
                                                            model::Backend* host) {
    // Inside a string most tokens are text without quotes or backslashes, whose acceptance is
    // known per token; the rest are fed to a copy of the state (assigned, so its stack's
    // storage is reused). A state not seen before took 0.5-4 ms at 150k tokens on one thread
    // (bench/RESULTS.md, session 5), so the vocabulary is split into the row's chunks on the
    // host's threads, each with its own copy; a chunk is a multiple of 256 tokens, so no two
    // chunks write the same 64-bit word of the mask.
    std::vector<std::uint64_t> allowed((n_tokens + 63) / 64, 0);
    const bool in_string = json_->in_plain_string();
    const std::vector<std::string>& texts = texts_.all();
    const std::vector<bool>& plain = texts_.plain_string_texts();
    // Ids past the tokenizer's vocabulary (padding rows of the logits) have no text: masked.
    const auto n_known = static_cast<std::int64_t>(std::min(n_tokens, texts.size()));
    json_probes_.resize(static_cast<std::size_t>(model::kMaxRowChunks + 1));
    const std::int64_t chunk = model::row_chunk(n_known);
    model::for_each_row_chunk(host, n_known, [&](std::int64_t begin, std::int64_t end) {
        api::JsonPrefixValidator& probe = json_probes_[static_cast<std::size_t>(begin / chunk)];
        for (auto id = static_cast<std::size_t>(begin); id < static_cast<std::size_t>(end); ++id) {
            bool ok = in_string && plain[id];
            if (!ok) {
                const std::string& t = texts[id];
                probe = *json_;
                ok = !t.empty() && !model_.tokenizer.is_special(static_cast<std::int32_t>(id)) &&
                     probe.feed(t);
            }
            if (ok) allowed[id / 64] |= std::uint64_t{1} << (id % 64);
        }
    });
    return allowed;
}

mesh::SampledTokenInfo TokenSampler::sample(std::span<const float> logits, model::Backend* host) {
    mesh::SampledTokenInfo out;
    out.request_id = request_id_;
    const std::int64_t n_gen = n_generated();
    const auto n_prompt = static_cast<std::size_t>(
        std::min<std::int64_t>(setup_.n_prompt, static_cast<std::int64_t>(history_.size())));
    if (finished_ || n_gen >= setup_.max_new_tokens ||
        static_cast<std::int64_t>(history_.size()) >= setup_.context) {
        finished_ = true;
        out.finish = mesh::TokenFinish::kLength;
        return out;
    }

    // The row as sampled: the logits themselves unless a bias or the JSON mask changes them
    // (a 150k-entry copy per token otherwise).
    std::span<const float> row = logits;
    constexpr float kMasked = -std::numeric_limits<float>::infinity();
    if (json_) {
        // Only tokens whose text keeps the output a valid JSON-object prefix; stop tokens never
        // (generation ends by itself once the object closes). Copied and masked in one pass, in
        // chunks on the host's threads; a bias added after leaves a masked (-inf) entry masked.
        constexpr std::size_t kMaxJsonMasks = 64;  // ~19 KB each at 150k tokens
        json_->state_key(json_key_);
        auto mask = json_masks_.find(json_key_);
        if (mask == json_masks_.end()) {
            if (json_masks_.size() >= kMaxJsonMasks) json_masks_.clear();
            mask = json_masks_.emplace(json_key_, json_mask_of_state(logits.size(), host)).first;
        }
        const std::vector<std::uint64_t>& allowed = mask->second;
        work_.resize(logits.size());
        const auto n = static_cast<std::int64_t>(logits.size());
        const std::int64_t chunk = model::row_chunk(n);
        std::array<bool, model::kMaxRowChunks + 1> any_in_chunk{};
        model::for_each_row_chunk(host, n, [&](std::int64_t begin, std::int64_t end) {
            bool any_here = false;
            for (auto id = static_cast<std::size_t>(begin); id < static_cast<std::size_t>(end);
                 ++id) {
                const float l = logits[id];
                const bool keep = l != kMasked && ((allowed[id / 64] >> (id % 64)) & 1u) != 0;
                work_[id] = keep ? l : kMasked;
                any_here = any_here || keep;
            }
            any_in_chunk[static_cast<std::size_t>(begin / chunk)] = any_here;
        });
        row = work_;
        for (const auto& [id, bias] : setup_.logit_bias) {
            if (static_cast<std::size_t>(id) < work_.size()) {
                work_[static_cast<std::size_t>(id)] += bias;
            }
        }
        const bool any =
            std::any_of(any_in_chunk.begin(), any_in_chunk.end(), [](bool a) { return a; });
        if (!any) {  // nothing can continue the object: end rather than emit invalid JSON
            finished_ = true;
            out.finish = mesh::TokenFinish::kStop;
            return out;
        }
    } else if (!setup_.logit_bias.empty()) {
        work_.assign(logits.begin(), logits.end());
        row = work_;
        for (const auto& [id, bias] : setup_.logit_bias) {
            if (static_cast<std::size_t>(id) < work_.size()) {
                work_[static_cast<std::size_t>(id)] += bias;
            }
        }
    }

    const std::span<const std::int32_t> all(history_);
    const model::TokenHistory history{all.first(n_prompt), all.subspan(n_prompt)};
    const auto sampled =
        sampler_.sample(row, setup_.sampling, history, static_cast<std::uint64_t>(n_gen), host);
    out.token = sampled.token;
    out.logprob = sampled.logprob;
    if (setup_.logprobs && setup_.top_logprobs > 0) {
        // The most likely tokens after penalties and temperature under the draw's normalizer,
        // so the chosen token's entry equals the logprob reported for it; ties by lower id.
        sampler_.most_likely(static_cast<std::size_t>(setup_.top_logprobs), top_);
        out.top.reserve(top_.size());
        for (const model::SampledToken& t : top_) out.top.push_back({t.token, t.logprob});
    }
    history_.push_back(out.token);

    const bool is_stop_id = std::find(model_.stop_ids.begin(), model_.stop_ids.end(), out.token) !=
                            model_.stop_ids.end();
    if (is_stop_id) {
        out.finish = mesh::TokenFinish::kStop;
    } else {
        if (json_) json_->feed(texts_.text(out.token));
        if (json_ && json_->is_complete()) {
            out.finish = mesh::TokenFinish::kStop;
        } else if (n_gen + 1 >= setup_.max_new_tokens ||
                   static_cast<std::int64_t>(history_.size()) >= setup_.context) {
            out.finish = mesh::TokenFinish::kLength;
        }
    }
    finished_ = out.finish != mesh::TokenFinish::kContinue;
    return out;
}

void sample_batch(model::Backend& backend, std::span<const SampleJob> jobs,
                  std::vector<mesh::SampledTokenInfo>& out) {
    out.resize(jobs.size());
    if (jobs.size() == 1) {
        out[0] = jobs[0].sampler->sample(jobs[0].logits, &backend);
        return;
    }
    model::for_each_host_task(backend, static_cast<std::int64_t>(jobs.size()), [&](std::int64_t i) {
        const SampleJob& job = jobs[static_cast<std::size_t>(i)];
        out[static_cast<std::size_t>(i)] = job.sampler->sample(job.logits);
    });
}

}  // namespace brigade::node
