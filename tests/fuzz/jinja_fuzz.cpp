// libFuzzer target for the Jinja interpreter: the input is a template source; every parse and
// render must end in a value or a Result error (ASan/UBSan catch the rest).
//
// Build (clang): cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DBRIGADE_FUZZ=ON
//                cmake --build build-fuzz --target jinja_fuzz
// Run:           build-fuzz/tests/jinja_fuzz -max_total_time=60 -max_len=8192 CORPUS_DIR \
//                    ../shared/data/chat-templates/llama.cpp   (real templates as seeds)
// Note: tests/CMakeLists.txt instruments only this file; for coverage feedback inside the
// interpreter configure with -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link,address,undefined
// (otherwise libFuzzer mutates blind and ASan does not see the library's memory accesses).

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "model/text/jinja.hpp"

namespace {

const nlohmann::ordered_json& context() {
    static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "Hello é 日本"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "abcdefghi",
             "type": "function", "function": {"name": "f", "arguments": {"a": [1, 2.5, null]}}}]},
            {"role": "tool", "tool_call_id": "abcdefghi", "content": "{\"ok\": true}"},
            {"role": "user", "content": [{"type": "text", "text": "parts"}]}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
        "enable_thinking": false})");
    return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view source(reinterpret_cast<const char*>(data), size);
    auto tpl = brigade::model::text::JinjaTemplate::parse(source);
    if (!tpl) return 0;
    brigade::model::text::JinjaRenderOptions options;
    // Small budgets keep each input fast; the limits themselves are under test too.
    options.max_steps = 100000;
    options.max_output_bytes = 1 << 20;
    options.max_call_depth = 64;
    options.strftime_now = [](std::string_view) { return std::string("21 Nov 2026"); };
    auto out = tpl->render(context(), options);
    (void)out;
    return 0;
}
