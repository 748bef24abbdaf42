#pragma once
// The status page at GET /: what a person opening a node's address in a browser sees. Plain
// HTML without scripts that reloads itself every few seconds; every text in it is escaped.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace brigade::api {

struct StatusPage {
    std::string model;                       // the served model's id ("" when none)
    nlohmann::json health;                   // GET /health's body (health_json)
    std::optional<std::string> status_text;  // the service's text (nodes, plan, links, load)
    // The node has an API key and the request did not carry it: only the health is shown,
    // with how to see the rest.
    bool locked = false;
};

std::string render_status_page(const StatusPage& page);

// `text` with &, <, >, " and ' written as character references.
std::string html_escape(std::string_view text);

}  // namespace brigade::api
