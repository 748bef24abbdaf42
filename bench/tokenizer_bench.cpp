// Tokenizer throughput, single thread: encode MB/s on English prose and on C++ source for the
// Qwen2.5 and Llama 3 tokenizers, decode throughput, and the time to encode a ~100,000-token
// prompt built from distinct texts (so that the per-call piece cache sees realistic reuse,
// not one paragraph repeated). Also load time of each tokenizer.
//
// Usage: tokenizer_bench [--json] [--data DIR] [--reps N]
// Inputs: /usr/share/common-licenses/* (prose) and /usr/include/c++/*/bits/*.h (code).

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "model/text/tokenizer.hpp"

namespace {

namespace fs = std::filesystem;
using brigade::model::text::Tokenizer;

std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// CPU time of this thread: on a shared, loaded machine wall time mostly measures the others.
double thread_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Best thread-CPU time of `reps` runs of `fn`.
template <class Fn>
double best_of(int reps, Fn fn) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        double t0 = thread_cpu_seconds();
        fn();
        best = std::min(best, thread_cpu_seconds() - t0);
    }
    return best;
}

std::vector<fs::path> sorted_files(const fs::path& dir, const std::string& suffix) {
    std::vector<fs::path> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        if (e.is_regular_file() && e.path().string().ends_with(suffix)) out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
}

fs::path find_cxx_bits() {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/usr/include/c++", ec)) {
        if (fs::exists(e.path() / "bits" / "stl_algo.h")) return e.path() / "bits";
    }
    return {};
}

struct Row {
    std::string tokenizer, input;
    double bytes = 0, tokens = 0, encode_s = 0, decode_s = 0;
};

}  // namespace

int main(int argc, char** argv) {
    bool as_json = false;
    int reps = 5;
    fs::path data = BRIGADE_SHARED_DATA_DIR;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--json") == 0) {
            as_json = true;
        } else if (std::strcmp(argv[i], "--data") == 0 && i + 1 < argc) {
            data = argv[++i];
        } else if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = std::max(1, std::atoi(argv[++i]));
        } else {
            std::fprintf(stderr, "usage: %s [--json] [--data DIR] [--reps N]\n", argv[0]);
            return 2;
        }
    }
    const fs::path bits = find_cxx_bits();
    const std::string prose = read_file("/usr/share/common-licenses/GPL-3");
    const std::string code = bits.empty() ? std::string() : read_file(bits / "stl_algo.h");
    if (prose.empty() || code.empty()) {
        std::fprintf(stderr, "need /usr/share/common-licenses/GPL-3 and a libstdc++ header\n");
        return 1;
    }
    // The long prompt: every license text and then libstdc++ headers, in a fixed order.
    std::string corpus;
    for (const auto& p : sorted_files("/usr/share/common-licenses", "")) corpus += read_file(p);
    for (const auto& p : sorted_files(bits, ".h")) corpus += read_file(p);

    std::vector<Row> rows;
    nlohmann::json out = nlohmann::json::object();
    for (const char* name : {"qwen2.5", "llama3"}) {
        double t0 = thread_cpu_seconds();
        auto tok = Tokenizer::load_from_dir(data / name);
        double load_s = thread_cpu_seconds() - t0;
        if (!tok) {
            std::fprintf(stderr, "%s: %s\n", name, tok.error().what().c_str());
            return 1;
        }
        out["load_s"][name] = load_s;
        for (auto [input, text] :
             {std::pair<const char*, const std::string*>{"english (GPL-3)", &prose},
              {"c++ (stl_algo.h)", &code}}) {
            Row r{name, input, static_cast<double>(text->size())};
            std::vector<int32_t> ids;
            r.encode_s = best_of(reps, [&] { ids = tok->encode(*text, false).value(); });
            r.tokens = static_cast<double>(ids.size());
            std::string back;
            r.decode_s = best_of(reps, [&] { back = tok->decode(ids, false); });
            if (back != *text) std::fprintf(stderr, "warning: %s round trip differs\n", name);
            rows.push_back(r);
        }
        // A ~100,000-token prompt: the longest prefix of the corpus with at most 100k tokens.
        auto all = tok->encode(corpus, false).value();
        std::size_t n_tokens = std::min<std::size_t>(100000, all.size());
        std::string prompt = tok->decode(std::span(all.data(), n_tokens), false);
        std::vector<int32_t> ids;
        double s = best_of(reps, [&] { ids = tok->encode(prompt, false).value(); });
        out["prompt_100k"][name] = {
            {"tokens", ids.size()}, {"bytes", prompt.size()}, {"encode_ms", s * 1e3}};
    }
    for (const auto& r : rows) {
        out["rows"].push_back({{"tokenizer", r.tokenizer},
                               {"input", r.input},
                               {"bytes", r.bytes},
                               {"tokens", r.tokens},
                               {"encode_MBps", r.bytes / r.encode_s / 1e6},
                               {"encode_Mtok_s", r.tokens / r.encode_s / 1e6},
                               {"decode_MBps", r.bytes / r.decode_s / 1e6},
                               {"decode_Mtok_s", r.tokens / r.decode_s / 1e6}});
    }
    if (as_json) {
        std::printf("%s\n", out.dump(2).c_str());
        return 0;
    }
    std::printf("tokenizer bench (single thread, best of %d, thread CPU time)\n\n", reps);
    std::printf(
        "| tokenizer | input | bytes | tokens | encode MB/s | encode Mtok/s | decode MB/s |\n");
    std::printf("|---|---|---:|---:|---:|---:|---:|\n");
    for (const auto& r : rows) {
        std::printf("| %s | %s | %.0f | %.0f | %.2f | %.2f | %.1f |\n", r.tokenizer.c_str(),
                    r.input.c_str(), r.bytes, r.tokens, r.bytes / r.encode_s / 1e6,
                    r.tokens / r.encode_s / 1e6, r.bytes / r.decode_s / 1e6);
    }
    std::printf("\n| tokenizer | 100k-token prompt: tokens | bytes | encode ms | load s |\n");
    std::printf("|---|---:|---:|---:|---:|\n");
    for (const char* name : {"qwen2.5", "llama3"}) {
        const auto& p = out["prompt_100k"][name];
        std::printf("| %s | %d | %d | %.1f | %.2f |\n", name, p["tokens"].get<int>(),
                    p["bytes"].get<int>(), p["encode_ms"].get<double>(),
                    out["load_s"][name].get<double>());
    }
    return 0;
}
