#pragma once
// engine_bench's results: one case (a model in one format) with every measurement, the bounds
// they are compared with, and the tables and JSON it prints.

#include <string>
#include <vector>

namespace brigade::bench {

struct EngineResult {
    std::string model, format;
    double file_gb = 0, load_s = 0, first_s = 0, weight_bytes = 0, kv_bytes_per_pos = 0;
    std::vector<int> prompts;
    std::vector<double> pp_tps, pp_bound_tps;
    double tg1_tps = 0, tg1_bound_tps = 0;
    int tg1_context = 0;
    // Thread-pool fork-joins per decode step (CPU backend; 0 for backends without a pool).
    double tg1_dispatches = 0;
    // The decode loop a user runs (model::generate: engine step + sampling), tok/s, greedy and
    // at temperature 0.7 / top_p 0.9.
    double loop_greedy_tps = 0, loop_sampled_tps = 0;
    double loop_sampled_share = 0;  // sampled / greedy, median over the alternated rounds
    std::vector<int> batches;
    std::vector<double> tgb_tps, tgb_bound_tps, tgb_dispatches;
    std::vector<double> tgb_compute_s;  // per step, at the sgemm rate (the batch's compute bound)
    std::vector<int> contexts;
    std::vector<double> ctx_tps, ctx_bound_tps, ctx_explained_tps;
    std::vector<double> ctx_kv_bytes;  // KV bytes read per step at that context
    // --ab: the knob, and the one-sequence decode speed as configured (A) and with the knob
    // (B), from alternated steps.
    std::string ab;
    double ab_a_tps = 0, ab_b_tps = 0;
    // --ab: the same for each batch of `batches` (aggregate tok/s).
    std::vector<double> tgb_ab_a_tps, tgb_ab_b_tps;
    // --ab: the same for each prompt of `prompts` (prompt tok/s).
    std::vector<double> pp_ab_a_tps, pp_ab_b_tps;
    // --ab: the same for each context of `contexts` (one sequence's tok/s).
    std::vector<double> ctx_ab_a_tps, ctx_ab_b_tps;
};

// Fills in every bandwidth bound of a case from the read bandwidth (bytes/s). Bounds are set
// after all cases ran, from the highest bandwidth measured during the run: the lent machines'
// bandwidth moves by +-20% as neighbours come and go, and a bound from one low measurement made
// decode look faster than the bound (ratios over 100%).
void apply_bounds(EngineResult& r, double bw);
// The markdown tables of every case (`bw`: the bandwidth the bounds use, GB/s).
void print_tables(const std::vector<EngineResult>& results, double bw);
// The same as JSON into `path`, with the bandwidth measurements, the KV cache's type and the
// instruction set the kernels were held to (engine_bench --isa).
void write_json(const std::string& path, const std::vector<EngineResult>& results, double bw1,
                const std::vector<double>& bw_runs, double bwn, int n_threads,
                const std::string& kv_cache, const std::string& isa);

}  // namespace brigade::bench
