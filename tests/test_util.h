// Helpers shared by the tests: fixture paths, temp dirs, running the CLI.
#pragma once
#include <string>
#include <vector>

namespace egtest {

/// ../shared (read-only fixtures).
std::string shared_dir();
/// The repository root.
std::string source_dir();
/// Path of the built edgegemma binary.
std::string cli_path();
/// A fresh empty temporary directory (removed at process exit).
std::string make_temp_dir();
/// Whole file as a string; throws std::runtime_error if unreadable.
std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& data);

struct CmdResult {
  int exit_code = -1;   // -1 if it did not exit normally (signal)
  std::string out;      // stdout
  std::string err;      // stderr
};
/// Runs `args` (argv, no shell) with optional stdin text; captures stdout and stderr.
CmdResult run_cmd(const std::vector<std::string>& args, const std::string& stdin_text = "");

}  // namespace egtest
