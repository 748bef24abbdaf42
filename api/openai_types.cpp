#include "api/openai_types.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "api/utf8.hpp"

namespace brigade::api {

namespace {

using nlohmann::json;

// Inside this file validation failures are thrown (house guide §4: the one place exceptions
// are allowed for request parsing) and converted to `ApiResult` at the entry points.
[[noreturn]] void reject(const std::string& param, const std::string& message) {
    throw ApiException(make_api_error(ErrorKind::invalid_request, param + ": " + message, param));
}

std::string type_name(const json& value) {
    switch (value.type()) {
        case json::value_t::null:
            return "null";
        case json::value_t::boolean:
            return "a boolean";
        case json::value_t::string:
            return "a string";
        case json::value_t::array:
            return "an array";
        case json::value_t::object:
            return "an object";
        default:
            return "a number";
    }
}

// A field, present and not null.
const json* field(const json& object, const char* name) {
    const auto it = object.find(name);
    if (it == object.end() || it->is_null()) return nullptr;
    return &*it;
}

std::string get_string(const json& value, const std::string& param) {
    if (!value.is_string()) reject(param, "expected a string, got " + type_name(value));
    return value.get<std::string>();
}

bool get_bool(const json& value, const std::string& param) {
    if (!value.is_boolean()) reject(param, "expected a boolean, got " + type_name(value));
    return value.get<bool>();
}

double get_number(const json& value, const std::string& param, double min, double max) {
    if (!value.is_number()) reject(param, "expected a number, got " + type_name(value));
    const double x = value.get<double>();
    if (!std::isfinite(x) || x < min || x > max) {
        reject(param, "must be between " + json(min).dump() + " and " + json(max).dump() +
                          ", got " + value.dump());
    }
    return x;
}

std::int64_t get_integer(const json& value, const std::string& param, std::int64_t min,
                         std::int64_t max) {
    std::int64_t x = 0;
    if (value.is_number_integer()) {
        if (value.is_number_unsigned() &&
            value.get<std::uint64_t>() >
                static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
            x = std::numeric_limits<std::int64_t>::max();
        } else {
            x = value.get<std::int64_t>();
        }
    } else if (value.is_number_float()) {
        // JavaScript clients may send 100.0; accept integral values only.
        const double d = value.get<double>();
        if (!std::isfinite(d) || std::floor(d) != d) {
            reject(param, "expected an integer, got " + value.dump());
        }
        x = std::fabs(d) < 9.0e18 ? static_cast<std::int64_t>(d)
                                  : (d < 0 ? std::numeric_limits<std::int64_t>::min()
                                           : std::numeric_limits<std::int64_t>::max());
    } else {
        reject(param, "expected an integer, got " + type_name(value));
    }
    if (x < min || x > max) {
        reject(param, "must be between " + std::to_string(min) + " and " + std::to_string(max) +
                          ", got " + value.dump());
    }
    return x;
}

// Message content: a string, null, or an array of text parts (joined).
std::string parse_content(const json& value, const std::string& param) {
    if (value.is_null()) return {};
    if (value.is_string()) return value.get<std::string>();
    if (!value.is_array()) {
        reject(param, "expected a string or an array of content parts, got " + type_name(value));
    }
    std::string text;
    for (std::size_t i = 0; i < value.size(); ++i) {
        const std::string part_param = param + "[" + std::to_string(i) + "]";
        const json& part = value[i];
        if (part.is_string()) {  // lenient: a bare string part
            text += part.get<std::string>();
            continue;
        }
        if (!part.is_object()) reject(part_param, "expected a content part object");
        const json* type = field(part, "type");
        if (type == nullptr) reject(part_param + ".type", "is required");
        const std::string type_str = get_string(*type, part_param + ".type");
        if (type_str != "text" && type_str != "input_text") {
            reject(part_param + ".type",
                   "content part type '" + type_str +
                       "' is not supported; this model takes text parts only");
        }
        const json* part_text = field(part, "text");
        if (part_text == nullptr) reject(part_param + ".text", "is required");
        text += get_string(*part_text, part_param + ".text");
    }
    return text;
}

ToolCall parse_tool_call(const json& value, const std::string& param) {
    if (!value.is_object()) reject(param, "expected a tool call object");
    ToolCall call;
    if (const json* id = field(value, "id")) call.id = get_string(*id, param + ".id");
    if (const json* type = field(value, "type")) {
        if (get_string(*type, param + ".type") != "function") {
            reject(param + ".type", "only \"function\" tool calls are supported");
        }
    }
    const json* function = field(value, "function");
    if (function == nullptr || !function->is_object()) {
        reject(param + ".function", "is required and must be an object");
    }
    const json* name = field(*function, "name");
    if (name == nullptr) reject(param + ".function.name", "is required");
    call.name = get_string(*name, param + ".function.name");
    if (const json* arguments = field(*function, "arguments")) {
        // The wire format is a JSON string; some clients send the object itself.
        if (arguments->is_string()) {
            call.arguments = arguments->get<std::string>();
        } else if (arguments->is_object()) {
            call.arguments = arguments->dump();
        } else {
            reject(param + ".function.arguments", "expected a JSON string");
        }
    } else {
        call.arguments = "{}";
    }
    return call;
}

ChatMessage parse_message(const json& value, const std::string& param) {
    if (!value.is_object()) reject(param, "expected a message object, got " + type_name(value));
    ChatMessage message;
    const json* role = field(value, "role");
    if (role == nullptr) reject(param + ".role", "is required");
    message.role = get_string(*role, param + ".role");
    if (message.role != "system" && message.role != "developer" && message.role != "user" &&
        message.role != "assistant" && message.role != "tool") {
        reject(param + ".role", "must be one of system, developer, user, assistant, tool; got '" +
                                    message.role + "'");
    }
    if (const json* content = field(value, "content")) {
        message.content = parse_content(*content, param + ".content");
    }
    if (const json* name = field(value, "name")) message.name = get_string(*name, param + ".name");
    if (const json* id = field(value, "tool_call_id")) {
        message.tool_call_id = get_string(*id, param + ".tool_call_id");
    }
    if (const json* reasoning = field(value, "reasoning_content")) {
        message.reasoning_content = get_string(*reasoning, param + ".reasoning_content");
    }
    if (const json* calls = field(value, "tool_calls")) {
        if (!calls->is_array()) reject(param + ".tool_calls", "expected an array");
        if (message.role != "assistant") {
            reject(param + ".tool_calls", "only assistant messages carry tool calls");
        }
        for (std::size_t i = 0; i < calls->size(); ++i) {
            message.tool_calls.push_back(
                parse_tool_call((*calls)[i], param + ".tool_calls[" + std::to_string(i) + "]"));
        }
    }
    return message;
}

json parse_tools(const json& value, const RequestLimits& limits) {
    if (!value.is_array()) reject("tools", "expected an array, got " + type_name(value));
    if (value.size() > limits.max_tools) {
        reject("tools", "at most " + std::to_string(limits.max_tools) + " tools");
    }
    for (std::size_t i = 0; i < value.size(); ++i) {
        const std::string param = "tools[" + std::to_string(i) + "]";
        const json& tool = value[i];
        if (!tool.is_object()) reject(param, "expected a tool object");
        const json* type = field(tool, "type");
        if (type == nullptr || get_string(*type, param + ".type") != "function") {
            reject(param + ".type", "must be \"function\"");
        }
        const json* function = field(tool, "function");
        if (function == nullptr || !function->is_object()) {
            reject(param + ".function", "is required and must be an object");
        }
        const json* name = field(*function, "name");
        if (name == nullptr) reject(param + ".function.name", "is required");
        if (get_string(*name, param + ".function.name").empty()) {
            reject(param + ".function.name", "must not be empty");
        }
        if (const json* description = field(*function, "description")) {
            get_string(*description, param + ".function.description");
        }
        if (const json* parameters = field(*function, "parameters")) {
            if (!parameters->is_object()) {
                reject(param + ".function.parameters", "expected a JSON Schema object");
            }
        }
    }
    return value;
}

ToolChoice parse_tool_choice(const json& value, const json& tools) {
    ToolChoice choice;
    if (value.is_string()) {
        const std::string mode = value.get<std::string>();
        if (mode == "auto") {
            choice.mode = ToolChoiceMode::automatic;
        } else if (mode == "none") {
            choice.mode = ToolChoiceMode::none;
        } else if (mode == "required") {
            choice.mode = ToolChoiceMode::required;
        } else {
            reject("tool_choice", "must be \"none\", \"auto\", \"required\" or a function object");
        }
    } else if (value.is_object()) {
        const json* function = field(value, "function");
        if (function == nullptr || !function->is_object()) {
            reject("tool_choice.function", "is required and must be an object");
        }
        const json* name = field(*function, "name");
        if (name == nullptr) reject("tool_choice.function.name", "is required");
        choice.mode = ToolChoiceMode::function;
        choice.function_name = get_string(*name, "tool_choice.function.name");
        bool found = false;
        for (const auto& tool : tools) found = found || tool["function"]["name"] == *name;
        if (!found) {
            reject("tool_choice.function.name",
                   "no tool named '" + choice.function_name + "' in tools");
        }
    } else {
        reject("tool_choice", "expected a string or an object, got " + type_name(value));
    }
    if (choice.mode != ToolChoiceMode::none && choice.mode != ToolChoiceMode::automatic &&
        tools.empty()) {
        reject("tool_choice", "requires tools");
    }
    return choice;
}

std::vector<std::string> parse_stop(const json& value, const RequestLimits& limits) {
    std::vector<std::string> stops;
    auto add = [&](const json& item, const std::string& param) {
        std::string stop = get_string(item, param);
        if (stop.size() > limits.max_stop_bytes) {
            reject(param, "longer than " + std::to_string(limits.max_stop_bytes) + " bytes");
        }
        if (!stop.empty()) stops.push_back(std::move(stop));
    };
    if (value.is_string()) {
        add(value, "stop");
    } else if (value.is_array()) {
        if (value.size() > limits.max_stop_strings) {
            reject("stop", "at most " + std::to_string(limits.max_stop_strings) + " stop strings");
        }
        for (std::size_t i = 0; i < value.size(); ++i) {
            add(value[i], "stop[" + std::to_string(i) + "]");
        }
    } else {
        reject("stop", "expected a string or an array of strings, got " + type_name(value));
    }
    return stops;
}

// Fields shared by both endpoints.
void parse_common(const json& body, const RequestLimits& limits, CompletionRequest& request) {
    if (const json* model = field(body, "model")) request.model = get_string(*model, "model");
    if (const json* n = field(body, "n")) {
        if (get_integer(*n, "n", std::numeric_limits<std::int64_t>::min(),
                        std::numeric_limits<std::int64_t>::max()) != 1) {
            reject("n", "only n = 1 is supported");
        }
    }
    if (const json* stream = field(body, "stream")) request.stream = get_bool(*stream, "stream");
    if (const json* options = field(body, "stream_options")) {
        if (!options->is_object()) reject("stream_options", "expected an object");
        if (const json* usage = field(*options, "include_usage")) {
            request.include_usage = get_bool(*usage, "stream_options.include_usage");
        }
    }
    // OpenAI's precedence: max_completion_tokens over the deprecated max_tokens.
    for (const char* name : {"max_tokens", "max_completion_tokens"}) {
        if (const json* max = field(body, name)) {
            request.max_tokens = get_integer(*max, name, 1, limits.max_tokens);
        }
    }
    SamplingParams& s = request.sampling;
    if (const json* v = field(body, "temperature"))
        s.temperature = get_number(*v, "temperature", 0, 2);
    if (const json* v = field(body, "top_p")) s.top_p = get_number(*v, "top_p", 0, 1);
    if (const json* v = field(body, "top_k")) {
        // -1 means off in llama.cpp; 0 means off here.
        s.top_k =
            static_cast<int>(std::max<std::int64_t>(0, get_integer(*v, "top_k", -1, 1 << 20)));
    }
    if (const json* v = field(body, "min_p")) s.min_p = get_number(*v, "min_p", 0, 1);
    if (const json* v = field(body, "seed")) {
        s.seed = static_cast<std::uint64_t>(get_integer(*v, "seed",
                                                        std::numeric_limits<std::int64_t>::min(),
                                                        std::numeric_limits<std::int64_t>::max()));
    }
    if (const json* v = field(body, "presence_penalty")) {
        s.presence_penalty = get_number(*v, "presence_penalty", -2, 2);
    }
    if (const json* v = field(body, "frequency_penalty")) {
        s.frequency_penalty = get_number(*v, "frequency_penalty", -2, 2);
    }
    if (const json* v = field(body, "repetition_penalty")) {
        s.repetition_penalty = get_number(*v, "repetition_penalty", 0, 10);
        if (*s.repetition_penalty <= 0) reject("repetition_penalty", "must be greater than 0");
    }
    if (const json* v = field(body, "logit_bias")) {
        if (!v->is_object()) reject("logit_bias", "expected an object of token id → bias");
        if (v->size() > limits.max_logit_bias) {
            reject("logit_bias", "at most " + std::to_string(limits.max_logit_bias) + " entries");
        }
        for (const auto& [key, bias] : v->items()) {
            const std::string param = "logit_bias." + key;
            std::size_t used = 0;
            long long id = -1;
            try {
                id = std::stoll(key, &used);
            } catch (const std::exception&) {
                used = 0;
            }
            if (used != key.size() || id < 0 || id > std::numeric_limits<std::int32_t>::max()) {
                reject(param, "keys must be token ids");
            }
            s.logit_bias.emplace_back(static_cast<std::int32_t>(id),
                                      get_number(bias, param, -100, 100));
        }
    }
    if (const json* v = field(body, "stop")) request.stop = parse_stop(*v, limits);
}

template <class Parse>
ApiResult<CompletionRequest> guarded(Parse&& parse) {
    try {
        return parse();
    } catch (const ApiException& e) {
        return e.error();
    } catch (const std::exception& e) {
        // nlohmann type errors on shapes we did not foresee: still the client's request.
        return make_api_error(ErrorKind::invalid_request,
                              std::string("invalid request: ") + e.what());
    }
}

}  // namespace

ApiResult<nlohmann::json> parse_json_body(std::string_view body) {
    const std::size_t bad = find_invalid_utf8(body);
    if (bad != body.size()) {
        return make_api_error(ErrorKind::invalid_json,
                              "request body is not valid UTF-8 (byte " + std::to_string(bad) + ")");
    }
    json parsed;
    try {
        parsed = json::parse(body);
    } catch (const json::exception& e) {  // parse_error, and out_of_range for 1e999
        return make_api_error(ErrorKind::invalid_json,
                              std::string("request body is not valid JSON: ") + e.what());
    }
    if (!parsed.is_object()) {
        return make_api_error(ErrorKind::invalid_json, "request body must be a JSON object");
    }
    return ApiResult<nlohmann::json>(boost::system::in_place_value, std::move(parsed));
}

ApiResult<CompletionRequest> parse_chat_request(const nlohmann::json& body,
                                                const RequestLimits& limits) {
    return guarded([&]() -> ApiResult<CompletionRequest> {
        CompletionRequest request;
        request.endpoint = Endpoint::chat_completions;
        parse_common(body, limits, request);

        const json* messages = field(body, "messages");
        if (messages == nullptr) reject("messages", "is required");
        if (!messages->is_array())
            reject("messages", "expected an array, got " + type_name(*messages));
        if (messages->empty()) reject("messages", "must contain at least one message");
        if (messages->size() > limits.max_messages) {
            reject("messages", "at most " + std::to_string(limits.max_messages) + " messages");
        }
        for (std::size_t i = 0; i < messages->size(); ++i) {
            request.messages.push_back(
                parse_message((*messages)[i], "messages[" + std::to_string(i) + "]"));
        }

        if (const json* tools = field(body, "tools")) request.tools = parse_tools(*tools, limits);
        if (const json* choice = field(body, "tool_choice")) {
            request.tool_choice = parse_tool_choice(*choice, request.tools);
        }
        if (const json* parallel = field(body, "parallel_tool_calls")) {
            request.parallel_tool_calls = get_bool(*parallel, "parallel_tool_calls");
        }
        if (const json* kwargs = field(body, "chat_template_kwargs")) {
            if (!kwargs->is_object()) reject("chat_template_kwargs", "expected an object");
            request.chat_template_kwargs = *kwargs;
        }
        if (const json* logprobs = field(body, "logprobs")) {
            request.logprobs = get_bool(*logprobs, "logprobs");
        }
        if (const json* top = field(body, "top_logprobs")) {
            request.top_logprobs = static_cast<int>(get_integer(*top, "top_logprobs", 0, 20));
            if (request.top_logprobs > 0 && !request.logprobs) {
                reject("top_logprobs", "requires logprobs: true");
            }
        }
        if (const json* format = field(body, "response_format")) {
            if (!format->is_object()) reject("response_format", "expected an object");
            const json* type = field(*format, "type");
            if (type == nullptr) reject("response_format.type", "is required");
            const std::string type_str = get_string(*type, "response_format.type");
            if (type_str == "json_object") {
                request.response_format = ResponseFormat::json_object;
            } else if (type_str != "text") {
                reject("response_format.type", "'" + type_str +
                                                   "' is not supported; use \"text\" or "
                                                   "\"json_object\"");
            }
        }
        return request;
    });
}

ApiResult<CompletionRequest> parse_completion_request(const nlohmann::json& body,
                                                      const RequestLimits& limits) {
    return guarded([&]() -> ApiResult<CompletionRequest> {
        CompletionRequest request;
        request.endpoint = Endpoint::completions;
        parse_common(body, limits, request);

        const json* prompt = field(body, "prompt");
        if (prompt == nullptr) reject("prompt", "is required");
        auto token_ids = [&](const json& ids, const std::string& param) {
            if (ids.empty()) reject(param, "must not be empty");
            if (ids.size() > limits.max_prompt_token_ids) reject(param, "too many token ids");
            for (std::size_t i = 0; i < ids.size(); ++i) {
                request.prompt_token_ids.push_back(static_cast<std::int32_t>(
                    get_integer(ids[i], param + "[" + std::to_string(i) + "]", 0,
                                std::numeric_limits<std::int32_t>::max())));
            }
        };
        if (prompt->is_string()) {
            request.prompt = prompt->get<std::string>();
        } else if (prompt->is_array()) {
            if (prompt->empty()) reject("prompt", "must not be empty");
            const json& first = (*prompt)[0];
            if (first.is_number()) {
                token_ids(*prompt, "prompt");
            } else if (prompt->size() != 1) {
                reject("prompt", "only one prompt per request is supported");
            } else if (first.is_string()) {
                request.prompt = first.get<std::string>();
            } else if (first.is_array()) {
                token_ids(first, "prompt[0]");
            } else {
                reject("prompt[0]", "expected a string or an array of token ids");
            }
        } else {
            reject("prompt", "expected a string, an array of strings or token ids, got " +
                                 type_name(*prompt));
        }
        if (const json* echo = field(body, "echo")) {
            if (get_bool(*echo, "echo")) reject("echo", "echo is not supported");
        }
        if (const json* suffix = field(body, "suffix")) {
            if (!get_string(*suffix, "suffix").empty()) reject("suffix", "suffix is not supported");
        }
        if (const json* best_of = field(body, "best_of")) {
            if (get_integer(*best_of, "best_of", 0, 1 << 20) != 1) {
                reject("best_of", "only best_of = 1 is supported");
            }
        }
        if (const json* logprobs = field(body, "logprobs")) {
            // Legacy: an integer count of alternatives (≤ 5 in OpenAI; 20 here, as chat).
            request.top_logprobs = static_cast<int>(get_integer(*logprobs, "logprobs", 0, 20));
            request.logprobs = true;
        }
        return request;
    });
}

}  // namespace brigade::api
