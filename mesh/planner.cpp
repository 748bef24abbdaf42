#include "mesh/planner.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>

namespace brigade::mesh {
namespace {

// A node's KV bytes per token and layer above this are refused: real models need at most a few
// hundred KiB (f32, 128 KV heads of 256), and the products with context and streams must not
// overflow.
constexpr std::uint64_t kMaxKvBytesPerTokenPerLayer = std::uint64_t{16} << 20;

// Every subset is tried up to this many nodes (2^8 subsets); beyond it, rank prefixes.
constexpr std::size_t kExhaustiveNodes = 8;

struct Context {
    const PlanRequest& req;
    std::vector<std::uint64_t> prefix;  // [n_layers + 1] cumulative layer bytes
    std::uint64_t kv_tokens = 0;        // KV positions a layer holds: context x streams
    double lm_head_layers = 0;          // the tail's lm_head matmul, in average-layer units
};

// The lm_head (or the tied embedding used as one) is a matmul over the whole vocabulary: for
// small models it costs as much as several layers, so the tail is charged for it.
double tail_extra_s(const Context& c, const NodeCapacity& node) {
    return c.lm_head_layers * node.seconds_per_layer;
}

void init_lm_head_cost(Context& c) {
    const model::ModelShape& s = c.req.shape;
    const std::uint64_t lm_bytes =
        s.lm_head_bytes > 0 ? s.lm_head_bytes : (c.req.tied_embeddings ? s.embedding_bytes : 0);
    const double avg_layer = static_cast<double>(c.prefix[s.n_layers]) / s.n_layers;
    c.lm_head_layers = avg_layer > 0 ? static_cast<double>(lm_bytes) / avg_layer : 0;
}

// KV bytes one layer holds for all streams on `node` (nullptr: the model shape's element type).
std::uint64_t kv_per_layer(const Context& c, const NodeCapacity* node) {
    const std::uint64_t per_token = node != nullptr && node->kv_bytes_per_token_per_layer > 0
                                        ? node->kv_bytes_per_token_per_layer
                                        : c.req.shape.kv_bytes_per_token_per_layer;
    return per_token * c.kv_tokens;
}

std::uint64_t range_bytes(const Context& c, const NodeCapacity* node, int first, int last,
                          bool is_head, bool is_tail) {
    const PlanRequest& r = c.req;
    std::uint64_t bytes = c.prefix[last] - c.prefix[first] +
                          kv_per_layer(c, node) * static_cast<std::uint64_t>(last - first);
    if (is_head) bytes += r.shape.embedding_bytes;
    if (is_tail) {
        bytes += r.shape.lm_head_bytes;
        if (r.tied_embeddings && !is_head) bytes += r.shape.embedding_bytes;
    }
    return bytes;
}

struct Candidate {
    std::vector<PlannedStage> stages;
    double aggregate = 0;
    double single = 0;
    double stream = 0;
    double hop_s = 0;
    double max_step_s = 0;  // the slowest stage's t_i(1)
};

double link_rtt(const PlanRequest& r, const NodeId& a, const NodeId& b, double* bandwidth) {
    for (const LinkCost& l : r.links) {
        if ((l.a == a && l.b == b) || (l.a == b && l.b == a)) {
            *bandwidth = l.bandwidth_bytes_per_s > 0 ? l.bandwidth_bytes_per_s
                                                     : r.default_bandwidth_bytes_per_s;
            return l.rtt_s;
        }
    }
    *bandwidth = r.default_bandwidth_bytes_per_s;
    return r.default_rtt_s;
}

// Hop time per step for micro-batches of `b` tokens: activations forward, token back.
double hops_s(const PlanRequest& r, const std::vector<PlannedStage>& stages, int b) {
    if (stages.size() < 2) return 0;
    double total = 0;
    const double bytes = static_cast<double>(b) * r.shape.hidden_size * r.activation_bytes;
    for (std::size_t i = 0; i + 1 < stages.size(); ++i) {
        double bw = 0;
        const double rtt = link_rtt(r, stages[i].node, stages[i + 1].node, &bw);
        total += rtt / 2 + bytes / bw;
    }
    double bw = 0;
    total += link_rtt(r, stages.back().node, stages.front().node, &bw) / 2;
    return total;
}

void score(const PlanRequest& r, Candidate& c) {
    const int k = static_cast<int>(c.stages.size());
    const int streams = std::max(1, r.expected_concurrency);
    const int m = std::min(k, streams);
    const int b = (streams + m - 1) / m;
    const double f = 1 + r.batch_token_cost * (b - 1);
    double sum_b = 0;
    double max_b = 0;
    double sum_1 = 0;
    for (const PlannedStage& s : c.stages) {
        sum_b += s.step_s * f;
        max_b = std::max(max_b, s.step_s * f);
        sum_1 += s.step_s;
    }
    const double cycle = sum_b + hops_s(r, c.stages, b);
    const double period = std::max(cycle, m * max_b);
    c.hop_s = hops_s(r, c.stages, 1);
    c.max_step_s = max_b / f;
    c.single = 1 / (sum_1 + c.hop_s);
    c.stream = 1 / period;
    c.aggregate = streams / period;
}

// True when `a` is a strictly better candidate than `b` (deterministic tie-breaking).
bool better(const Candidate& a, const Candidate& b) {
    constexpr double kEps = 1e-12;
    if (a.aggregate > b.aggregate * (1 + kEps)) return true;
    if (b.aggregate > a.aggregate * (1 + kEps)) return false;
    if (a.single > b.single * (1 + kEps)) return true;
    if (b.single > a.single * (1 + kEps)) return false;
    // Equal predictions: prefer the balanced layout, which degrades least if the load grows.
    if (a.max_step_s < b.max_step_s * (1 - kEps)) return true;
    if (b.max_step_s < a.max_step_s * (1 - kEps)) return false;
    for (std::size_t i = 0; i < std::min(a.stages.size(), b.stages.size()); ++i) {
        if (a.stages[i].node != b.stages[i].node) return a.stages[i].node < b.stages[i].node;
        if (a.stages[i].layers.last != b.stages[i].layers.last) {
            return a.stages[i].layers.last > b.stages[i].layers.last;
        }
    }
    return false;
}

// Best layout of the layers over `order` (all of them used, in this order), or none.
std::optional<Candidate> best_for_subset(const Context& c,
                                         const std::vector<const NodeCapacity*>& order) {
    const PlanRequest& r = c.req;
    const int n_layers = r.shape.n_layers;
    const int k = static_cast<int>(order.size());
    if (k > n_layers) return std::nullopt;
    const int streams = std::max(1, r.expected_concurrency);
    const int m = std::min(k, streams);
    const int b = (streams + m - 1) / m;
    const double f = 1 + r.batch_token_cost * (b - 1);

    // Candidate bounds on a stage's time: every n * s_i * f, plus "unbounded".
    std::vector<double> taus;
    taus.reserve(static_cast<std::size_t>(k) * n_layers + 1);
    for (const NodeCapacity* node : order) {
        for (int n = 1; n <= n_layers; ++n) taus.push_back(n * node->seconds_per_layer * f);
    }
    for (int n = 1; n <= n_layers; ++n) {
        taus.push_back((n * order.back()->seconds_per_layer + tail_extra_s(c, *order.back())) * f);
    }
    std::sort(taus.begin(), taus.end());
    taus.erase(std::unique(taus.begin(), taus.end()), taus.end());
    taus.push_back(std::numeric_limits<double>::infinity());

    std::optional<Candidate> best;
    // Memory caps per position (head/middle/tail extras), independent of where the range starts:
    // every layer is charged like the largest one, which is exact for uniform layers and safe
    // otherwise (the exact contiguous ranges are checked again below).
    const std::uint64_t max_layer =
        *std::max_element(r.shape.layer_bytes.begin(), r.shape.layer_bytes.end());
    std::vector<int> memory_cap(k);
    for (int j = 0; j < k; ++j) {
        std::uint64_t fixed = 0;
        if (j == 0) fixed += r.shape.embedding_bytes;
        if (j == k - 1) {
            fixed += r.shape.lm_head_bytes;
            if (r.tied_embeddings && j != 0) fixed += r.shape.embedding_bytes;
        }
        const std::uint64_t per_layer = max_layer + kv_per_layer(c, order[j]);
        const std::uint64_t mem = order[j]->memory_bytes;
        memory_cap[j] =
            mem < fixed ? 0
            : per_layer == 0
                ? n_layers
                : static_cast<int>(std::min<std::uint64_t>((mem - fixed) / per_layer, n_layers));
    }
    // Stages by speed, fastest first, for handing out layers beyond the first of each.
    std::vector<int> by_speed(k);
    for (int j = 0; j < k; ++j) by_speed[j] = j;
    std::stable_sort(by_speed.begin(), by_speed.end(), [&](int a, int b) {
        return order[a]->seconds_per_layer < order[b]->seconds_per_layer;
    });

    std::vector<int> counts(k);
    for (double tau : taus) {
        // For this bound on every stage's time, the layout with the least total time: each stage
        // one layer, then the rest to the fastest stages up to their caps.
        bool ok = true;
        std::vector<int> cap(k);
        for (int j = 0; j < k && ok; ++j) {
            cap[j] = memory_cap[j];
            if (std::isfinite(tau)) {
                const double extra = j == k - 1 ? tail_extra_s(c, *order[j]) * f : 0;
                const double by_time = std::max(
                    0.0, std::floor((tau - extra) / (order[j]->seconds_per_layer * f) + 1e-9));
                cap[j] =
                    std::min<int>(cap[j], static_cast<int>(std::min<double>(by_time, n_layers)));
            }
            if (cap[j] < 1) ok = false;
            counts[j] = 1;
        }
        if (!ok) continue;
        int left = n_layers - k;
        for (int j : by_speed) {
            const int add = std::min(left, cap[j] - 1);
            counts[j] += add;
            left -= add;
        }
        if (left > 0) continue;
        int start = 0;
        for (int j = 0; j < k && ok; ++j) {  // exact check of the contiguous ranges
            if (range_bytes(c, order[j], start, start + counts[j], j == 0, j == k - 1) >
                order[j]->memory_bytes)
                ok = false;
            start += counts[j];
        }
        if (!ok || start != n_layers) continue;
        Candidate cand;
        start = 0;
        for (int j = 0; j < k; ++j) {
            PlannedStage s;
            s.node = order[j]->id;
            s.layers = {start, start + counts[j]};
            s.memory_bytes = range_bytes(c, order[j], start, start + counts[j], j == 0, j == k - 1);
            s.step_s = counts[j] * order[j]->seconds_per_layer +
                       (j == k - 1 ? tail_extra_s(c, *order[j]) : 0);
            s.tok_s = 1 / s.step_s;
            cand.stages.push_back(s);
            start += counts[j];
        }
        score(r, cand);
        if (!best || better(cand, *best)) best = std::move(cand);
    }
    return best;
}

std::string fmt(double v, int precision = 2) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", precision, v);
    return buf;
}

std::string describe(const Candidate& c) {
    std::string s;
    for (std::size_t i = 0; i < c.stages.size(); ++i) {
        const PlannedStage& st = c.stages[i];
        if (i) s += " -> ";
        s += st.node.short_string() + "[" + std::to_string(st.layers.first) + "," +
             std::to_string(st.layers.last) + ")";
    }
    return s + ": " + fmt(c.aggregate) + " tok/s aggregate, " + fmt(c.single) +
           " tok/s single stream";
}

Result<void> validate(const PlanRequest& r) {
    const model::ModelShape& s = r.shape;
    if (s.n_layers <= 0) return make_error(errc::invalid_argument, "model has no layers");
    if (s.layer_bytes.size() != static_cast<std::size_t>(s.n_layers)) {
        return make_error(errc::invalid_argument,
                          "layer_bytes has " + std::to_string(s.layer_bytes.size()) +
                              " entries for " + std::to_string(s.n_layers) + " layers");
    }
    if (r.nodes.empty()) return make_error(errc::no_fit, "no nodes to place the model on");
    if (r.expected_concurrency < 1 || r.context_tokens < 1) {
        return make_error(errc::invalid_argument, "concurrency and context must be positive");
    }
    std::set<NodeId> seen;
    for (const NodeCapacity& n : r.nodes) {
        if (!(n.seconds_per_layer > 0) || !std::isfinite(n.seconds_per_layer)) {
            return make_error(errc::invalid_argument,
                              "node " + n.id.short_string() + " has no measured speed");
        }
        if (n.kv_bytes_per_token_per_layer > kMaxKvBytesPerTokenPerLayer) {
            return make_error(errc::invalid_argument,
                              "node " + n.id.short_string() + " reports " +
                                  std::to_string(n.kv_bytes_per_token_per_layer) +
                                  " KV bytes per token and layer");
        }
        if (!seen.insert(n.id).second) {
            return make_error(errc::invalid_argument,
                              "node " + n.id.short_string() + " listed twice");
        }
    }
    if (!(r.default_bandwidth_bytes_per_s > 0) || r.batch_token_cost < 0) {
        return make_error(errc::invalid_argument, "bad link or batching defaults");
    }
    return {};
}

}  // namespace

