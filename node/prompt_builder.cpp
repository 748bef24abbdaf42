#include "node/prompt_builder.hpp"

#include <functional>

#include "api/reasoning_splitter.hpp"
#include "api/tool_call_parser.hpp"

namespace brigade::node {
namespace {

nlohmann::ordered_json messages_json(const std::vector<api::ChatMessage>& messages) {
    auto out = nlohmann::ordered_json::array();
    for (const auto& m : messages) {
        nlohmann::ordered_json j;
        j["role"] = m.role;
        j["content"] = m.content;
        if (m.name) j["name"] = *m.name;
        if (m.tool_call_id) j["tool_call_id"] = *m.tool_call_id;
        if (m.reasoning_content) j["reasoning_content"] = *m.reasoning_content;
        if (!m.tool_calls.empty()) {
            auto calls = nlohmann::ordered_json::array();
            for (const auto& c : m.tool_calls) {
                // Arguments stay the wire's JSON string: ChatTemplate (ToolArguments::automatic)
                // turns them into objects for templates that want objects (formats.md §5.3).
                calls.push_back({{"id", c.id},
                                 {"type", "function"},
                                 {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
            }
            j["tool_calls"] = std::move(calls);
        }
        out.push_back(std::move(j));
    }
    return out;
}

api::ServiceError bad(std::string message, std::string param) {
    return {api::ErrorKind::invalid_request, std::move(message), std::move(param)};
}

}  // namespace

std::variant<PreparedPrompt, api::ServiceError> prepare_prompt(const ModelFrontend& model,
                                                               const api::CompletionRequest& req) {
    PreparedPrompt p;
    std::string rendered;
    const bool chat = req.endpoint == api::Endpoint::chat_completions;
    const bool use_tools =
        chat && !req.tools.empty() && req.tool_choice.mode != api::ToolChoiceMode::none;
    if (chat) {
        if (!model.chat_template) {
            return api::ServiceError{
                api::ErrorKind::not_supported,
                "model '" + model.info.id + "' has no chat template; use /v1/completions",
                "messages"};
        }
        model::text::ChatTemplateInputs in;
        in.messages = messages_json(req.messages);
        if (use_tools) in.tools = nlohmann::ordered_json::parse(req.tools.dump());
        in.add_generation_prompt = true;
        if (req.chat_template_kwargs.is_object()) {
            in.extra = nlohmann::ordered_json::parse(req.chat_template_kwargs.dump());
        }
        auto r = model.chat_template->render(in);
        if (!r)
            return bad("the chat template failed on these messages: " + r.error().message,
                       "messages");
        rendered = std::move(*r);
        // The template writes the special tokens (BOS, role markers) itself.
        auto ids = model.tokenizer.encode(rendered, /*add_special_tokens=*/false);
        if (!ids) return bad(ids.error().message, "messages");
        p.tokens = std::move(*ids);
    } else if (!req.prompt_token_ids.empty()) {
        for (auto id : req.prompt_token_ids) {
            if (id < 0 || id >= model.vocab_size) {
                return bad("token id " + std::to_string(id) + " is outside the vocabulary (size " +
                               std::to_string(model.vocab_size) + ")",
                           "prompt");
            }
        }
        p.tokens = req.prompt_token_ids;
    } else {
        rendered = req.prompt;
        auto ids = model.tokenizer.encode(req.prompt, /*add_special_tokens=*/true);
        if (!ids) return bad(ids.error().message, "prompt");
        p.tokens = std::move(*ids);
    }
    const char* prompt_param = chat ? "messages" : "prompt";
    if (p.tokens.empty()) return bad("the prompt has no tokens", prompt_param);

    const auto n_prompt = static_cast<std::int64_t>(p.tokens.size());
    const std::int64_t room = model.context - n_prompt;
    if (req.max_tokens ? *req.max_tokens > room : room < 1) {
        return api::ServiceError{
            api::ErrorKind::context_length_exceeded,
            "this model's context is " + std::to_string(model.context) +
                " tokens; the prompt has " + std::to_string(n_prompt) +
                (req.max_tokens ? " and max_tokens is " + std::to_string(*req.max_tokens) : "") +
                ". Shorten the prompt or lower max_tokens.",
            prompt_param};
    }
    p.max_new_tokens = req.max_tokens ? *req.max_tokens : room;

    const std::string& tpl = model.chat_template ? model.chat_template->source() : std::string();
    p.output.stop = req.stop;
    p.output.tool_format =
        use_tools ? api::detect_tool_call_format(tpl) : api::ToolCallFormat::none;
    p.output.parse_reasoning = chat && tpl.find("<think>") != std::string::npos;
    p.output.starts_in_reasoning =
        p.output.parse_reasoning && api::prompt_opens_reasoning(rendered);
    p.output.id_seed = std::hash<std::string>{}(req.id);
    return p;
}

model::SamplingParams resolve_sampling(const api::CompletionRequest& request,
                                       const SamplingDefaults& defaults) {
    const auto& s = request.sampling;
    model::SamplingParams p;
    p.temperature = static_cast<float>(s.temperature.value_or(defaults.temperature));
    p.top_p = static_cast<float>(s.top_p.value_or(defaults.top_p));
    p.top_k = s.top_k.value_or(defaults.top_k);
    p.min_p = static_cast<float>(s.min_p.value_or(defaults.min_p));
    p.repetition_penalty =
        static_cast<float>(s.repetition_penalty.value_or(defaults.repetition_penalty));
    p.presence_penalty = static_cast<float>(s.presence_penalty);
    p.frequency_penalty = static_cast<float>(s.frequency_penalty);
    p.seed = s.seed ? *s.seed : std::hash<std::string>{}(request.id);
    return p;
}

}  // namespace brigade::node
