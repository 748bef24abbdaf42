#include "api/status_page.hpp"

namespace brigade::api {
namespace {

// Seconds between reloads: a re-plan or a join shows within a breath, and a page left open
// costs the node one small request each time.
constexpr int kRefreshSeconds = 3;

std::string field(const nlohmann::json& j, const char* key) {
    if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return "";
    return j[key].get<std::string>();
}

}  // namespace

std::string html_escape(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (const char c : text) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&quot;";
                break;
            case '\'':
                out += "&#39;";
                break;
            default:
                out += c;
        }
    }
    return out;
}

std::string render_status_page(const StatusPage& page) {
    const std::string state = field(page.health, "status");
    const std::string detail = field(page.health, "detail");
    const std::string model = page.model.empty() ? "no model" : page.model;
    std::string html =
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta http-equiv=\"refresh\" content=\"" +
        std::to_string(kRefreshSeconds) +
        "\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        "<title>Brigade: " +
        html_escape(model) + " (" + html_escape(state.empty() ? "?" : state) +
        ")</title>\n<style>\n"
        "body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }\n"
        "pre { font-family: ui-monospace, monospace; background: #f6f6f6; padding: 1em; "
        "overflow-x: auto; }\n"
        ".ok { color: #176b2c; } .other { color: #a33; }\n"
        "</style>\n</head>\n<body>\n<h1>Brigade</h1>\n<p>model <b>" +
        html_escape(model) + "</b>, status <b class=\"" + (state == "ok" ? "ok" : "other") + "\">" +
        html_escape(state.empty() ? "unknown" : state) + "</b>";
    if (!detail.empty()) html += ": " + html_escape(detail);
    html += "</p>\n";
    if (page.locked) {
        html +=
            "<p>This node has an API key. The mesh's nodes, plan and requests need it: "
            "<code>brigade status --url URL --api-key KEY</code>, or GET /v1/mesh with "
            "<code>Authorization: Bearer KEY</code>.</p>\n";
    } else if (page.status_text) {
        html += "<pre>" + html_escape(*page.status_text) + "</pre>\n";
    }
    html +=
        "<p>JSON: <a href=\"/v1/mesh\">/v1/mesh</a>, <a href=\"/health\">/health</a>, "
        "<a href=\"/v1/models\">/v1/models</a>. This page reloads every " +
        std::to_string(kRefreshSeconds) + " s.</p>\n</body>\n</html>\n";
    return html;
}

}  // namespace brigade::api
