#include "api/router.hpp"

#include <gtest/gtest.h>

#include <set>

namespace brigade::api {
namespace {

using nlohmann::json;

class StaticService final : public CompletionService {
public:
    void start(CompletionRequest, std::shared_ptr<CompletionSink>,
               std::shared_ptr<Cancellation>) override {}
    std::vector<ModelInfo> list_models() override {
        return {ModelInfo{"qwen2.5-0.5b", {"/models/qwen", "q"}, 1, "brigade", 32768}};
    }
    Health health() override { return health_; }
    Health health_{HealthState::ok, "", std::nullopt};
};

RouteResult route(const Router& router, std::string_view method, std::string_view target,
                  std::string_view body = "", std::string_view auth = "") {
    return router.route(HttpRequestInfo{method, target, auth, body}, "req-1");
}

TEST(Router, HealthReportsLoadingAs503) {
    StaticService service;
    Router router({}, service);
    auto ok = route(router, "GET", "/health");
    ASSERT_TRUE(ok.response);
    EXPECT_EQ(ok.response->status, 200);
    service.health_ = {HealthState::loading, "layers 0-11", std::nullopt};
    auto loading = route(router, "GET", "/health");
    EXPECT_EQ(loading.response->status, 503);
    EXPECT_EQ(json::parse(loading.response->body),
              json({{"status", "loading"}, {"detail", "layers 0-11"}}));
}

// The load appears only where the service counts it; the head's part only on the head.
TEST(Router, HealthCarriesTheRequestLoad) {
    StaticService service;
    Router router({}, service);
    EXPECT_EQ(json::parse(route(router, "GET", "/health").response->body),
              json({{"status", "ok"}}));
    service.health_.load = RequestLoad{3, 2, 1, 380, 2};
    EXPECT_EQ(
        json::parse(route(router, "GET", "/health").response->body),
        json({{"status", "ok"},
              {"requests", {{"in_flight", 3}}},
              {"head",
               {{"running", 2}, {"queued", 1}, {"kv_positions", 380}, {"paused_for_kv", 2}}}}));
    service.health_.load = RequestLoad{4, -1, -1};
    EXPECT_EQ(json::parse(route(router, "GET", "/health").response->body),
              json({{"status", "ok"}, {"requests", {{"in_flight", 4}}}}));
}

TEST(Router, ModelsListEveryName) {
    StaticService service;
    Router router({}, service);
    auto models = route(router, "GET", "/v1/models/?x=1");  // trailing slash and query
    ASSERT_TRUE(models.response);
    const json body = json::parse(models.response->body);
    std::set<std::string> ids;
    for (const auto& m : body["data"]) ids.insert(m["id"].get<std::string>());
    EXPECT_EQ(ids, (std::set<std::string>{"qwen2.5-0.5b", "/models/qwen", "q"}));
    EXPECT_EQ(body["data"][0]["context_length"], 32768);
}

// GET /v1/models/{model}, as the OpenAI SDKs' models.retrieve asks: by id or alias (a path
// alias sent as is or percent-encoded); anything else a 404 model_not_found.
TEST(Router, OneModelByAnyOfItsNames) {
    StaticService service;
    Router router({}, service);
    auto by_id = route(router, "GET", "/v1/models/qwen2.5-0.5b");
    ASSERT_TRUE(by_id.response);
    EXPECT_EQ(by_id.response->status, 200);
    const json model = json::parse(by_id.response->body);
    EXPECT_EQ(model["id"], "qwen2.5-0.5b");
    EXPECT_EQ(model["object"], "model");
    EXPECT_EQ(model["context_length"], 32768);
    EXPECT_FALSE(model.contains("root"));
    const json alias = json::parse(route(router, "GET", "/models/q").response->body);
    EXPECT_EQ(alias["id"], "q");
    EXPECT_EQ(alias["root"], "qwen2.5-0.5b");
    for (const char* path : {"/v1/models//models/qwen", "/v1/models/%2Fmodels%2fqwen"}) {
        auto r = route(router, "GET", path);
        EXPECT_EQ(r.response->status, 200) << path;
        EXPECT_EQ(json::parse(r.response->body)["id"], "/models/qwen") << path;
    }
    for (const char* path :
         {"/v1/models/nope", "/v1/models/%zz", "/v1/models/%2", "/v1/models/%"}) {
        auto r = route(router, "GET", path);
        ASSERT_TRUE(r.response) << path;
        EXPECT_EQ(r.response->status, 404) << path;
        ASSERT_TRUE(r.response->error) << path;
        EXPECT_EQ(r.response->error->kind, ErrorKind::model_not_found) << path;
    }
    EXPECT_EQ(route(router, "POST", "/v1/models/q").response->status, 405);
    RouterOptions keyed;
    keyed.api_key = "k";
    EXPECT_EQ(route(Router(keyed, service), "GET", "/v1/models/q").response->status, 401);
}

TEST(Router, CompletionRequestsCarryTheId) {
    StaticService service;
    Router router({}, service);
    auto chat = route(router, "POST", "/v1/chat/completions",
                      R"({"model": "q", "messages": [{"role": "user", "content": "hi"}]})");
    ASSERT_TRUE(chat.completion);
    EXPECT_EQ(chat.completion->id, "req-1");
    EXPECT_EQ(chat.completion->endpoint, Endpoint::chat_completions);
    auto text = route(router, "POST", "/completions", R"({"prompt": "x"})");
    ASSERT_TRUE(text.completion);
    EXPECT_EQ(text.completion->endpoint, Endpoint::completions);
}

TEST(Router, ErrorsAndMethods) {
    StaticService service;
    Router router({}, service);
    EXPECT_EQ(route(router, "GET", "/nowhere").response->status, 404);
    EXPECT_EQ(route(router, "DELETE", "/v1/models").response->status, 405);
    EXPECT_EQ(route(router, "HEAD", "/health").response->status, 200);
    auto bad = route(router, "POST", "/v1/chat/completions", "not json");
    EXPECT_EQ(bad.response->status, 400);
    ASSERT_TRUE(bad.response->error);
    EXPECT_EQ(bad.response->error->kind, ErrorKind::invalid_json);
    auto options = route(router, "OPTIONS", "/anything");
    EXPECT_EQ(options.response->status, 204);
}

TEST(Router, BearerKey) {
    StaticService service;
    RouterOptions options;
    options.api_key = "k-123";
    Router router(options, service);
    EXPECT_EQ(route(router, "GET", "/v1/models").response->status, 401);
    EXPECT_EQ(route(router, "GET", "/v1/models", "", "Bearer k-12").response->status, 401);
    EXPECT_EQ(route(router, "GET", "/v1/models", "", "Basic k-123").response->status, 401);
    EXPECT_EQ(route(router, "GET", "/v1/models", "", "Bearer k-123").response->status, 200);
    EXPECT_EQ(route(router, "GET", "/v1/models", "", "bearer k-123 ").response->status, 200);
    EXPECT_EQ(route(router, "GET", "/health").response->status, 200);
    EXPECT_EQ(route(router, "OPTIONS", "/v1/models").response->status, 204);
}

TEST(Router, CorsCanBeTurnedOff) {
    StaticService service;
    RouterOptions options;
    options.cors_origin = "";
    EXPECT_TRUE(Router(options, service).cors_headers().empty());
    EXPECT_FALSE(Router({}, service).cors_headers().empty());
}

TEST(RequestIds, UniqueAndPrefixed) {
    RequestIdGenerator ids(0xabcdef);
    const std::string a = ids.next("chatcmpl"), b = ids.next("chatcmpl");
    EXPECT_NE(a, b);
    EXPECT_TRUE(a.starts_with("chatcmpl-00abcdef"));
    EXPECT_EQ(Router::id_prefix("/v1/completions"), "cmpl");
    EXPECT_EQ(Router::id_prefix("/chat/completions"), "chatcmpl");
}

TEST(FindModel, IdAliasesAndDefault) {
    const std::vector<ModelInfo> models = {{"a", {"/path/a", "alias-a"}, 0, "x", 0},
                                           {"b", {}, 0, "x", 0}};
    EXPECT_EQ(find_model(models, "a"), &models[0]);
    EXPECT_EQ(find_model(models, "/path/a"), &models[0]);
    EXPECT_EQ(find_model(models, "alias-a"), &models[0]);
    EXPECT_EQ(find_model(models, "b"), &models[1]);
    EXPECT_EQ(find_model(models, ""), &models[0]);
    EXPECT_EQ(find_model(models, "default_model"), &models[0]);
    EXPECT_EQ(find_model(models, "gpt-4o"), nullptr);
    EXPECT_EQ(find_model({}, ""), nullptr);
}

TEST(CancellationTest, CallbacksRunOnce) {
    Cancellation cancel;
    int calls = 0;
    cancel.on_cancel([&] { ++calls; });
    EXPECT_FALSE(cancel.cancelled());
    cancel.cancel();
    cancel.cancel();
    EXPECT_TRUE(cancel.cancelled());
    EXPECT_EQ(calls, 1);
    cancel.on_cancel([&] { ++calls; });  // already cancelled: runs at once
    EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace brigade::api
