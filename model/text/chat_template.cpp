#include "model/text/chat_template.hpp"

#include <fstream>
#include <sstream>

#include "model/text/jinja_value.hpp"

namespace brigade::model::text {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

constexpr std::string_view kProbeKey = "brigade_probe_key";
constexpr std::string_view kProbeValue = "brigade_probe_value";
constexpr std::string_view kProbeText = "brigade_probe_text";

Result<std::string> read_text(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    if (!in) return make_error(errc::io_error, "cannot open " + p.string());
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) return make_error(errc::io_error, "cannot read " + p.string());
    return ss.str();
}

Result<ordered_json> read_json(const fs::path& p) {
    auto text = read_text(p);
    if (!text) return text.error();
    auto j = ordered_json::parse(*text, nullptr, false);
    if (j.is_discarded()) return make_error(errc::bad_format, p.string() + " is not valid JSON");
    return Result<ordered_json>(boost::system::in_place_value, std::move(j));
}

// `chat_template` as a string, or a list of {"name", "template"}: the template called `name`,
// else "default".
Result<std::string> pick_template(const ordered_json& field, std::string_view name,
                                  const std::string& where) {
    if (field.is_string()) return field.get<std::string>();
    if (!field.is_array()) {
        return make_error(errc::bad_format,
                          where + ": 'chat_template' is neither a string nor a list");
    }
    const ordered_json* fallback = nullptr;
    std::string available;
    for (const auto& entry : field) {
        if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
            !entry["name"].is_string() || !entry["template"].is_string()) {
            return make_error(errc::bad_format, where + ": malformed named chat template entry");
        }
        const auto& entry_name = entry["name"].get_ref<const std::string&>();
        if (entry_name == name) return entry["template"].get<std::string>();
        if (entry_name == "default") fallback = &entry["template"];
        available += (available.empty() ? "" : ", ") + entry_name;
    }
    if (fallback) return fallback->get<std::string>();
    return make_error(errc::invalid_argument, where + ": no chat template named '" +
                                                  std::string(name) + "' (available: " + available +
                                                  ")");
}

ordered_json probe_tools() {
    return ordered_json::parse(R"([{"type": "function", "function": {"name": "brigade_probe_tool",
        "description": "probe", "parameters": {"type": "object", "properties":
        {"brigade_probe_key": {"type": "string"}}, "required": ["brigade_probe_key"]}}}])");
}

ordered_json probe_messages(const ordered_json& arguments) {
    ordered_json call = {{"id", "abcdefghi"},
                         {"type", "function"},
                         {"function", {{"name", "brigade_probe_tool"}, {"arguments", arguments}}}};
    ordered_json user = {{"role", "user"}, {"content", "probe"}};
    ordered_json assistant = {
        {"role", "assistant"}, {"content", ""}, {"tool_calls", ordered_json::array({call})}};
    return ordered_json::array({user, assistant});
}

bool has_text_parts(const ordered_json& content) { return content.is_array() && !content.empty(); }

std::string flatten_parts(const ordered_json& content) {
    std::string text;
    for (const auto& part : content) {
        if (part.is_string()) {
            text += part.get<std::string>();
        } else if (part.is_object() && part.value("type", "") == "text" && part.contains("text") &&
                   part["text"].is_string()) {
            text += part["text"].get<std::string>();
        }
    }
    return text;
}

}  // namespace

std::string python_json_dumps(const ordered_json& value) {
    try {
        return jinja::to_json(jinja::Value::from_json(value), jinja::JsonStyle{});
    } catch (const jinja::TemplateException&) {
        return value.dump();  // nested too deep for the Python-style dumper
    }
}

