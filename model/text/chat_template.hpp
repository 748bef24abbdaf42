#pragma once
// A model's chat template: where to find it, what it is given, and rendering it the way
// Hugging Face transformers' `apply_chat_template(tokenize=False)` does (formats.md §4.10, §5).
//
// Sources, in transformers' order of preference: `chat_template.jinja` (plus
// `additional_chat_templates/<name>.jinja` for a named one), `chat_template.json`
// (`{"chat_template": ...}`), then `chat_template` in `tokenizer_config.json`, which is a string
// or a list of `{"name", "template"}` (pick `name`, else "default").
//
// Render variables, as transformers passes them: `messages`, `tools` (None when absent),
// `documents` (None), `add_generation_prompt`, every special token of tokenizer_config.json
// (`bos_token`, `eos_token`, `pad_token`, `unk_token`, ... as strings; `{"content": ...}`
// objects are unwrapped; null ones are left undefined), then `extra` (which overrides the
// special tokens: `enable_thinking`, `date_string`, `bos_token`, ...).
//
// Tool-call arguments: OpenAI sends `function.arguments` as a JSON *string*, but templates
// disagree. Qwen2.5 and Llama 3 print `arguments | tojson` or iterate `arguments | items`
// (they need an object); DeepSeek R1 concatenates it (it needs a string). Like minja, we probe
// the template once when it is loaded: it is rendered with a tool call whose arguments are an
// object, and again with a string. With `ToolArguments::automatic` (the default), string
// arguments that are valid JSON objects are parsed into objects whenever the template renders
// objects properly (the common case, and what mlx-lm always does), and object arguments are
// serialised to JSON strings (Python `json.dumps` style) only for templates that handle
// strings but not objects. Other messages and fields are passed through untouched.
//
// Content given as a list of parts (`[{"type": "text", "text": ...}]`) is passed as-is when the
// template understands parts (probed the same way); otherwise the text parts are concatenated
// into one string, so text-only templates still render.

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "model/errors.hpp"
#include "model/text/jinja.hpp"

namespace brigade::model::text {

enum class ToolArguments {
    automatic,  // convert to what the template handles (see above)
    as_given,   // pass `arguments` exactly as the caller gave them
    object,     // parse JSON strings into objects
    string,     // serialise objects into JSON strings
};

struct ChatTemplateInputs {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    nlohmann::ordered_json tools;  // null = no tools
    bool add_generation_prompt = true;
    // enable_thinking, date_string, ... ; also overrides special tokens.
    nlohmann::ordered_json extra = nlohmann::ordered_json::object();
    ToolArguments tool_arguments = ToolArguments::automatic;
    // Concatenate content parts into strings when the template cannot take them.
    bool flatten_content_parts = true;
};

// What the load-time probes found out about a template.
struct ChatTemplateCaps {
    bool renders_object_arguments = false;  // `arguments` as an object shows up in the output
    bool renders_string_arguments = false;  // `arguments` as a JSON string shows up verbatim
    bool accepts_content_parts = false;     // content as a list of text parts is understood
};

class ChatTemplate {
public:
    // Loads the template of a model directory (see the order above). `name` selects one of
    // several named templates ("default", "tool_use", "rag", ...).
    static Result<ChatTemplate> load_from_dir(const std::filesystem::path& dir,
                                              std::string_view name = "default");
    // A template from its source; `special_tokens` is an object such as
    // {"bos_token": "<s>", "eos_token": {"content": "</s>"}} (tokenizer_config.json works).
    static Result<ChatTemplate> from_source(std::string source,
                                            nlohmann::ordered_json special_tokens = {});

    Result<std::string> render(const ChatTemplateInputs& inputs) const;

    const std::string& source() const { return source_; }
    // The special tokens given to every render, as name -> string.
    const nlohmann::ordered_json& special_tokens() const { return special_tokens_; }
    const ChatTemplateCaps& caps() const { return caps_; }
    // Limits and the `strftime_now` clock used for every render.
    void set_render_options(JinjaRenderOptions options) { options_ = std::move(options); }

private:
    ChatTemplate(std::string source, JinjaTemplate tpl, nlohmann::ordered_json special_tokens)
        : source_(std::move(source)),
          tpl_(std::move(tpl)),
          special_tokens_(std::move(special_tokens)) {}
    void probe();
    Result<std::string> render_raw(const nlohmann::ordered_json& messages,
                                   const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                   const nlohmann::ordered_json& extra) const;

    std::string source_;
    JinjaTemplate tpl_;
    nlohmann::ordered_json special_tokens_;
    ChatTemplateCaps caps_;
    JinjaRenderOptions options_;
};

// Special tokens of a tokenizer_config.json object: every `*_token` key whose value is a string
// or a `{"content": ...}` object, plus `additional_special_tokens`, as plain strings.
nlohmann::ordered_json special_tokens_from_config(const nlohmann::ordered_json& config);

// Python `json.dumps(x)` (", " and ": " separators, non-ASCII kept): how object arguments are
// turned back into the strings some templates need.
std::string python_json_dumps(const nlohmann::ordered_json& value);

}  // namespace brigade::model::text
