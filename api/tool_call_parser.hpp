#pragma once
// Turns a model's tool-call output into OpenAI `tool_calls`, incrementally: text arrives in
// arbitrary pieces and comes out as content plus tool-call deltas (the first fragment of each
// call has `index`, `id`, `name`; later ones carry `arguments` text). Formats:
//  - hermes:  Qwen2.5/Qwen3/Hermes `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`
//  - llama3:  Llama 3.x JSON calls `{"name": …, "parameters": {…}}`, optionally after
//             `<|python_tag|>`, several separated by `;` or newlines; only at the start of output
//  - mistral: `[TOOL_CALLS][{"name": …, "arguments": {…}}, …]` and the newer
//             `[TOOL_CALLS]name[ARGS]{…}` (optionally `[CALL_ID]id` before `[ARGS]`)
// Text that looks like a call but is not one (malformed JSON, no "name") is given back as
// content. Special tokens (`<tool_call>`, `[TOOL_CALLS]`, `<|python_tag|>`) must be kept in the
// detokenized text the service feeds here.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/completion_service.hpp"

namespace brigade::api {

enum class ToolCallFormat { none, hermes, llama3, mistral };

std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name);
std::string_view tool_call_format_name(ToolCallFormat format);

// Guesses the format from a chat template's source: what it tells the model to emit.
ToolCallFormat detect_tool_call_format(std::string_view chat_template);

// Makes tool-call ids. Mistral's template insists on 9 alphanumerics; others use "call_…".
using ToolCallIdGenerator = std::function<std::string()>;
ToolCallIdGenerator make_tool_call_id_generator(ToolCallFormat format, std::uint64_t seed);

struct ToolParseOutput {
    std::string content;
    std::vector<ToolCallDelta> tool_calls;
};

class ToolCallParser {
public:
    virtual ~ToolCallParser() = default;
    virtual void feed(std::string_view text, ToolParseOutput& out) = 0;
    // End of output: an unfinished call that emitted nothing yet goes back to content.
    virtual void flush(ToolParseOutput& out) = 0;
    // Calls started so far.
    virtual int n_calls() const = 0;
};

// A parser for `format` (`none`: everything is content).
std::unique_ptr<ToolCallParser> make_tool_call_parser(ToolCallFormat format,
                                                      ToolCallIdGenerator make_id);

}  // namespace brigade::api
