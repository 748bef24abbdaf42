#include "api/output_processor.hpp"

#include <utility>

namespace brigade::api {

namespace {

void append_tool_calls(std::vector<ToolCallDelta>& from, Delta& out) {
    for (auto& call : from) {
        // Merge argument fragments of the same call into one delta.
        if (!out.tool_calls.empty() && out.tool_calls.back().index == call.index &&
            call.id.empty()) {
            out.tool_calls.back().arguments += call.arguments;
        } else {
            out.tool_calls.push_back(std::move(call));
        }
    }
    from.clear();
}

}  // namespace

OutputProcessor::OutputProcessor(OutputOptions options)
    : stop_(std::move(options.stop)),
      tools_(make_tool_call_parser(
          options.tool_format, make_tool_call_id_generator(options.tool_format, options.id_seed))) {
    if (options.parse_reasoning || options.starts_in_reasoning) {
        ReasoningOptions reasoning;
        reasoning.starts_in_reasoning = options.starts_in_reasoning;
        reasoning_ = std::make_unique<ReasoningSplitter>(std::move(reasoning));
    }
}

void OutputProcessor::route(std::string_view text, Delta& out) {
    ToolParseOutput parsed;
    if (reasoning_) {
        SplitText split;
        reasoning_->feed(text, split);
        out.reasoning += split.reasoning;
        tools_->feed(split.content, parsed);
    } else {
        tools_->feed(text, parsed);
    }
    out.content += parsed.content;
    append_tool_calls(parsed.tool_calls, out);
}

bool OutputProcessor::feed(std::string_view text, Delta& out) {
    if (stop_.stopped()) return true;
    const std::string released = stop_.feed(text);
    if (!released.empty()) route(released, out);
    return stop_.stopped();
}

void OutputProcessor::finish(Delta& out) {
    const std::string tail = stop_.flush();
    if (!tail.empty()) route(tail, out);
    ToolParseOutput parsed;
    if (reasoning_) {
        SplitText split;
        reasoning_->flush(split);
        out.reasoning += split.reasoning;
        tools_->feed(split.content, parsed);
    }
    tools_->flush(parsed);
    out.content += parsed.content;
    append_tool_calls(parsed.tool_calls, out);
}

FinishReason OutputProcessor::finish_reason(bool hit_length) const {
    if (hit_length) return FinishReason::length;
    return n_tool_calls() > 0 ? FinishReason::tool_calls : FinishReason::stop;
}

}  // namespace brigade::api