ordered_json special_tokens_from_config(const ordered_json& config) {
    ordered_json tokens = ordered_json::object();
    if (!config.is_object()) return tokens;
    for (auto it = config.begin(); it != config.end(); ++it) {
        const std::string& key = it.key();
        const auto& v = it.value();
        bool token_key = key.size() > 6 && key.compare(key.size() - 6, 6, "_token") == 0;
        if (token_key) {
            if (v.is_string()) {
                tokens[key] = v;
            } else if (v.is_object() && v.contains("content") && v["content"].is_string()) {
                tokens[key] = v["content"];
            }
        } else if (key == "additional_special_tokens" && v.is_array()) {
            ordered_json list = ordered_json::array();
            for (const auto& t : v) {
                if (t.is_string()) list.push_back(t);
                if (t.is_object() && t.contains("content") && t["content"].is_string())
                    list.push_back(t["content"]);
            }
            tokens[key] = list;
        }
    }
    return tokens;
}

Result<ChatTemplate> ChatTemplate::from_source(std::string source, ordered_json special_tokens) {
    auto tpl = JinjaTemplate::parse(source);
    if (!tpl) return tpl.error();
    ChatTemplate ct(std::move(source), std::move(*tpl), special_tokens_from_config(special_tokens));
    ct.probe();
    return ct;
}

Result<ChatTemplate> ChatTemplate::load_from_dir(const fs::path& dir, std::string_view name) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        return make_error(errc::io_error, dir.string() + " is not a directory");
    ordered_json config = ordered_json::object();
    fs::path config_path = dir / "tokenizer_config.json";
    if (fs::exists(config_path, ec)) {
        auto j = read_json(config_path);
        if (!j) return j.error();
        if (!j->is_object())
            return make_error(errc::bad_format, config_path.string() + " is not a JSON object");
        config = std::move(*j);
    }
    ordered_json tokens = special_tokens_from_config(config);
    // special_tokens_map.json fills in tokens tokenizer_config.json leaves out.
    fs::path map_path = dir / "special_tokens_map.json";
    if (fs::exists(map_path, ec)) {
        auto j = read_json(map_path);
        if (j && j->is_object()) {
            ordered_json extra = special_tokens_from_config(*j);
            for (auto it = extra.begin(); it != extra.end(); ++it) {
                if (!tokens.contains(it.key()) &&
                    !(config.contains(it.key()) && config[it.key()].is_null())) {
                    tokens[it.key()] = it.value();
                }
            }
        }
    }

    std::string source;
    fs::path jinja_path = dir / "chat_template.jinja";
    fs::path named_path = dir / "additional_chat_templates" / (std::string(name) + ".jinja");
    fs::path json_path = dir / "chat_template.json";
    if (name != "default" && fs::exists(named_path, ec)) {
        auto text = read_text(named_path);
        if (!text) return text.error();
        source = std::move(*text);
    } else if (fs::exists(jinja_path, ec)) {
        auto text = read_text(jinja_path);
        if (!text) return text.error();
        source = std::move(*text);
    } else if (fs::exists(json_path, ec)) {
        auto j = read_json(json_path);
        if (!j) return j.error();
        if (!j->is_object() || !j->contains("chat_template")) {
            return make_error(errc::bad_format, json_path.string() + " has no 'chat_template'");
        }
        auto picked = pick_template((*j)["chat_template"], name, json_path.string());
        if (!picked) return picked.error();
        source = std::move(*picked);
    } else if (config.contains("chat_template") && !config["chat_template"].is_null()) {
        auto picked = pick_template(config["chat_template"], name, config_path.string());
        if (!picked) return picked.error();
        source = std::move(*picked);
    } else {
        return make_error(errc::bad_format,
                          "no chat template in " + dir.string() +
                              " (looked for chat_template.jinja, chat_template.json and "
                              "'chat_template' in tokenizer_config.json)");
    }
    auto tpl = JinjaTemplate::parse(source);
    if (!tpl) return tpl.error();
    ChatTemplate ct(std::move(source), std::move(*tpl), std::move(tokens));
    ct.probe();
    return ct;
}

