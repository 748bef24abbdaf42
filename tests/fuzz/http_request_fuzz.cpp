// libFuzzer target for what a client controls: the request body (UTF-8 check, JSON parse,
// validation into a CompletionRequest) and the response formatting of what comes back. Also
// feeds the bytes, as if they were model output, through the text post-processing (stop
// strings, <think>, tool-call parsers, JSON-prefix checks). Nothing may crash or hang, and a
// request that validates must produce responses that serialize.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "api/completion_exchange.hpp"
#include "api/json_prefix.hpp"
#include "api/openai_types.hpp"
#include "api/output_processor.hpp"

namespace {

using namespace brigade::api;

void fuzz_request(std::string_view body, bool chat) {
    ApiResult<nlohmann::json> json = parse_json_body(body);
    if (!json) return;
    ApiResult<CompletionRequest> request =
        chat ? parse_chat_request(*json) : parse_completion_request(*json);
    if (!request) {
        (void)error_body(request.error(), "id");
        return;
    }
    request->id = "chatcmpl-fuzz";
    CompletionExchange exchange(*request, 0);
    exchange.handle(PromptInfo{"m", 1, 0});
    Delta delta;
    delta.content = request->model;  // arbitrary (valid UTF-8) text from the request
    exchange.handle(delta);
    exchange.handle(Final{});
    (void)exchange.log_line(1.0);
}

void fuzz_output(std::string_view text, std::uint8_t selector) {
    OutputOptions options;
    options.stop = {"</s>", "\nUser:"};
    options.tool_format = static_cast<ToolCallFormat>(selector % 4);
    options.parse_reasoning = (selector & 4) != 0;
    options.starts_in_reasoning = (selector & 8) != 0;
    OutputProcessor processor(options);
    Delta delta;
    const std::size_t step = 1 + selector % 7;
    for (std::size_t at = 0; at < text.size(); at += step) {
        if (processor.feed(text.substr(at, step), delta)) break;
    }
    processor.finish(delta);
    JsonPrefixValidator validator;
    for (char c : text) {
        JsonPrefixValidator probe = validator.clone();
        if (!probe.feed(c)) break;
        validator = probe;
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const std::uint8_t selector = data[0];
    const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
    fuzz_request(rest, (selector & 16) == 0);
    fuzz_output(rest, selector);
    return 0;
}
