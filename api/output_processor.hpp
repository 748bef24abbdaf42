#pragma once
// What a service does with the detokenized text of each sampled token: stop strings first (they
// apply to the raw generated text, as in llama.cpp), then `<think>` splitting, then tool-call
// parsing of the content. The result is a `Delta` ready for the sink. Pure and model-agnostic;
// the service picks the options from its chat template (see api/README.md).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "api/completion_service.hpp"
#include "api/reasoning_splitter.hpp"
#include "api/stop_matcher.hpp"
#include "api/tool_call_parser.hpp"

namespace brigade::api {

struct OutputOptions {
    std::vector<std::string> stop;
    // `none` when the request has no tools (or tool_choice "none"): calls stay plain text.
    ToolCallFormat tool_format = ToolCallFormat::none;
    bool parse_reasoning = false;      // split <think>…</think> into `reasoning`
    bool starts_in_reasoning = false;  // the generation prompt already opened <think>
    std::uint64_t id_seed = 0;         // tool-call ids (derive it from the request id)
};

class OutputProcessor {
public:
    explicit OutputProcessor(OutputOptions options);

    // Text of newly sampled tokens (UTF-8-complete). Appends to `out`; returns true once a stop
    // string matched: the service then ends generation with `FinishReason::stop`.
    bool feed(std::string_view text, Delta& out);

    // Generation ended (EOS, length, stop): releases held-back text and open parses.
    void finish(Delta& out);

    bool stopped() const { return stop_.stopped(); }
    bool in_reasoning() const { return reasoning_ && reasoning_->in_reasoning(); }
    int n_tool_calls() const { return tools_->n_calls(); }

    // The finish reason to report: `tool_calls` when calls were parsed and the model ended on
    // its own (EOS or a stop string); `length` when cut by max_tokens or the context.
    FinishReason finish_reason(bool hit_length) const;

private:
    void route(std::string_view text, Delta& out);

    StopMatcher stop_;
    std::unique_ptr<ReasoningSplitter> reasoning_;
    std::unique_ptr<ToolCallParser> tools_;
};

}  // namespace brigade::api
