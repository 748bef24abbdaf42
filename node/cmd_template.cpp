// `brigade template`: render a model's chat template for a conversation, exactly as Hugging Face
// `apply_chat_template(..., tokenize=False)` would, and print the prompt.

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "model/text/chat_template.hpp"
#include "node/commands.hpp"

namespace brigade::node {

namespace {

using nlohmann::ordered_json;

struct TemplateOptions {
    std::string model_dir;
    std::string messages_file;
    std::string tools_file;
    std::string template_name = "default";
    std::string tool_arguments = "auto";
    bool no_generation_prompt = false;
    std::vector<std::string> vars;
};

int fail(const std::string& message) {
    std::fprintf(stderr, "brigade template: error: %s\n", message.c_str());
    return 1;
}

// Reads a JSON file ("-" = stdin); returns false with `error` set on failure.
bool read_json(const std::string& path, ordered_json& out, std::string& error) {
    std::string text;
    if (path == "-") {
        text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    } else {
        std::ifstream in(path, std::ios::binary);
        if (!in) {
            error = "cannot open " + path;
            return false;
        }
        std::ostringstream ss;
        ss << in.rdbuf();
        text = ss.str();
    }
    out = ordered_json::parse(text, nullptr, false);
    if (out.is_discarded()) {
        error = path + " is not valid JSON";
        return false;
    }
    return true;
}

int run_template(const TemplateOptions& opt) {
    using model::text::ChatTemplate;
    using model::text::ChatTemplateInputs;
    using model::text::ToolArguments;

    ChatTemplateInputs inputs;
    std::string error;
    ordered_json messages;
    if (!read_json(opt.messages_file, messages, error)) return fail(error);
    // Either a bare list of messages or an OpenAI-style request body with "messages"/"tools".
    if (messages.is_object() && messages.contains("messages")) {
        if (messages.contains("tools")) inputs.tools = messages["tools"];
        inputs.messages = messages["messages"];
    } else {
        inputs.messages = std::move(messages);
    }
    if (!inputs.messages.is_array()) {
        return fail(opt.messages_file +
                    ": expected a JSON list of messages (or {\"messages\": [...]})");
    }
    if (!opt.tools_file.empty()) {
        ordered_json tools;
        if (!read_json(opt.tools_file, tools, error)) return fail(error);
        if (!tools.is_array()) return fail(opt.tools_file + ": expected a JSON list of tools");
        inputs.tools = std::move(tools);
    }
    inputs.add_generation_prompt = !opt.no_generation_prompt;
    for (const auto& kv : opt.vars) {
        auto eq = kv.find('=');
        if (eq == std::string::npos || eq == 0)
            return fail("--var expects key=value, got '" + kv + "'");
        std::string key = kv.substr(0, eq);
        std::string value = kv.substr(eq + 1);
        // JSON when it parses (true, 3, {"a": 1}), else the text itself.
        auto parsed = ordered_json::parse(value, nullptr, false);
        inputs.extra[key] = parsed.is_discarded() ? ordered_json(value) : parsed;
    }
    if (opt.tool_arguments == "auto") {
        inputs.tool_arguments = ToolArguments::automatic;
    } else if (opt.tool_arguments == "as-given") {
        inputs.tool_arguments = ToolArguments::as_given;
    } else if (opt.tool_arguments == "object") {
        inputs.tool_arguments = ToolArguments::object;
    } else if (opt.tool_arguments == "string") {
        inputs.tool_arguments = ToolArguments::string;
    } else {
        return fail("--tool-arguments must be auto, as-given, object or string");
    }

    auto tpl = ChatTemplate::load_from_dir(opt.model_dir, opt.template_name);
    if (!tpl) return fail(tpl.error().message);
    auto text = tpl->render(inputs);
    if (!text) return fail(text.error().message);
    std::fwrite(text->data(), 1, text->size(), stdout);
    std::fflush(stdout);
    return 0;
}

}  // namespace

void add_template_command(CLI::App& app, CommandSet& commands) {
    auto opt = std::make_shared<TemplateOptions>();
    auto* sub = app.add_subcommand(
        "template",
        "Render a model's chat template for a conversation and print the prompt\n"
        "(the text Hugging Face apply_chat_template(tokenize=False) produces)");
    sub->add_option("--model", opt->model_dir,
                    "Model directory (chat_template.jinja, chat_template.json or "
                    "tokenizer_config.json)")
        ->required();
    sub->add_option("--messages", opt->messages_file,
                    "JSON file with the messages list, or {\"messages\": [...], \"tools\": [...]}; "
                    "'-' reads stdin")
        ->required();
    sub->add_option("--tools", opt->tools_file, "JSON file with the list of tool schemas");
    sub->add_flag("--no-generation-prompt", opt->no_generation_prompt,
                  "Do not append the assistant prompt (add_generation_prompt=false)");
    sub->add_option("--var", opt->vars,
                    "Extra template variable key=value (value parsed as JSON if it is JSON, else a "
                    "string), e.g. --var enable_thinking=false; repeatable")
        ->expected(1)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    sub->add_option("--template-name", opt->template_name,
                    "Which named template to use (default, tool_use, rag, ...)")
        ->capture_default_str();
    sub->add_option("--tool-arguments", opt->tool_arguments,
                    "Tool-call arguments: auto (what the template handles), as-given, object, "
                    "string")
        ->capture_default_str();
    sub->footer(
        "Example:\n"
        "  brigade template --model models/Qwen2.5-7B-Instruct --messages chat.json \\\n"
        "      --var enable_thinking=false\n"
        "Errors go to stderr and exit with status 1.\n");
    commands.add(sub, [opt] { return run_template(*opt); });
}

}  // namespace brigade::node