std::uint64_t stage_memory_bytes(const PlanRequest& request, model::LayerRange layers, bool is_head,
                                 bool is_tail) {
    Context c{request, {}, 0};
    c.prefix.resize(request.shape.n_layers + 1);
    for (int i = 0; i < request.shape.n_layers; ++i) {
        c.prefix[i + 1] = c.prefix[i] + request.shape.layer_bytes[i];
    }
    c.kv_tokens = static_cast<std::uint64_t>(request.context_tokens) *
                  static_cast<std::uint64_t>(std::max(1, request.expected_concurrency));
    return range_bytes(c, nullptr, layers.first, layers.last, is_head, is_tail);
}

std::uint64_t pipeline_kv_positions(const PlanRequest& request,
                                    std::span<const PlannedStage> stages) {
    if (stages.empty()) return 0;
    PlanRequest weights_only = request;
    weights_only.context_tokens = 0;
    std::uint64_t fewest = std::numeric_limits<std::uint64_t>::max();
    for (std::size_t i = 0; i < stages.size(); ++i) {
        const PlannedStage& s = stages[i];
        const auto node = std::find_if(request.nodes.begin(), request.nodes.end(),
                                       [&](const NodeCapacity& n) { return n.id == s.node; });
        if (node == request.nodes.end() || node->memory_bytes == 0 || s.layers.empty()) return 0;
        const std::uint64_t weights =
            stage_memory_bytes(weights_only, s.layers, i == 0, i + 1 == stages.size());
        const std::uint64_t per_layer = node->kv_bytes_per_token_per_layer > 0
                                            ? node->kv_bytes_per_token_per_layer
                                            : request.shape.kv_bytes_per_token_per_layer;
        const std::uint64_t per_position =
            per_layer * static_cast<std::uint64_t>(s.layers.last - s.layers.first);
        if (per_position == 0) return 0;
        const std::uint64_t room = node->memory_bytes > weights ? node->memory_bytes - weights : 0;
        fewest = std::min(fewest, room / per_position);
    }
    return std::max<std::uint64_t>(fewest, 1);  // 0 would read as "no bound"
}

