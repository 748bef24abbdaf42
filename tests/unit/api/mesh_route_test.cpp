// GET /v1/mesh: answered from CompletionService::mesh_status, 404 where the service has no mesh.

#include <gtest/gtest.h>

#include "api/router.hpp"

namespace brigade::api {
namespace {

using nlohmann::json;

class MeshService final : public CompletionService {
public:
    void start(CompletionRequest, std::shared_ptr<CompletionSink>,
               std::shared_ptr<Cancellation>) override {}
    std::vector<ModelInfo> list_models() override { return {}; }
    Health health() override { return {}; }
    std::optional<json> mesh_status() override { return status_; }
    std::optional<json> status_;
};

RouteResult route(const Router& router, std::string_view method, std::string_view target,
                  std::string_view auth = "") {
    return router.route(HttpRequestInfo{method, target, auth, ""}, "req-7");
}

TEST(MeshRoute, ReturnsTheServicesJson) {
    MeshService service;
    service.status_ = json{{"mesh_id", "ab"}, {"epoch", 3}, {"nodes", json::array()}};
    Router router({}, service);
    auto r = route(router, "GET", "/v1/mesh");
    ASSERT_TRUE(r.response);
    EXPECT_EQ(r.response->status, 200);
    EXPECT_EQ(r.response->content_type, "application/json");
    EXPECT_EQ(json::parse(r.response->body), *service.status_);
    auto slash = route(router, "GET", "/v1/mesh/?pretty=1");
    ASSERT_TRUE(slash.response);
    EXPECT_EQ(slash.response->status, 200);
}

TEST(MeshRoute, NotInAMeshIs404) {
    MeshService service;
    Router router({}, service);
    auto r = route(router, "GET", "/v1/mesh");
    ASSERT_TRUE(r.response);
    EXPECT_EQ(r.response->status, 404);
    EXPECT_NE(r.response->body.find("not part of a mesh"), std::string::npos);
}

TEST(MeshRoute, GetOnlyAndBehindTheApiKey) {
    MeshService service;
    service.status_ = json::object();
    RouterOptions options;
    options.api_key = "k";
    Router router(options, service);
    auto post = route(router, "POST", "/v1/mesh", "Bearer k");
    ASSERT_TRUE(post.response);
    EXPECT_EQ(post.response->status, 405);
    auto anonymous = route(router, "GET", "/v1/mesh");
    ASSERT_TRUE(anonymous.response);
    EXPECT_EQ(anonymous.response->status, 401);
    auto keyed = route(router, "GET", "/v1/mesh", "Bearer k");
    ASSERT_TRUE(keyed.response);
    EXPECT_EQ(keyed.response->status, 200);
}

}  // namespace
}  // namespace brigade::api
