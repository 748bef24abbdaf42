#pragma once
// Helpers shared by the test suites: where data lives, temporary directories, running the
// `brigade` binary.

#include <filesystem>
#include <string>
#include <vector>

namespace brigade::test {

// ../shared/data beside the checkout; empty if absent (tests then GTEST_SKIP and say so).
std::filesystem::path shared_data_dir();
// The repository root.
std::filesystem::path source_dir();
// The built `brigade` executable.
std::filesystem::path brigade_binary();

// A fresh directory under the system temp dir, removed when the object dies.
class TempDir {
public:
    TempDir();
    ~TempDir();
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
};

struct CommandResult {
    int exit_code = -1;
    std::string out;  // stdout
    std::string err;  // stderr
};

// Runs `brigade args...` (no shell), capturing stdout and stderr; kills it after timeout_s.
CommandResult run_brigade(const std::vector<std::string>& args, int timeout_s = 120);

std::string read_file(const std::filesystem::path& p);
void write_file(const std::filesystem::path& p, const std::string& bytes);

}  // namespace brigade::test