double median_measured_rtt_s(const std::vector<LinkCost>& links, double fallback_s) {
    std::vector<double> measured;
    for (const LinkCost& l : links) {
        if (l.rtt_s > 0 && std::isfinite(l.rtt_s)) measured.push_back(l.rtt_s);
    }
    if (measured.empty()) return fallback_s;
    const auto mid = measured.begin() + static_cast<std::ptrdiff_t>(measured.size() / 2);
    std::nth_element(measured.begin(), mid, measured.end());
    return *mid;
}

Result<Plan> make_plan(const PlanRequest& req) {
    if (auto v = validate(req); !v) return v.error();
    const int n_layers = req.shape.n_layers;
    Context c{req, std::vector<std::uint64_t>(n_layers + 1), 0};
    for (int i = 0; i < n_layers; ++i) c.prefix[i + 1] = c.prefix[i] + req.shape.layer_bytes[i];
    init_lm_head_cost(c);
    c.kv_tokens = static_cast<std::uint64_t>(req.context_tokens) *
                  static_cast<std::uint64_t>(req.expected_concurrency);

    std::vector<const NodeCapacity*> ranked;
    for (const NodeCapacity& n : req.nodes) ranked.push_back(&n);
    std::sort(ranked.begin(), ranked.end(), [](const NodeCapacity* a, const NodeCapacity* b) {
        if (a->seconds_per_layer != b->seconds_per_layer) {
            return a->seconds_per_layer < b->seconds_per_layer;
        }
        return a->id < b->id;
    });
    const std::size_t n_nodes = ranked.size();

    // Subsets as bit masks over `ranked` (rank order is kept inside each subset).
    std::vector<std::vector<const NodeCapacity*>> subsets;
    if (n_nodes <= kExhaustiveNodes) {
        for (std::uint32_t mask = 1; mask < (1u << n_nodes); ++mask) {
            std::vector<const NodeCapacity*> s;
            for (std::size_t i = 0; i < n_nodes; ++i)
                if (mask & (1u << i)) s.push_back(ranked[i]);
            subsets.push_back(std::move(s));
        }
    } else {
        std::vector<std::size_t> by_memory(n_nodes);
        for (std::size_t i = 0; i < n_nodes; ++i) by_memory[i] = i;
        std::stable_sort(by_memory.begin(), by_memory.end(), [&](std::size_t a, std::size_t b) {
            return ranked[a]->memory_bytes > ranked[b]->memory_bytes;
        });
        std::set<std::vector<std::size_t>> seen;
        for (std::size_t k = 1; k <= n_nodes; ++k) {
            std::vector<std::size_t> speed_prefix(k);
            for (std::size_t i = 0; i < k; ++i) speed_prefix[i] = i;
            std::vector<std::size_t> mem_prefix(by_memory.begin(), by_memory.begin() + k);
            std::sort(mem_prefix.begin(), mem_prefix.end());
            for (const auto& idx : {speed_prefix, mem_prefix}) {
                if (!seen.insert(idx).second) continue;
                std::vector<const NodeCapacity*> s;
                for (std::size_t i : idx) s.push_back(ranked[i]);
                subsets.push_back(std::move(s));
            }
        }
    }

    // Each subset in rank order (fastest node at the head), and with its fastest node moved to the
    // tail, which also runs the lm_head.
    std::vector<std::vector<const NodeCapacity*>> orders;
    for (const auto& subset : subsets) {
        orders.push_back(subset);
        if (subset.size() >= 2) {
            std::vector<const NodeCapacity*> fastest_last(subset.begin() + 1, subset.end());
            fastest_last.push_back(subset.front());
            orders.push_back(std::move(fastest_last));
        }
    }
    std::map<std::size_t, Candidate> best_by_k;
    for (const auto& subset : orders) {
        auto cand = best_for_subset(c, subset);
        if (!cand) continue;
        auto it = best_by_k.find(subset.size());
        if (it == best_by_k.end()) {
            best_by_k.emplace(subset.size(), std::move(*cand));
        } else if (better(*cand, it->second)) {
            it->second = std::move(*cand);
        }
    }

    const std::uint64_t weights =
        c.prefix[n_layers] + req.shape.embedding_bytes + req.shape.lm_head_bytes;
    const std::uint64_t kv = kv_per_layer(c, nullptr) * static_cast<std::uint64_t>(n_layers);
    std::string needs = "model needs " + format_size(weights) + " of weights + " + format_size(kv) +
                        " of KV (" + std::to_string(req.context_tokens) + " tokens x " +
                        std::to_string(req.expected_concurrency) + " streams)";
    if (best_by_k.empty()) {
        std::uint64_t offered = 0;
        std::string per_node;
        for (const NodeCapacity* n : ranked) {
            offered += n->memory_bytes;
            per_node += (per_node.empty() ? "" : ", ") + n->id.short_string() + " " +
                        format_size(n->memory_bytes);
        }
        return make_error(errc::no_fit, needs + "; the " + std::to_string(n_nodes) +
                                            " node(s) offer " + format_size(offered) + " (" +
                                            per_node + ") and no layout fits");
    }

    std::string explanation = needs + "\n";
    const Candidate* chosen = nullptr;
    for (const auto& [k, cand] : best_by_k) {
        explanation += std::to_string(k) + " stage(s): " + describe(cand);
        if (chosen == nullptr) {
            chosen = &cand;
            explanation += "  <- fewest stages that fit\n";
        } else if (cand.aggregate > chosen->aggregate * (1 + req.min_gain_per_extra_stage)) {
            chosen = &cand;
            explanation += "  <- more stages raise throughput by more than " +
                           fmt(100 * req.min_gain_per_extra_stage, 0) + "%\n";
        } else {
            explanation += "  (not better enough)\n";
        }
    }
    Plan plan;
    plan.stages = chosen->stages;
    plan.single_stream_tok_s = chosen->single;
    plan.stream_tok_s = chosen->stream;
    plan.aggregate_tok_s = chosen->aggregate;
    plan.hop_s = chosen->hop_s;
    plan.explanation = std::move(explanation);
    return plan;
}

