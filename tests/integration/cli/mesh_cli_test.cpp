// `brigade mesh token` / `brigade mesh id` with a temporary BRIGADE_HOME: first use creates the
// node key and a mesh, later calls print the same token, and broken state files give clear errors.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <string>

#include "mesh/identity.hpp"
#include "tests/support/test_support.hpp"

namespace brigade {
namespace {

using test::run_brigade;

std::string describe(const test::CommandResult& r) {
    return "exit " + std::to_string(r.exit_code) + "\nstdout: " + r.out + "\nstderr: " + r.err;
}

std::string strip_newline(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    return s;
}

// Points BRIGADE_HOME at a fresh directory for the life of the object (run_brigade inherits it).
class TempHome {
public:
    TempHome() : home_(tmp_.path() / "home") {
        const char* old = std::getenv("BRIGADE_HOME");
        if (old) old_ = old;
        had_old_ = old != nullptr;
        ::setenv("BRIGADE_HOME", home_.c_str(), 1);
    }
    ~TempHome() {
        if (had_old_) {
            ::setenv("BRIGADE_HOME", old_.c_str(), 1);
        } else {
            ::unsetenv("BRIGADE_HOME");
        }
    }
    const std::filesystem::path& path() const { return home_; }

private:
    test::TempDir tmp_;
    std::filesystem::path home_;
    std::string old_;
    bool had_old_ = false;
};

TEST(MeshCli, TokenIsCreatedOnceThenStableAndDecodes) {
    TempHome home;
    const auto first = run_brigade({"mesh", "token"});
    ASSERT_EQ(first.exit_code, 0) << describe(first);
    EXPECT_NE(first.err.find("created a new mesh"), std::string::npos) << first.err;
    EXPECT_TRUE(std::filesystem::exists(home.path() / "mesh.json"));
    EXPECT_TRUE(std::filesystem::exists(home.path() / "node.key"));

    const auto second = run_brigade({"mesh", "token"});
    ASSERT_EQ(second.exit_code, 0) << describe(second);
    EXPECT_EQ(second.out, first.out);
    EXPECT_EQ(second.err.find("created"), std::string::npos) << second.err;

    const auto token = mesh::decode_invite_token(strip_newline(first.out));
    ASSERT_TRUE(token) << token.error().message << "\n" << first.out;
    const auto stored = mesh::load_mesh_credentials(home.path());
    ASSERT_TRUE(stored) << stored.error().message;
    EXPECT_EQ(token->mesh.id, stored->id);
    EXPECT_EQ(token->mesh.secret, stored->secret);
}

TEST(MeshCli, TwoHomesGetDifferentMeshes) {
    std::string a;
    {
        TempHome home;
        const auto r = run_brigade({"mesh", "token"});
        ASSERT_EQ(r.exit_code, 0) << describe(r);
        a = r.out;
    }
    TempHome home;
    const auto r = run_brigade({"mesh", "token"});
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_NE(r.out, a);
}

TEST(MeshCli, IdIsStableAndMatchesTheKey) {
    TempHome home;
    const auto first = run_brigade({"mesh", "id"});
    ASSERT_EQ(first.exit_code, 0) << describe(first);
    const auto id = mesh::NodeId::parse(strip_newline(first.out));
    ASSERT_TRUE(id) << id.error().message << "\n" << first.out;
    const auto key = mesh::load_or_create_node_key(home.path());
    ASSERT_TRUE(key) << key.error().message;
    EXPECT_EQ(key->id(), *id);
    const auto second = run_brigade({"mesh", "id"});
    ASSERT_EQ(second.exit_code, 0) << describe(second);
    EXPECT_EQ(second.out, first.out);
}

TEST(MeshCli, GarbledMeshFileIsAClearError) {
    TempHome home;
    ASSERT_EQ(run_brigade({"mesh", "token"}).exit_code, 0);
    const auto mesh_file = home.path() / "mesh.json";
    test::write_file(mesh_file, "{not json");
    ::chmod(mesh_file.c_str(), 0600);
    const auto r = run_brigade({"mesh", "token"});
    EXPECT_EQ(r.exit_code, 1) << describe(r);
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_NE(r.err.find("mesh.json"), std::string::npos) << r.err;
}

TEST(MeshCli, OpenPermissionsOnTheMeshFileAreRefused) {
    TempHome home;
    ASSERT_EQ(run_brigade({"mesh", "token"}).exit_code, 0);
    ::chmod((home.path() / "mesh.json").c_str(), 0644);
    const auto r = run_brigade({"mesh", "token"});
    EXPECT_EQ(r.exit_code, 1) << describe(r);
    EXPECT_NE(r.err.find("chmod 600"), std::string::npos) << r.err;
}

TEST(MeshCli, GarbledNodeKeyIsAClearError) {
    TempHome home;
    ASSERT_EQ(run_brigade({"mesh", "id"}).exit_code, 0);
    const auto key_file = home.path() / "node.key";
    test::write_file(key_file, "garbage");
    ::chmod(key_file.c_str(), 0600);
    for (const char* verb : {"id", "token"}) {
        const auto r = run_brigade({"mesh", verb});
        EXPECT_EQ(r.exit_code, 1) << verb << "\n" << describe(r);
        EXPECT_NE(r.err.find("node.key"), std::string::npos) << r.err;
    }
}

}  // namespace
}  // namespace brigade
