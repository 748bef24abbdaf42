// sampling_bench: time per token of picking the next token from a row of logits (issue 8: the
// decode loop), Sampler (the serving path) next to reference_sample_token (the plain
// implementation that sorts every candidate), in one run, at the vocabulary sizes of
// Qwen2.5 (151,936) and Llama 3 (128,256).
//
// Logits are synthetic, of two shapes: "peaked" (a normal bulk, sd 2.5, with a few tokens 6 to
// 14 above it, as a model sure of the next token gives) and "flat" (sd 1, no outliers: a
// high-entropy step). Every draw's token is checked against the reference. The Sampler is
// timed on this thread and with its whole-row passes in chunks on the CPU backend's pool (what a
// stage's tail does for one request alone), whose tokens must be the same.
//
// Then top_logprobs (5 after each draw): Sampler::most_likely against a partial sort of every
// id, which must give the same tokens and logprobs.
//
// Then a batch: 16 sequences' rows (as a stage's tail samples 16 concurrent requests), each
// with its own Sampler, one after another against all at once on the CPU backend's pool
// (Backend::run_host_tasks, what the tail does), ms per batch step.
//
//   sampling_bench [--tokens N] [--threads N] [--json FILE]

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "model/backend.hpp"
#include "model/logit_math.hpp"
#include "model/sampling.hpp"

namespace {

using brigade::model::SamplingParams;
using Clock = std::chrono::steady_clock;

std::vector<float> make_logits(std::size_t vocab, bool peaked, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> bulk(0.0f, peaked ? 2.5f : 1.0f);
    std::vector<float> v(vocab);
    for (auto& x : v) x = bulk(rng);
    if (peaked) {
        const float lifts[] = {14.0f, 10.0f, 9.0f, 8.0f, 7.0f, 6.0f};
        for (std::size_t i = 0; i < std::size(lifts); ++i) v[(i * 7919 + 101) % vocab] += lifts[i];
    }
    return v;
}

SamplingParams params(float t, int k, float top_p, float min_p, float rep) {
    SamplingParams p;
    p.temperature = t;
    p.top_k = k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.repetition_penalty = rep;
    p.seed = 42;
    return p;
}

}  // namespace