Result<std::uint64_t> parse_size(std::string_view text) {
    const std::string original(text);
    while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
    while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
    std::size_t i = 0;
    bool seen_digit = false;
    bool seen_dot = false;
    while (i < text.size() && ((text[i] >= '0' && text[i] <= '9') || text[i] == '.')) {
        if (text[i] == '.') {
            if (seen_dot) break;
            seen_dot = true;
        } else {
            seen_digit = true;
        }
        ++i;
    }
    if (!seen_digit) {
        return make_error(errc::invalid_argument,
                          "'" + original + "' is not a size (e.g. 6MB, 24GB, 512MiB)");
    }
    const double number = std::strtod(std::string(text.substr(0, i)).c_str(), nullptr);
    std::string unit;
    for (char ch : text.substr(i)) {
        if (ch == ' ') continue;
        unit.push_back(static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch));
    }
    static const std::map<std::string, double> kUnits = {
        {"", 1},
        {"b", 1},
        {"k", 1024.0},
        {"kb", 1e3},
        {"kib", 1024.0},
        {"m", 1048576.0},
        {"mb", 1e6},
        {"mib", 1048576.0},
        {"g", 1073741824.0},
        {"gb", 1e9},
        {"gib", 1073741824.0},
        {"t", 1099511627776.0},
        {"tb", 1e12},
        {"tib", 1099511627776.0},
    };
    auto it = kUnits.find(unit);
    if (it == kUnits.end()) {
        return make_error(
            errc::invalid_argument,
            "unknown size unit in '" + original + "' (use B, kB, MB, GB, TB, KiB, MiB, GiB, TiB)");
    }
    const double bytes = number * it->second;
    if (!std::isfinite(bytes) || bytes >= 9e18) {
        return make_error(errc::invalid_argument, "size '" + original + "' is too large");
    }
    return static_cast<std::uint64_t>(std::llround(bytes));
}

std::string format_size(std::uint64_t bytes) {
    static const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(bytes);
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        ++u;
    }
    if (u == 0) return std::to_string(bytes) + " B";
    return fmt(v, v < 10 ? 2 : 1) + " " + kNames[u];
}

}  // namespace brigade::mesh
