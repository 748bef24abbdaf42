#include "model/text/jinja.hpp"

#include <new>

#include "model/text/jinja_parser.hpp"
#include "model/text/jinja_renderer.hpp"

namespace brigade::model::text {

struct JinjaTemplate::Parsed {
    jinja::Body body;
    jinja::FrameRefs root_frame;
};

namespace {

Error to_error(const jinja::TemplateException& e) {
    std::string message = "chat template";
    if (e.line > 0) message += " line " + std::to_string(e.line);
    message += ": " + e.kind + ": " + e.message;
    return make_error(errc::template_error, std::move(message));
}

}  // namespace

Result<JinjaTemplate> JinjaTemplate::parse(std::string_view source) {
    try {
        auto parsed = std::make_shared<Parsed>();
        parsed->body = jinja::parse_template(source);
        parsed->root_frame = jinja::analyze_frames(parsed->body);
        return JinjaTemplate(std::move(parsed));
    } catch (const jinja::TemplateException& e) {
        return to_error(e);
    } catch (const std::bad_alloc&) {
        return make_error(errc::template_error, "chat template: out of memory while parsing");
    }
}

Result<std::string> JinjaTemplate::render(const nlohmann::ordered_json& context,
                                          const JinjaRenderOptions& options) const {
    if (!context.is_object() && !context.is_null()) {
        return make_error(errc::invalid_argument, "template context must be a JSON object");
    }
    jinja::RenderConfig config;
    config.limits.max_output_bytes = options.max_output_bytes;
    config.limits.max_call_depth = options.max_call_depth;
    config.limits.max_steps = options.max_steps;
    config.strftime_now = options.strftime_now;
    try {
        // The render variables, and below them the template's own top-level scope.
        auto variables = std::make_shared<jinja::Scope>();
        if (context.is_object()) {
            variables->vars.reserve(context.size());
            for (auto it = context.begin(); it != context.end(); ++it) {
                variables->vars.emplace_back(it.key(), jinja::Value::from_json(it.value()));
            }
        }
        auto top = std::make_shared<jinja::Scope>(variables);
        top->frame = &parsed_->root_frame;
        std::string out;
        jinja::Renderer renderer(config);
        renderer.render(parsed_->body, top, out);
        return out;
    } catch (const jinja::TemplateException& e) {
        return to_error(e);
    } catch (const std::bad_alloc&) {
        return make_error(errc::template_error, "chat template: out of memory while rendering");
    }
}

}  // namespace brigade::model::text
