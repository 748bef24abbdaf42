#include <gtest/gtest.h>

#include "tests/support/test_support.hpp"

namespace brigade::test {
namespace {

TEST(Cli, VersionPrintsAndExitsZero) {
    auto r = run_brigade({"version"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("brigade"), std::string::npos);
}

TEST(Cli, UnknownSubcommandFails) {
    auto r = run_brigade({"no-such-command"});
    EXPECT_NE(r.exit_code, 0);
}

}  // namespace
}  // namespace brigade::test
