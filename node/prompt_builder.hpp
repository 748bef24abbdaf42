#pragma once
// A request → prompt tokens and the options of its output pipeline: chat templating (messages,
// tools, tool_choice, chat_template_kwargs), tokenizing, the context check. Runs on the compute
// thread (templating a long history is real work).

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "api/completion_service.hpp"
#include "api/output_processor.hpp"
#include "node/serve_model.hpp"

namespace brigade::node {

struct PreparedPrompt {
    std::vector<std::int32_t> tokens;
    std::int64_t max_new_tokens = 0;  // max_tokens, or what is left of the context
    api::OutputOptions output;
};

// The prepared prompt, or the error to answer with (400 with the field at fault).
std::variant<PreparedPrompt, api::ServiceError> prepare_prompt(const ModelFrontend& model,
                                                               const api::CompletionRequest& req);

// `request.sampling` with the server's defaults filled in; the seed defaults to one derived
// from the request id so two unseeded requests differ.
model::SamplingParams resolve_sampling(const api::CompletionRequest& request,
                                       const SamplingDefaults& defaults);

}  // namespace brigade::node
