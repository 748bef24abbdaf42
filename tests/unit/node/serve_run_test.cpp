// The serve record of `brigade stop`: encoded and decoded exactly, anything else refused with a
// message; written to a fresh home and removed only by its own process; a zombie counts as gone.
#include "node/serve_run.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "tests/support/test_support.hpp"

namespace brigade::node {
namespace {

TEST(ServeRun, RoundTripsAndRefusesWhatIsNotARecord) {
    const ServeRun run{4242, "http://[::1]:8177", 1764000000};
    auto back = decode_serve_run(encode_serve_run(run));
    ASSERT_TRUE(back) << back.error().message;
    EXPECT_EQ(*back, run);
    for (const char* bad :
         {"", "[]", "{\"pid\": 0, \"url\": \"u\", \"started_unix\": 1}",
          "{\"pid\": -3, \"url\": \"u\", \"started_unix\": 1}",
          "{\"pid\": 99999999999, \"url\": \"u\", \"started_unix\": 1}",
          "{\"pid\": 1.5, \"url\": \"u\", \"started_unix\": 1}",
          "{\"pid\": 7, \"started_unix\": 1}", "{\"pid\": 7, \"url\": \"u\"}",
          "{\"pid\": 7, \"url\": 5, \"started_unix\": 1}", "{\"pid\": 7, \"url"}) {
        auto r = decode_serve_run(bad);
        ASSERT_FALSE(r) << bad;
        EXPECT_NE(r.error().message.find("serve.json"), std::string::npos) << bad;
    }
}

TEST(ServeRun, WrittenToANewHomeReadBackAndRemovedOnlyByItsProcess) {
    test::TempDir dir;
    const auto home = dir.path() / "home";
    auto none = read_serve_run(home);
    ASSERT_TRUE(none);
    EXPECT_FALSE(*none);
    ASSERT_TRUE(write_serve_run(home, {100, "http://127.0.0.1:1", 5}));
    auto read = read_serve_run(home);
    ASSERT_TRUE(read && *read);
    EXPECT_EQ((*read)->pid, 100);
    remove_serve_run(home, 101);  // a later run replaced the record of 101: it stays
    EXPECT_TRUE(std::filesystem::exists(serve_run_path(home)));
    remove_serve_run(home, 100);
    EXPECT_FALSE(std::filesystem::exists(serve_run_path(home)));
}

// A record whose pid went to another program after a crash: `brigade stop` must not signal it.
TEST(ServeRun, OnlyAServeProcessIsTakenForTheNode) {
    using namespace std::string_literals;
    EXPECT_TRUE(cmdline_runs_serve("/usr/bin/brigade\0serve\0--port\0008177\0"s));
    EXPECT_TRUE(cmdline_runs_serve("brigade\0serve"s));
    EXPECT_FALSE(cmdline_runs_serve("/usr/bin/serve\0--flag\0"s));  // the program's own name
    EXPECT_FALSE(cmdline_runs_serve("vim\0notes.txt\0"s));
    EXPECT_FALSE(cmdline_runs_serve(""));
    EXPECT_FALSE(process_runs_serve(::getpid()));  // this test binary
}

TEST(ServeRun, AZombieIsNotRunning) {
    EXPECT_EQ(proc_stat_state("123 (brigade) S 1 2 3"), 'S');
    EXPECT_EQ(proc_stat_state("123 (a) b) (c) Z 1 2"), 'Z');  // a name with parentheses
    EXPECT_EQ(proc_stat_state("123 brigade S"), '?');
    EXPECT_EQ(proc_stat_state("123 (x)"), '?');
    EXPECT_TRUE(process_running(::getpid()));
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) ::_exit(0);
    // Not reaped yet: a zombie, which `brigade stop` must take for an exited node.
    bool gone = false;
    for (int i = 0; i < 500 && !gone; ++i) {
        gone = !process_running(child);
        if (!gone) ::usleep(10'000);
    }
    EXPECT_TRUE(gone);
    int status = 0;
    ::waitpid(child, &status, 0);
    EXPECT_FALSE(process_running(child));
    EXPECT_FALSE(process_running(0));
}

}  // namespace
}  // namespace brigade::node