int main(int argc, char** argv) {
    int n_tokens = 40;
    int n_threads = 0;  // the CPU backend's pool: 0 = all hardware threads
    std::string json_path;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--tokens" && i + 1 < argc) {
            n_tokens = std::atoi(argv[++i]);
        } else if (a == "--threads" && i + 1 < argc) {
            n_threads = std::atoi(argv[++i]);
        } else if (a == "--json" && i + 1 < argc) {
            json_path = argv[++i];
        } else {
            std::fprintf(stderr,
                         "usage: sampling_bench [--tokens N] [--threads N] [--json FILE]\n");
            return 2;
        }
    }
    const std::pair<const char*, SamplingParams> settings[] = {
        {"greedy", params(0.0f, 0, 1.0f, 0.0f, 1.0f)},
        {"temperature 1", params(1.0f, 0, 1.0f, 0.0f, 1.0f)},
        {"temperature 0.7, top_p 0.9", params(0.7f, 0, 0.9f, 0.0f, 1.0f)},
        {"temperature 0.8, top_k 40", params(0.8f, 40, 1.0f, 0.0f, 1.0f)},
        {"temperature 1, min_p 0.05", params(1.0f, 0, 1.0f, 0.05f, 1.0f)},
        {"temperature 0.7, repetition_penalty 1.1", params(0.7f, 0, 1.0f, 0.0f, 1.1f)},
    };
    std::vector<std::int32_t> prompt(200);
    for (std::size_t i = 0; i < prompt.size(); ++i) {
        prompt[i] = static_cast<std::int32_t>((i * 131) % 5000);
    }
    brigade::model::BackendOptions options;
    options.n_threads = n_threads;
    auto backend = brigade::model::make_backend(brigade::model::BackendKind::kCpu, options);
    if (!backend) {
        std::fprintf(stderr, "backend: %s\n", backend.error().message.c_str());
        return 1;
    }
    brigade::model::Backend* pool = backend->get();
    nlohmann::json out = nlohmann::json::array();
    std::printf(
        "| vocab | logits | setting | reference ms/token | Sampler ms/token | speed-up | Sampler "
        "on the pool ms/token | pool / one thread |\n"
        "|---|---|---|---|---|---|---|---|\n");
    int mismatches = 0;
    for (const std::size_t vocab : {std::size_t{151936}, std::size_t{128256}}) {
        for (const bool peaked : {true, false}) {
            const auto logits = make_logits(vocab, peaked, 7);
            for (const auto& [name, p] : settings) {
                brigade::model::Sampler sampler, pooled;
                std::vector<std::int32_t> want, got, got_pooled;
                const brigade::model::TokenHistory history{prompt, {}};
                auto t0 = Clock::now();
                for (int t = 0; t < n_tokens; ++t) {
                    want.push_back(brigade::model::reference_sample_token(
                                       logits, p, history, static_cast<std::uint64_t>(t))
                                       .token);
                }
                const double ref_ms =
                    std::chrono::duration<double>(Clock::now() - t0).count() * 1e3 / n_tokens;
                t0 = Clock::now();
                for (int t = 0; t < n_tokens; ++t) {
                    got.push_back(
                        sampler.sample(logits, p, history, static_cast<std::uint64_t>(t)).token);
                }
                const double fast_ms =
                    std::chrono::duration<double>(Clock::now() - t0).count() * 1e3 / n_tokens;
                t0 = Clock::now();
                for (int t = 0; t < n_tokens; ++t) {
                    got_pooled.push_back(
                        pooled.sample(logits, p, history, static_cast<std::uint64_t>(t), pool)
                            .token);
                }
                const double pool_ms =
                    std::chrono::duration<double>(Clock::now() - t0).count() * 1e3 / n_tokens;
                if (got != want || got_pooled != want) ++mismatches;
                std::printf("| %zu | %s | %s | %.3f | %.3f | %.1fx | %.3f | %.2f |\n", vocab,
                            peaked ? "peaked" : "flat", name, ref_ms, fast_ms, ref_ms / fast_ms,
                            pool_ms, pool_ms / fast_ms);
                out.push_back({{"vocab", vocab},
                               {"logits", peaked ? "peaked" : "flat"},
                               {"setting", name},
                               {"reference_ms", ref_ms},
                               {"sampler_ms", fast_ms},
                               {"sampler_pool_ms", pool_ms},
                               {"same_tokens", got == want && got_pooled == want}});
            }
        }
    }
    std::printf("\n%d setting(s) where the tokens differed from the reference\n", mismatches);

    // top_logprobs (5, after the draw): Sampler::most_likely against the plain way, the
    // processed row's normalizer and a partial sort of every id (what the tail did before).
    std::printf(
        "\n| vocab | top_logprobs | partial sort of every id, ms/token | Sampler::most_likely, "
        "ms/token | speed-up |\n|---|---|---|---|---|\n");
    int top_mismatches = 0;
    for (const std::size_t vocab : {std::size_t{151936}, std::size_t{128256}}) {
        const auto logits = make_logits(vocab, true, 7);
        const SamplingParams p = params(0.7f, 0, 0.9f, 0.0f, 1.0f);
        constexpr std::size_t kTop = 5;
        brigade::model::Sampler sampler;
        std::vector<brigade::model::SampledToken> top;
        std::vector<std::int32_t> order(vocab);
        double sorted_ms = 0.0, fast_ms = 0.0;
        for (int t = 0; t < n_tokens; ++t) {
            sampler.sample(logits, p, {}, static_cast<std::uint64_t>(t));
            auto t0 = Clock::now();
            const auto processed = brigade::model::process_logits(logits, p, {});
            const auto stats = brigade::model::logit_stats(processed);
            const double log_z = static_cast<double>(stats.max) + std::log(stats.sum_exp);
            std::iota(order.begin(), order.end(), 0);
            std::partial_sort(order.begin(), order.begin() + kTop, order.end(),
                              [&](std::int32_t a, std::int32_t b) {
                                  const float la = processed[static_cast<std::size_t>(a)];
                                  const float lb = processed[static_cast<std::size_t>(b)];
                                  return la != lb ? la > lb : a < b;
                              });
            sorted_ms += std::chrono::duration<double>(Clock::now() - t0).count() * 1e3;
            t0 = Clock::now();
            sampler.most_likely(kTop, top);
            fast_ms += std::chrono::duration<double>(Clock::now() - t0).count() * 1e3;
            for (std::size_t i = 0; i < kTop; ++i) {
                const double logit = processed[static_cast<std::size_t>(order[i])];
                if (top[i].token != order[i] ||
                    top[i].logprob != static_cast<float>(logit - log_z)) {
                    ++top_mismatches;
                }
            }
        }
        sorted_ms /= n_tokens;
        fast_ms /= n_tokens;
        std::printf("| %zu | %zu | %.3f | %.4f | %.0fx |\n", vocab, kTop, sorted_ms, fast_ms,
                    sorted_ms / fast_ms);
        out.push_back({{"vocab", vocab},
                       {"top_logprobs", kTop},
                       {"sorted_ms", sorted_ms},
                       {"most_likely_ms", fast_ms}});
    }
    std::printf("%d top_logprobs entries that differed from the partial sort\n", top_mismatches);

    // A batch of 16 rows, one Sampler each, at temperature 0.7 / top_p 0.9.
    constexpr int kBatch = 16;
    int batch_mismatches = 0;  // steps where the pool's tokens differ from one after another
    const SamplingParams p = params(0.7f, 0, 0.9f, 0.0f, 1.0f);
    std::printf(
        "\n| vocab | logits | batch | one after another, ms/step | on the pool, ms/step | "
        "speed-up |\n|---|---|---|---|---|---|\n");
    for (const bool peaked : {true, false}) {
        const std::size_t vocab = 151936;
        std::vector<std::vector<float>> rows;
        for (int b = 0; b < kBatch; ++b) rows.push_back(make_logits(vocab, peaked, 100 + b));
        std::vector<brigade::model::Sampler> samplers(kBatch);
        std::vector<std::int32_t> serial_tokens(kBatch), pool_tokens(kBatch);
        double ms[2] = {0.0, 0.0};
        for (int t = 0; t < n_tokens; ++t) {
            for (int turn = 0; turn < 2; ++turn) {
                const int v = (turn + t) % 2;  // which goes first alternates: neither always
                                               // finds the rows cached by the other
                auto& tokens = v == 0 ? serial_tokens : pool_tokens;
                auto one = [&](std::int64_t b) {
                    const auto i = static_cast<std::size_t>(b);
                    tokens[i] =
                        samplers[i].sample(rows[i], p, {}, static_cast<std::uint64_t>(t)).token;
                };
                const auto t0 = Clock::now();
                if (v == 0) {
                    for (int b = 0; b < kBatch; ++b) one(b);
                } else {
                    brigade::model::for_each_host_task(**backend, kBatch, one);
                }
                ms[v] += std::chrono::duration<double>(Clock::now() - t0).count() * 1e3;
            }
            if (serial_tokens != pool_tokens) ++batch_mismatches;
        }
        const double serial_ms = ms[0] / n_tokens, pool_ms = ms[1] / n_tokens;
        std::printf("| %zu | %s | %d | %.3f | %.3f | %.1fx |\n", vocab, peaked ? "peaked" : "flat",
                    kBatch, serial_ms, pool_ms, serial_ms / pool_ms);
        out.push_back({{"vocab", vocab},
                       {"logits", peaked ? "peaked" : "flat"},
                       {"batch", kBatch},
                       {"one_after_another_ms", serial_ms},
                       {"pool_ms", pool_ms}});
    }
    std::printf("(backend %s, %d threads)\n", std::string((*backend)->name()).c_str(),
                n_threads > 0 ? n_threads : static_cast<int>(std::thread::hardware_concurrency()));
    if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
    std::printf("%d batch step(s) where the pool's tokens differed from one after another\n",
                batch_mismatches);
    return mismatches == 0 && batch_mismatches == 0 && top_mismatches == 0 ? 0 : 1;
}