void ChatTemplate::probe() {
    // Probes render with a fixed clock and small limits; a failing probe just means "no".
    JinjaRenderOptions saved = options_;
    options_.max_steps = 2'000'000;
    options_.strftime_now = [](std::string_view) { return std::string("01 Jan 2025"); };
    ordered_json tools = probe_tools();
    ordered_json args_object = {{std::string(kProbeKey), std::string(kProbeValue)}};
    std::string args_string = python_json_dumps(args_object);
    auto as_object = render_raw(probe_messages(args_object), tools, false, ordered_json::object());
    caps_.renders_object_arguments = as_object && as_object->find(kProbeKey) != std::string::npos &&
                                     as_object->find(kProbeValue) != std::string::npos;
    auto as_string = render_raw(probe_messages(args_string), tools, false, ordered_json::object());
    caps_.renders_string_arguments = as_string && as_string->find(args_string) != std::string::npos;

    ordered_json parts_message = {
        {"role", "user"},
        {"content", ordered_json::array({{{"type", "text"}, {"text", std::string(kProbeText)}}})}};
    auto with_parts =
        render_raw(ordered_json::array({parts_message}), nullptr, true, ordered_json::object());
    // A template that prints the list itself shows Python's repr ("{'type': 'text', ...").
    caps_.accepts_content_parts = with_parts && with_parts->find(kProbeText) != std::string::npos &&
                                  with_parts->find("'type'") == std::string::npos;
    options_ = std::move(saved);
}

Result<std::string> ChatTemplate::render_raw(const ordered_json& messages,
                                             const ordered_json& tools, bool add_generation_prompt,
                                             const ordered_json& extra) const {
    ordered_json context = ordered_json::object();
    context["messages"] = messages;
    context["tools"] = tools;
    context["documents"] = nullptr;
    context["add_generation_prompt"] = add_generation_prompt;
    for (auto it = special_tokens_.begin(); it != special_tokens_.end(); ++it)
        context[it.key()] = it.value();
    if (extra.is_object()) {
        for (auto it = extra.begin(); it != extra.end(); ++it) context[it.key()] = it.value();
    }
    return tpl_.render(context, options_);
}

Result<std::string> ChatTemplate::render(const ChatTemplateInputs& inputs) const {
    if (!inputs.messages.is_array())
        return make_error(errc::invalid_argument, "messages must be a JSON array");
    if (!inputs.tools.is_null() && !inputs.tools.is_array()) {
        return make_error(errc::invalid_argument, "tools must be a JSON array or null");
    }
    if (!inputs.extra.is_object())
        return make_error(errc::invalid_argument, "extra variables must be a JSON object");

    ToolArguments mode = inputs.tool_arguments;
    if (mode == ToolArguments::automatic) {
        if (caps_.renders_object_arguments) {
            mode = ToolArguments::object;
        } else if (caps_.renders_string_arguments) {
            mode = ToolArguments::string;
        } else {
            mode = ToolArguments::as_given;
        }
    }
    bool flatten = inputs.flatten_content_parts && !caps_.accepts_content_parts;

    ordered_json messages = inputs.messages;
    for (auto& m : messages) {
        if (!m.is_object()) continue;
        if (flatten && m.contains("content") && has_text_parts(m["content"])) {
            m["content"] = flatten_parts(m["content"]);
        }
        if (mode == ToolArguments::as_given || !m.contains("tool_calls") ||
            !m["tool_calls"].is_array())
            continue;
        for (auto& call : m["tool_calls"]) {
            if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
                continue;
            auto& fn = call["function"];
            if (!fn.contains("arguments")) continue;
            auto& args = fn["arguments"];
            if (mode == ToolArguments::object && args.is_string()) {
                auto parsed = ordered_json::parse(args.get<std::string>(), nullptr, false);
                if (!parsed.is_discarded() && parsed.is_object()) args = std::move(parsed);
            } else if (mode == ToolArguments::string && !args.is_string()) {
                args = python_json_dumps(args);
            }
        }
    }
    return render_raw(messages, inputs.tools, inputs.add_generation_prompt, inputs.extra);
}

}  // namespace brigade::model::text
