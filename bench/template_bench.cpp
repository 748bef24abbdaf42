// Chat-template render time for real templates on a multi-turn conversation with tools.
//
//   template_bench [--turns N] [--iterations N] [--json] [--data DIR]
//
// For each template: load time (parse + capability probes), then the median and best render
// time over the iterations, and the prompt size. Single thread.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "model/text/chat_template.hpp"

namespace {

using nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;
using brigade::model::text::ChatTemplate;
using brigade::model::text::ChatTemplateInputs;

struct Subject {
    const char* label;
    const char* path;  // relative to the data directory
    bool directory;    // a model directory (load_from_dir) or a .jinja file
};

constexpr Subject kSubjects[] = {
    {"Qwen2.5-7B-Instruct (tools)", "qwen2.5", true},
    {"Qwen3 (tools, thinking)", "qwen3", true},
    {"Llama-3.1-8B-Instruct (tools)",
     "chat-templates/llama.cpp/meta-llama-Llama-3.1-8B-Instruct.jinja", false},
    {"Llama-3.2-3B-Instruct", "llama3/Llama-3.2-3B-Instruct", true},
    {"DeepSeek-R1", "deepseek-r1", true},
    {"gpt-oss-120b", "chat-templates/llama.cpp/openai-gpt-oss-120b.jinja", false},
};

ordered_json conversation(int turns) {
    ordered_json messages = ordered_json::array();
    messages.push_back(
        {{"role", "system"}, {"content", "You are a helpful assistant. Answer briefly."}});
    for (int i = 0; i < turns; ++i) {
        messages.push_back(
            {{"role", "user"},
             {"content", "Question " + std::to_string(i) +
                             ": what is the weather like in Paris today, and should "
                             "I take an umbrella? Réponds en français si possible."}});
        if (i % 4 == 1) {
            ordered_json call = {
                {"id", "call" + std::to_string(100000 + i)},
                {"type", "function"},
                {"function",
                 {{"name", "get_weather"}, {"arguments", R"({"city": "Paris", "unit": "c"})"}}}};
            messages.push_back({{"role", "assistant"},
                                {"content", ""},
                                {"tool_calls", ordered_json::array({call})}});
            messages.push_back({{"role", "tool"},
                                {"tool_call_id", "call" + std::to_string(100000 + i)},
                                {"content", R"({"temp": 21, "rain": 0.1})"}});
        }
        messages.push_back({{"role", "assistant"},
                            {"content",
                             "It is 21 °C with a small chance of rain; an umbrella is "
                             "optional. Anything else?"}});
    }
    messages.push_back({{"role", "user"}, {"content", "Thanks! And tomorrow?"}});
    return messages;
}

ordered_json tools() {
    return ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
        "description": "Get the current weather for a city", "parameters": {"type": "object",
        "properties": {"city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}},
        {"type": "function", "function": {"name": "search", "description": "Search the web",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
        "required": ["query"]}}}])");
}

std::string read_text(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

}  // namespace

int main(int argc, char** argv) {
    int turns = 20;
    int iterations = 200;
    bool json = false;
    std::filesystem::path data = BRIGADE_SHARED_DATA_DIR;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--json")) {
            json = true;
        } else if (!std::strcmp(argv[i], "--turns") && i + 1 < argc) {
            turns = std::max(1, std::atoi(argv[++i]));
        } else if (!std::strcmp(argv[i], "--iterations") && i + 1 < argc) {
            iterations = std::max(1, std::atoi(argv[++i]));
        } else if (!std::strcmp(argv[i], "--data") && i + 1 < argc) {
            data = argv[++i];
        } else {
            std::fprintf(stderr, "usage: %s [--turns N] [--iterations N] [--json] [--data DIR]\n",
                         argv[0]);
            return 2;
        }
    }
    ChatTemplateInputs inputs;
    inputs.messages = conversation(turns);
    inputs.tools = tools();
    inputs.extra["enable_thinking"] = false;

    ordered_json results = ordered_json::array();
    for (const auto& s : kSubjects) {
        auto t0 = Clock::now();
        auto ct = s.directory ? ChatTemplate::load_from_dir(data / s.path)
                              : ChatTemplate::from_source(read_text(data / s.path),
                                                          {{"bos_token", "<|begin_of_text|>"}});
        auto load_us = micros(Clock::now() - t0);
        if (!ct) {
            std::fprintf(stderr, "%s: %s\n", s.label, ct.error().message.c_str());
            continue;
        }
        std::vector<double> samples;
        std::size_t bytes = 0;
        std::string error;
        for (int i = 0; i < iterations; ++i) {
            auto start = Clock::now();
            auto out = ct->render(inputs);
            samples.push_back(micros(Clock::now() - start));
            if (!out) {
                error = out.error().message;
                break;
            }
            bytes = out->size();
        }
        std::sort(samples.begin(), samples.end());
        ordered_json r = {{"template", s.label},
                          {"messages", inputs.messages.size()},
                          {"load_us", load_us},
                          {"render_median_us", samples[samples.size() / 2]},
                          {"render_min_us", samples.front()},
                          {"prompt_bytes", bytes}};
        if (!error.empty()) r["error"] = error;
        results.push_back(r);
    }
    if (json) {
        std::printf("%s\n", results.dump(2).c_str());
        return 0;
    }
    std::printf(
        "chat template render time, %d turns (%zu messages), %d iterations, single thread\n\n",
        turns, inputs.messages.size(), iterations);
    std::printf("| %-31s | %9s | %12s | %9s | %12s |\n", "template", "load ms", "median ms",
                "min ms", "prompt bytes");
    std::printf("|%s|%s|%s|%s|%s|\n", std::string(33, '-').c_str(), std::string(11, '-').c_str(),
                std::string(14, '-').c_str(), std::string(11, '-').c_str(),
                std::string(14, '-').c_str());
    for (const auto& r : results) {
        std::printf(
            "| %-31s | %9.3f | %12.3f | %9.3f | %12zu |%s\n",
            r["template"].get<std::string>().c_str(), r["load_us"].get<double>() / 1000,
            r["render_median_us"].get<double>() / 1000, r["render_min_us"].get<double>() / 1000,
            r["prompt_bytes"].get<std::size_t>(),
            r.contains("error") ? (" error: " + r["error"].get<std::string>()).c_str() : "");
    }
    return 0;
}
