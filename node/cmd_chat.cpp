// `brigade chat`: an interactive, streaming, multi-turn chat against any OpenAI-compatible
// server (a brigade node by default). Lines from stdin are user turns; replies stream to
// stdout. Works with a pipe as stdin (no prompt is printed then).
//
//   brigade chat
//   brigade chat --url http://10.0.0.5:8177 --system "Answer briefly." --api-key s3cret
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "api/sse.hpp"
#include "node/commands.hpp"
#include "node/http_client.hpp"

namespace brigade::node {
namespace {

struct ChatArgs {
    std::string url = "http://127.0.0.1:8177";
    std::string system;
    std::string model;
    std::string api_key;
    int max_tokens = 0;
    double temperature = -1.0;  // unset: the server's default
};

// The `error.message` of an OpenAI error body, or the body itself.
std::string error_message(const std::string& body) {
    auto j = nlohmann::json::parse(body, nullptr, false);
    if (j.is_object() && j.contains("error") && j["error"].is_object() &&
        j["error"].contains("message") && j["error"]["message"].is_string()) {
        return j["error"]["message"].get<std::string>();
    }
    return body;
}

class ChatSession {
public:
    ChatSession(const ChatArgs& args, HttpUrl url) : args_(args), url_(std::move(url)) { reset(); }

    void reset() {
        history_ = nlohmann::json::array();
        if (!args_.system.empty()) {
            history_.push_back({{"role", "system"}, {"content", args_.system}});
        }
    }

    // Sends the history plus `line`, prints the reply as it streams. False on failure (the
    // turn is then left out of the history).
    bool turn(const std::string& line) {
        history_.push_back({{"role", "user"}, {"content", line}});
        nlohmann::json body = {{"messages", history_}, {"stream", true}};
        if (!args_.model.empty()) body["model"] = args_.model;
        if (args_.max_tokens > 0) body["max_tokens"] = args_.max_tokens;
        if (args_.temperature >= 0) body["temperature"] = args_.temperature;

        HttpRequest req;
        req.method = "POST";
        req.target = "/v1/chat/completions";
        req.body = body.dump();
        req.headers.emplace_back("Content-Type", "application/json");
        if (!args_.api_key.empty())
            req.headers.emplace_back("Authorization", "Bearer " + args_.api_key);

        std::string reply, error_body, stream_error;
        bool in_reasoning = false;
        int status = 0;
        api::SseParser parser;
        std::vector<api::SseMessage> events;
        req.on_body = [&](std::string_view bytes) {
            if (status != 200) {
                error_body.append(bytes);
                return true;
            }
            events.clear();
            parser.feed(bytes, events);
            for (const auto& e : events) {
                if (e.comment || e.data == "[DONE]") continue;
                auto j = nlohmann::json::parse(e.data, nullptr, false);
                if (!j.is_object()) continue;
                if (j.contains("error")) {
                    stream_error = error_message(e.data);
                    continue;
                }
                if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) {
                    continue;
                }
                const auto& delta = j["choices"][0].value("delta", nlohmann::json::object());
                if (delta.contains("reasoning_content") && delta["reasoning_content"].is_string()) {
                    if (!in_reasoning) std::fputs("[thinking] ", stdout);
                    in_reasoning = true;
                    std::fputs(delta["reasoning_content"].get<std::string>().c_str(), stdout);
                }
                if (delta.contains("content") && delta["content"].is_string()) {
                    const auto text = delta["content"].get<std::string>();
                    if (in_reasoning && !text.empty()) {
                        std::fputs("\n[answer] ", stdout);
                        in_reasoning = false;
                    }
                    reply += text;
                    std::fputs(text.c_str(), stdout);
                }
                if (delta.contains("tool_calls")) {
                    std::printf("\n[tool call] %s", delta["tool_calls"].dump().c_str());
                }
            }
            std::fflush(stdout);
            return true;
        };
        req.on_head = [&](const HttpResponse& head) { status = head.status; };
        auto response = http_request(url_, req);
        std::fputs("\n", stdout);
        std::fflush(stdout);
        if (!response) {
            std::fprintf(stderr, "brigade chat: %s\n", response.error().message.c_str());
        } else if (response->status != 200) {
            std::fprintf(stderr, "brigade chat: HTTP %d: %s\n", response->status,
                         error_message(error_body).c_str());
        } else if (!stream_error.empty()) {
            std::fprintf(stderr, "brigade chat: the server failed mid-reply: %s\n",
                         stream_error.c_str());
        } else {
            history_.push_back({{"role", "assistant"}, {"content", reply}});
            return true;
        }
        history_.erase(history_.end() - 1);
        return false;
    }

private:
    const ChatArgs& args_;
    HttpUrl url_;
    nlohmann::json history_;
};

int chat_command(const ChatArgs& args) {
    auto url = parse_http_url(args.url);
    if (!url) {
        std::fprintf(stderr, "brigade chat: error: %s\n", url.error().message.c_str());
        return 1;
    }
    const bool interactive = isatty(STDIN_FILENO) == 1;
    if (interactive) {
        std::fprintf(stderr,
                     "brigade chat: talking to %s — type a message; /reset starts over, /exit "
                     "quits\n",
                     args.url.c_str());
    }
    ChatSession session(args, *url);
    std::string line;
    int failures = 0;
    for (;;) {
        if (interactive) {
            std::fputs("> ", stdout);
            std::fflush(stdout);
        }
        if (!std::getline(std::cin, line)) break;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty()) continue;
        if (line == "/exit" || line == "/quit") break;
        if (line == "/reset") {
            session.reset();
            if (interactive) std::fputs("(history cleared)\n", stderr);
            continue;
        }
        if (!session.turn(line)) ++failures;
    }
    // A script piping input wants to know if any turn failed.
    return interactive || failures == 0 ? 0 : 1;
}

}  // namespace

void add_chat_command(CLI::App& app, CommandSet& commands) {
    auto args = std::make_shared<ChatArgs>();
    auto* sub = app.add_subcommand(
        "chat", "Chat with a running server from the terminal (streaming, multi-turn)");
    sub->footer(
        "\nEach line you type is a user turn; the reply streams back. Commands: /reset clears "
        "the\nconversation, /exit quits (so does end of input). stdin may be a pipe:\n"
        "  printf 'Hello\\nTell me more\\n' | brigade chat --url http://127.0.0.1:8177\n");
    sub->add_option("--url", args->url, "Server address (default http://127.0.0.1:8177)");
    sub->add_option("--system", args->system, "System message starting the conversation");
    sub->add_option("--model", args->model, "Model name to ask for (default: the server's)");
    sub->add_option("--api-key", args->api_key, "Sent as 'Authorization: Bearer KEY'");
    sub->add_option("--max-tokens", args->max_tokens,
                    "Longest reply in tokens (default: no limit)");
    sub->add_option("--temp", args->temperature, "Temperature (default: the server's)");
    commands.add(sub, [args] { return chat_command(*args); });
}

}  // namespace brigade::node
