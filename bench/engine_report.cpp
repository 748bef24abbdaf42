#include "bench/engine_report.hpp"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

namespace brigade::bench {
namespace {

double pct(double v, double bound) { return bound > 0 ? 100.0 * v / bound : 0.0; }

}  // namespace

void apply_bounds(EngineResult& r, double bw) {
    r.tg1_bound_tps = bw / (r.weight_bytes + r.tg1_context * r.kv_bytes_per_pos);
    r.tgb_bound_tps.clear();
    for (std::size_t i = 0; i < r.batches.size(); ++i) {
        const double t_bound = std::max(r.weight_bytes / bw, r.tgb_compute_s[i]);
        r.tgb_bound_tps.push_back(r.batches[i] / t_bound);
    }
    r.ctx_bound_tps.clear();
    r.ctx_explained_tps.clear();
    for (std::size_t i = 0; i < r.contexts.size(); ++i) {
        const double kv_bytes = r.ctx_kv_bytes[i];
        r.ctx_bound_tps.push_back(bw / (r.weight_bytes + kv_bytes));
        const double extra = kv_bytes - r.tg1_context * r.kv_bytes_per_pos;
        r.ctx_explained_tps.push_back(1.0 / (1.0 / r.tg1_tps + extra / bw));
    }
}

void print_tables(const std::vector<EngineResult>& results, double bw) {
    std::printf(
        "\n| model | format | file GB | load s | weight MB/token | tg1 tok/s | bound "
        "tok/s (%.0f GB/s) | ratio | fork-joins/token |\n|---|---|---|---|---|---|---|---|---|\n",
        bw);
    for (const auto& r : results) {
        std::printf("| %s | %s | %.2f | %.3f | %.0f | %.2f | %.1f | %.0f%% | %.0f |\n",
                    r.model.c_str(), r.format.c_str(), r.file_gb, r.load_s, r.weight_bytes / 1e6,
                    r.tg1_tps, r.tg1_bound_tps, pct(r.tg1_tps, r.tg1_bound_tps), r.tg1_dispatches);
    }
    std::printf(
        "\n| model | format | engine step tok/s | decode loop, greedy tok/s | decode loop, "
        "temperature 0.7 top_p 0.9 tok/s | sampled / greedy |\n|---|---|---|---|---|---|\n");
    for (const auto& r : results) {
        std::printf("| %s | %s | %.2f | %.2f | %.2f | %.3f |\n", r.model.c_str(), r.format.c_str(),
                    r.tg1_tps, r.loop_greedy_tps, r.loop_sampled_tps, r.loop_sampled_share);
    }
    std::printf(
        "\n| model | format | batch | aggregate tok/s | speed-up over 1 | bound tok/s | "
        "ratio | fork-joins/step |\n|---|---|---|---|---|---|---|---|\n");
    for (const auto& r : results) {
        for (std::size_t i = 0; i < r.batches.size(); ++i) {
            std::printf("| %s | %s | %d | %.1f | %.2f | %.1f | %.0f%% | %.0f |\n", r.model.c_str(),
                        r.format.c_str(), r.batches[i], r.tgb_tps[i], r.tgb_tps[i] / r.tg1_tps,
                        r.tgb_bound_tps[i], pct(r.tgb_tps[i], r.tgb_bound_tps[i]),
                        r.tgb_dispatches[i]);
        }
    }
    std::printf(
        "\n| model | format | context | tok/s | bound tok/s | ratio | explained tok/s | "
        "ratio to explained |\n|---|---|---|---|---|---|---|---|\n");
    for (const auto& r : results) {
        for (std::size_t i = 0; i < r.contexts.size(); ++i) {
            std::printf("| %s | %s | %d | %.2f | %.1f | %.0f%% | %.2f | %.0f%% |\n",
                        r.model.c_str(), r.format.c_str(), r.contexts[i], r.ctx_tps[i],
                        r.ctx_bound_tps[i], pct(r.ctx_tps[i], r.ctx_bound_tps[i]),
                        r.ctx_explained_tps[i], pct(r.ctx_tps[i], r.ctx_explained_tps[i]));
        }
    }
    bool any_ab = false;
    for (const auto& r : results) any_ab = any_ab || !r.ab.empty();
    if (any_ab) {
        std::printf(
            "\n| model | format | knob (--ab) | A: as configured, tok/s | "
            "B: with the knob, tok/s | B / A |\n|---|---|---|---|---|---|\n");
        for (const auto& r : results) {
            if (r.ab.empty()) continue;
            std::printf("| %s | %s | %s | %.2f | %.2f | %.3f |\n", r.model.c_str(),
                        r.format.c_str(), r.ab.c_str(), r.ab_a_tps, r.ab_b_tps,
                        r.ab_b_tps / r.ab_a_tps);
            for (std::size_t i = 0; i < r.tgb_ab_a_tps.size(); ++i) {
                std::printf("| %s | %s x%d | %s | %.2f | %.2f | %.3f |\n", r.model.c_str(),
                            r.format.c_str(), r.batches[i], r.ab.c_str(), r.tgb_ab_a_tps[i],
                            r.tgb_ab_b_tps[i], r.tgb_ab_b_tps[i] / r.tgb_ab_a_tps[i]);
            }
            for (std::size_t i = 0; i < r.pp_ab_a_tps.size(); ++i) {
                std::printf("| %s | %s prompt %d | %s | %.2f | %.2f | %.3f |\n", r.model.c_str(),
                            r.format.c_str(), r.prompts[i], r.ab.c_str(), r.pp_ab_a_tps[i],
                            r.pp_ab_b_tps[i], r.pp_ab_b_tps[i] / r.pp_ab_a_tps[i]);
            }
            for (std::size_t i = 0; i < r.ctx_ab_a_tps.size(); ++i) {
                std::printf("| %s | %s context %d | %s | %.2f | %.2f | %.3f |\n", r.model.c_str(),
                            r.format.c_str(), r.contexts[i], r.ab.c_str(), r.ctx_ab_a_tps[i],
                            r.ctx_ab_b_tps[i], r.ctx_ab_b_tps[i] / r.ctx_ab_a_tps[i]);
            }
        }
    }
    std::printf(
        "\n| model | format | prompt | tok/s | sgemm-rate bound tok/s | ratio |\n"
        "|---|---|---|---|---|---|\n");
    for (const auto& r : results) {
        for (std::size_t i = 0; i < r.prompts.size(); ++i) {
            std::printf("| %s | %s | %d | %.1f | %.1f | %.0f%% |\n", r.model.c_str(),
                        r.format.c_str(), r.prompts[i], r.pp_tps[i], r.pp_bound_tps[i],
                        pct(r.pp_tps[i], r.pp_bound_tps[i]));
        }
    }
}

void write_json(const std::string& path, const std::vector<EngineResult>& results, double bw1,
                const std::vector<double>& bw_runs, double bwn, int n_threads,
                const std::string& kv_cache, const std::string& isa) {
    nlohmann::json j;
    j["read_bandwidth_gbs_1_thread"] = bw1;
    j["read_bandwidth_gbs"] = bwn;
    j["read_bandwidth_gbs_measurements"] = bw_runs;
    j["threads"] = n_threads;
    j["kv_cache"] = kv_cache;
    j["isa"] = isa;
    for (const auto& r : results) {
        nlohmann::json c = {{"model", r.model},
                            {"format", r.format},
                            {"file_gb", r.file_gb},
                            {"load_s", r.load_s},
                            {"first_run_s", r.first_s},
                            {"weight_bytes_per_token", r.weight_bytes},
                            {"kv_bytes_per_position", r.kv_bytes_per_pos},
                            {"decode",
                             {{"tok_s", r.tg1_tps},
                              {"bound_tok_s", r.tg1_bound_tps},
                              {"context", r.tg1_context},
                              {"fork_joins_per_token", r.tg1_dispatches}}},
                            {"decode_loop",
                             {{"greedy_tok_s", r.loop_greedy_tps},
                              {"temperature_0.7_top_p_0.9_tok_s", r.loop_sampled_tps},
                              {"sampled_over_greedy", r.loop_sampled_share}}}};
        for (std::size_t i = 0; i < r.prompts.size(); ++i) {
            c["prompt"].push_back({{"tokens", r.prompts[i]},
                                   {"tok_s", r.pp_tps[i]},
                                   {"bound_tok_s", r.pp_bound_tps[i]}});
        }
        for (std::size_t i = 0; i < r.batches.size(); ++i) {
            c["batched"].push_back({{"sequences", r.batches[i]},
                                    {"tok_s", r.tgb_tps[i]},
                                    {"bound_tok_s", r.tgb_bound_tps[i]},
                                    {"fork_joins_per_step", r.tgb_dispatches[i]}});
        }
        if (!r.ab.empty()) {
            c["ab"] = {{"knob", r.ab}, {"a_tok_s", r.ab_a_tps}, {"b_tok_s", r.ab_b_tps}};
            for (std::size_t i = 0; i < r.pp_ab_a_tps.size(); ++i) {
                c["ab"]["prompt"].push_back({{"tokens", r.prompts[i]},
                                             {"a_tok_s", r.pp_ab_a_tps[i]},
                                             {"b_tok_s", r.pp_ab_b_tps[i]}});
            }
            for (std::size_t i = 0; i < r.tgb_ab_a_tps.size(); ++i) {
                c["ab"]["batched"].push_back({{"sequences", r.batches[i]},
                                              {"a_tok_s", r.tgb_ab_a_tps[i]},
                                              {"b_tok_s", r.tgb_ab_b_tps[i]}});
            }
            for (std::size_t i = 0; i < r.ctx_ab_a_tps.size(); ++i) {
                c["ab"]["long_context"].push_back({{"context", r.contexts[i]},
                                                   {"a_tok_s", r.ctx_ab_a_tps[i]},
                                                   {"b_tok_s", r.ctx_ab_b_tps[i]}});
            }
        }
        for (std::size_t i = 0; i < r.contexts.size(); ++i) {
            c["long_context"].push_back({{"context", r.contexts[i]},
                                         {"tok_s", r.ctx_tps[i]},
                                         {"bound_tok_s", r.ctx_bound_tps[i]},
                                         {"explained_tok_s", r.ctx_explained_tps[i]}});
        }
        j["cases"].push_back(c);
    }
    std::ofstream(path) << j.dump(2) << "\n";
}

}  // namespace brigade::bench
