// The status page at GET /: HTML with the service's status text, escaped; the health alone
// without the API key where the node has one.
#include "api/status_page.hpp"

#include <gtest/gtest.h>

#include "api/router.hpp"

namespace brigade::api {
namespace {

class TextService final : public CompletionService {
public:
    void start(CompletionRequest, std::shared_ptr<CompletionSink>,
               std::shared_ptr<Cancellation>) override {}
    std::vector<ModelInfo> list_models() override {
        return {ModelInfo{model_, {}, 1, "brigade", 4096}};
    }
    Health health() override { return health_; }
    std::optional<std::string> status_text() override { return text_; }

    std::string model_ = "demo";
    Health health_{HealthState::ok, "", std::nullopt};
    std::optional<std::string> text_ = "nodes (2):\n  *  a1b2c3d4  alive\n";
};

RouteResult get_page(const Router& router, std::string_view auth = "",
                     std::string_view method = "GET") {
    return router.route(HttpRequestInfo{method, "/", auth, ""}, "req-1");
}

TEST(StatusPage, ShowsTheServicesTextAsHtml) {
    TextService service;
    Router router({}, service);
    const auto r = get_page(router);
    ASSERT_TRUE(r.response);
    EXPECT_EQ(r.response->status, 200);
    EXPECT_EQ(r.response->content_type, "text/html; charset=utf-8");
    const std::string& html = r.response->body;
    EXPECT_EQ(html.rfind("<!doctype html>", 0), 0u) << html;
    EXPECT_NE(html.find("<pre>nodes (2):\n  *  a1b2c3d4  alive\n</pre>"), std::string::npos)
        << html;
    EXPECT_NE(html.find("<title>Brigade: demo (ok)</title>"), std::string::npos) << html;
    EXPECT_NE(html.find("http-equiv=\"refresh\""), std::string::npos) << html;
    EXPECT_EQ(get_page(router, "", "HEAD").response->status, 200);
    EXPECT_EQ(get_page(router, "", "POST").response->status, 405);
}

TEST(StatusPage, SaysWhyTheMeshIsNotServed) {
    TextService service;
    service.health_ = {HealthState::unavailable, "re-planning", std::nullopt};
    service.text_.reset();
    Router router({}, service);
    const std::string html = get_page(router).response->body;
    EXPECT_NE(html.find("status <b class=\"other\">unavailable</b>: re-planning"),
              std::string::npos)
        << html;
    EXPECT_EQ(html.find("<pre>"), std::string::npos) << html;
}

// Whatever the names hold (a model directory, an alias, a detail quoting a peer), the page
// carries them as text, never as markup.
TEST(StatusPage, EscapesEveryText) {
    TextService service;
    service.model_ = "<script>alert(1)</script>";
    service.health_ = {HealthState::loading, "layers \"0\" & 'up'", std::nullopt};
    service.text_ = "model </pre><img src=x onerror=alert(2)>\n";
    Router router({}, service);
    const std::string html = get_page(router).response->body;
    EXPECT_EQ(html.find("<script>"), std::string::npos) << html;
    EXPECT_EQ(html.find("<img"), std::string::npos) << html;
    EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos) << html;
    EXPECT_NE(html.find("layers &quot;0&quot; &amp; &#39;up&#39;"), std::string::npos) << html;
    EXPECT_NE(html.find("&lt;/pre&gt;&lt;img src=x onerror=alert(2)&gt;"), std::string::npos)
        << html;
    EXPECT_EQ(html_escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
    EXPECT_EQ(html_escape("plain ünïcode"), "plain ünïcode");
}

// With an API key the page is open as /health is, but shows no more than it without the key.
TEST(StatusPage, WithoutTheApiKeyShowsOnlyTheHealth) {
    TextService service;
    RouterOptions options;
    options.api_key = "k-123";
    Router router(options, service);
    const auto locked = get_page(router);
    ASSERT_TRUE(locked.response);
    EXPECT_EQ(locked.response->status, 200);
    EXPECT_EQ(locked.response->body.find("a1b2c3d4"), std::string::npos) << locked.response->body;
    EXPECT_NE(locked.response->body.find("API key"), std::string::npos) << locked.response->body;
    EXPECT_EQ(get_page(router, "Bearer k-12").response->body.find("a1b2c3d4"), std::string::npos);
    EXPECT_NE(get_page(router, "Bearer k-123").response->body.find("a1b2c3d4"), std::string::npos);
}

}  // namespace
}  // namespace brigade::api
