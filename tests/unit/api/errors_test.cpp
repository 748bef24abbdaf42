#include "api/errors.hpp"

#include <gtest/gtest.h>

namespace brigade::api {
namespace {

TEST(Errors, StatusTable) {
    EXPECT_EQ(map_error(ErrorKind::invalid_request).status, 400);
    EXPECT_EQ(map_error(ErrorKind::invalid_json).status, 400);
    EXPECT_EQ(map_error(ErrorKind::context_length_exceeded).status, 400);
    EXPECT_EQ(map_error(ErrorKind::unauthorized).status, 401);
    EXPECT_EQ(map_error(ErrorKind::model_not_found).status, 404);
    EXPECT_EQ(map_error(ErrorKind::route_not_found).status, 404);
    EXPECT_EQ(map_error(ErrorKind::method_not_allowed).status, 405);
    EXPECT_EQ(map_error(ErrorKind::request_timeout).status, 408);
    EXPECT_EQ(map_error(ErrorKind::payload_too_large).status, 413);
    EXPECT_EQ(map_error(ErrorKind::overloaded).status, 429);
    EXPECT_EQ(map_error(ErrorKind::internal).status, 500);
    EXPECT_EQ(map_error(ErrorKind::not_supported).status, 501);
    EXPECT_EQ(map_error(ErrorKind::unavailable).status, 503);
}

TEST(Errors, OpenAiErrorObject) {
    const auto body = error_json(
        make_api_error(ErrorKind::invalid_request, "max_tokens: must be >= 1", "max_tokens"));
    ASSERT_TRUE(body.contains("error"));
    const auto& e = body["error"];
    EXPECT_EQ(e["message"], "max_tokens: must be >= 1");
    EXPECT_EQ(e["type"], "invalid_request_error");
    EXPECT_EQ(e["param"], "max_tokens");
    EXPECT_TRUE(e["code"].is_null());
}

TEST(Errors, CodesForWellKnownKinds) {
    EXPECT_EQ(error_json(make_api_error(ErrorKind::model_not_found, "x"))["error"]["code"],
              "model_not_found");
    EXPECT_EQ(error_json(make_api_error(ErrorKind::context_length_exceeded, "x"))["error"]["code"],
              "context_length_exceeded");
    EXPECT_EQ(error_json(make_api_error(ErrorKind::unauthorized, "x"))["error"]["code"],
              "invalid_api_key");
    EXPECT_TRUE(
        error_json(make_api_error(ErrorKind::unauthorized, "x"))["error"]["param"].is_null());
}

TEST(Errors, ServerErrorsCarryTheRequestId) {
    const auto body =
        error_json(make_api_error(ErrorKind::internal, "engine failed"), "chatcmpl-1");
    EXPECT_EQ(body["error"]["message"], "engine failed (request id chatcmpl-1)");
    EXPECT_EQ(body["error"]["type"], "server_error");
    // Client errors do not need it.
    EXPECT_EQ(
        error_json(make_api_error(ErrorKind::invalid_request, "bad"), "id")["error"]["message"],
        "bad");
}

TEST(Errors, BodyNeverThrowsOnBadBytes) {
    const std::string body =
        error_body(make_api_error(ErrorKind::invalid_request, "bad \xff byte"));
    EXPECT_NE(body.find("bad"), std::string::npos);
}

TEST(Errors, ApiResultValueThrowsApiException) {
    ApiResult<int> failed = make_api_error(ErrorKind::overloaded, "full");
    EXPECT_THROW((void)failed.value(), ApiException);
}

}  // namespace
}  // namespace brigade::api
